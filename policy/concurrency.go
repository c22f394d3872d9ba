package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core"
)

// capRule is a policy's concurrency cap (see WithConcurrency), prepared on
// the engine, with the header values that never change computed once.
type capRule struct {
	engine     *core.Concurrency
	lim        *core.Limiter
	name       string // the cap's name, for the log
	item       string // the cap's RateLimit item name
	policyItem string // its RateLimit-Policy item
	max        string // X-RateLimit-Limit on a refusal
	said       atomic.Bool
}

// capRetry is the wait a refusal by the cap advises, in Retry-After and in
// its verdict's Result: a slot frees when a request ends, which no one can
// foresee, so the least the field can say.
const capRetry = time.Second

func newCapRule(lim *core.Limiter, c core.ConcurrencyLimit) (*capRule, error) {
	engine, err := lim.PrepareConcurrency(c)
	if err != nil {
		return nil, err
	}
	return &capRule{
		engine:     engine,
		lim:        lim,
		name:       c.Name,
		item:       capItem(c),
		policyItem: capPolicyItem(c),
		max:        strconv.Itoa(c.Max),
	}, nil
}

// slotPrefix returns what is put before each key to name its slots in
// scope: the scope, hashed, so that a scope's slots are its own.
func slotPrefix(scope string) string {
	sum := sha256.Sum256([]byte(scope))
	return "s" + hex.EncodeToString(sum[:6]) + ":"
}

// acquire takes a slot of key in the scope whose slotPrefix is prefix.
func (c *capRule) acquire(ctx context.Context, prefix, key string) (*core.Lease, error) {
	return c.engine.Acquire(ctx, prefix+key)
}

// releaseFailed logs the first release of the policy that failed: they
// fail alike while the store is down, and the slots free themselves.
func (c *capRule) releaseFailed(err error) {
	if c.said.Swap(true) {
		return
	}
	c.lim.Logger().Warn("sluice: a concurrency slot could not be released; it frees itself within its lease (logged once per middleware)",
		"cap", c.name, "max", c.max, "error", err.Error())
}

// Done gives back the concurrency slot the request holds (see
// [WithConcurrency]). An adapter calls it, deferred, around the handlers it
// passes a Continue on to, so that the slot is given back however they
// end: returning, panicking, or after the client hung up. It is safe on
// every verdict and idempotent, and does nothing for a verdict that holds
// no slot (no cap, a denial, a failure, a skipped request).
//
// The release outlives the request's context: it keeps the context's
// values but not its cancellation or deadline, and is bounded by the
// limiter's time budget instead ([core.WithTimeout]; with a budget of
// zero, by the Redis client's own timeouts). A release that fails (the store is down, or the
// slot's lease expired first) is logged once per middleware; the slot then
// frees itself within its lease. Copies of a verdict give back its slot
// once between them (the lease releases once). The receiver is a value so
// that a deferred Done keeps the verdict on the caller's stack: a pointer
// receiver made every request's verdict escape to the heap.
func (v Verdict) Done() {
	if v.lease == nil {
		return
	}
	ls := v.lease
	ctx := context.Background()
	if v.ctx != nil {
		ctx = context.WithoutCancel(v.ctx)
	}
	if err := ls.Release(ctx); err != nil && v.rule != nil && v.rule.cap != nil {
		v.rule.cap.releaseFailed(err)
	}
}
