package fiberv3limit

import (
	"errors"

	"github.com/gofiber/fiber/v3"
	"github.com/sluicehq/sluice/policy"
)

// serveSettled passes a request whose verdict settles by its response on
// down the chain, and settles it once c.Next returns (or panics, as status
// 500). fasthttp sends the response only after the handlers return, so the
// header fields can always be rewritten then to describe the bucket after
// the settlement, whatever the settlement needs.
// v is taken by value, so that only a settling request's verdict moves to
// the heap.
func serveSettled(c fiber.Ctx, verdict policy.Verdict) (err error) {
	v := &verdict
	if !v.AtStatus() {
		// WithFinalCost: the handlers get the context SetCost looks in.
		c.SetContext(v.Context(c.Context()))
	}
	ok := false
	defer func() {
		if v.Settle(view(c), policy.Response{Status: status(c, err, ok), Header: headerView(c)}) {
			v.Headers(c.Set)
		}
		v.Done()
	}()
	err = c.Next()
	ok = true
	return err
}

// status is the status of c's response once c.Next returned err (ok is
// false when it panicked): for an error, the one the app's ErrorHandler
// answers it with by default, a *fiber.Error's Code or 500; else the
// status set, 200 when none was.
func status(c fiber.Ctx, err error, ok bool) int {
	switch {
	case !ok:
		return fiber.StatusInternalServerError
	case err != nil:
		if fe := (*fiber.Error)(nil); errors.As(err, &fe) {
			return fe.Code
		}
		return fiber.StatusInternalServerError
	}
	return c.Response().StatusCode()
}

// responseHeader reads the response's header fields for the settlement
// ([policy.Response]'s Header); Get copies only the field it is asked
// for. As with the request's view, it holds the *fiber.DefaultCtx when
// that is the context, a single pointer that passes as an interface
// without allocating.
type responseHeader[C fiber.Ctx] struct{ c C }

func (h responseHeader[C]) Get(name string) string {
	return string(h.c.Response().Header.Peek(name))
}

// headerView returns the response header view of c.
func headerView(c fiber.Ctx) interface{ Get(string) string } {
	if d, ok := c.(*fiber.DefaultCtx); ok {
		return responseHeader[*fiber.DefaultCtx]{d}
	}
	return responseHeader[fiber.Ctx]{c}
}
