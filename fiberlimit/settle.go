package fiberlimit

import (
	"errors"

	"github.com/gofiber/fiber/v2"
	"github.com/sluicehq/sluice/policy"
)

// serveSettled passes a request whose verdict settles by its response on
// down the chain, and settles it once c.Next returns (or panics, as status
// 500). fasthttp sends the response only after the handlers return, so the
// header fields can always be rewritten then to describe the bucket after
// the settlement, whatever the settlement needs.
// v is taken by value, so that only a settling request's verdict moves to
// the heap.
func serveSettled(c *fiber.Ctx, verdict policy.Verdict) (err error) {
	v := &verdict
	if !v.AtStatus() {
		// WithFinalCost: the handlers get the user context SetCost looks in.
		c.SetUserContext(v.Context(c.UserContext()))
	}
	ok := false
	defer func() {
		if v.Settle(request{c}, policy.Response{Status: status(c, err, ok), Header: responseHeader{c}}) {
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
func status(c *fiber.Ctx, err error, ok bool) int {
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
// ([policy.Response]'s Header). It holds a single pointer, so passing it
// as an interface does not allocate, and Get copies only the field it is
// asked for.
type responseHeader struct{ c *fiber.Ctx }

func (h responseHeader) Get(name string) string { return string(h.c.Response().Header.Peek(name)) }
