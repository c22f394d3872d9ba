package core

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"math"
	"sync"
)

// A canary (Rule.WithEnforce) enforces a rule on a fixed share of keys and
// leaves the rest in dry run. Which keys: those whose keyed hash, read as
// a 64-bit number, is below fraction·2⁶⁴. So the choice
//
//   - depends on the key alone (not on the replica, the process, the rule's
//     limits or scope): every replica, before and after a restart, and
//     every rule at the same fraction enforce the same keys, and a
//     limit can be changed during a canary without reshuffling it;
//   - grows monotonically with the fraction: a key below 5%·2⁶⁴ is below
//     20%·2⁶⁴;
//   - is keyed: the hash is an HMAC-SHA256, under a key derived from
//     WithSlotKey's secret when the limiter has one, so clients who choose
//     their keys (an address, a tenant header) cannot tell which keys are
//     in the canary, and cannot pick keys outside it to escape the limit.
//     Without WithSlotKey the key is a fixed salt: still the same set on
//     every replica with nothing to configure, but one a reader of this
//     source could compute. The key is derived, not the secret itself,
//     because WithSlotKey's hash of the same key picks its Cluster slot:
//     with one hash for both, the canary would be a range of slots, one
//     node's keys.

// canarySalt keys the canary's hash when the limiter has no WithSlotKey.
// Changing it changes which keys every canary enforces.
var canarySalt = []byte("sluice canary enforcement v1 (no WithSlotKey)")

// canaryHash is a limiter's keyed hash of keys for canaries: a pool of
// HMACs under one key, so that hashing a key allocates nothing once warm.
type canaryHash struct {
	pool sync.Pool // *canaryState
}

// canaryState is one HMAC with its buffers.
type canaryState struct {
	mac hash.Hash
	buf []byte // the key's bytes
	sum []byte
}

// newCanaryHash returns the canary hash of a limiter whose WithSlotKey
// secret is slotKey (nil: none).
func newCanaryHash(slotKey []byte) *canaryHash {
	key := canarySalt
	if slotKey != nil {
		m := hmac.New(sha256.New, slotKey)
		m.Write([]byte("sluice canary enforcement v1"))
		key = m.Sum(nil)
	}
	c := &canaryHash{}
	c.pool.New = func() any { return &canaryState{mac: hmac.New(sha256.New, key)} }
	return c
}

// of returns key's hash as a number in [0, 2⁶⁴).
func (c *canaryHash) of(key string) uint64 {
	s := c.pool.Get().(*canaryState)
	s.mac.Reset()
	s.buf = append(s.buf[:0], key...)
	s.mac.Write(s.buf)
	s.sum = s.mac.Sum(s.sum[:0])
	h := binary.BigEndian.Uint64(s.sum)
	if cap(s.buf) <= 1024 { // do not keep a huge key's buffer
		c.pool.Put(s)
	}
	return h
}

// canary is a plan's share of enforced keys (see Rule.WithEnforce).
type canary struct {
	below uint64 // a key is enforced iff its hash is below this
	hash  *canaryHash
}

// enforces reports whether key is one of the canary's enforced keys.
func (c *canary) enforces(key string) bool {
	return c.below != 0 && c.hash.of(key) < c.below
}

// dry reports whether p's decision of key is a dry run's: a dry-run rule's,
// or a canary's of a key it does not enforce.
func (p *plan) dry(key string) bool {
	return p.dryRun || p.canary != nil && p.canary.spares(key)
}

// spares reports whether key is one of the keys the canary does not
// enforce: a call of its own (not inlined), so that plan.dry is, and a
// decision of a plan without a canary calls nothing (clientcost -cold).
//
//go:noinline
func (c *canary) spares(key string) bool { return !c.enforces(key) }

// modesOf gives p the modes of q, a plan of the same limits and scope:
// dry run, canary, penalty, warning threshold and shadow limits (not
// token leases).
func (p *plan) modesOf(q *plan) {
	p.dryRun, p.canary, p.penalty, p.warn = q.dryRun, q.canary, q.penalty, q.warn
	p.setShadow(q.shadow, q.shadows)
}

// WithEnforce returns a rule with the same limits, scope, penalty, dry run
// and buckets that enforces its limits on a fraction of keys, picked by a
// keyed hash of the key, and decides every other key as [Rule.DryRun]
// does: decided, charged and observed as usual, marked [Result.DryRun],
// so that its would-be denials are reported, never enforced. It is a
// canary for a new limit: enforce it on 5% of tenants, then 20%, then all.
//
// The enforced keys are the same on every replica and after restarts
// (the hash depends on the key and on [WithSlotKey]'s secret, which
// keys it so that clients cannot tell or choose which keys are
// enforced; without one, on a fixed salt), the same for every rule at the
// same fraction, and grow with the fraction: a key enforced at 5% is
// enforced at 20%. [Rule.Enforced] says whether a key is.
//
// A fraction of 1 enforces every key: the rule decides as r does, at no
// cost. Below 1, each decision hashes its key once (an HMAC-SHA256). A
// fraction of 0 enforces no key. A dry-run rule stays a dry run whatever
// the fraction; WithEnforce again replaces the fraction. The rule itself
// is unchanged. Apply [Rule.WithTokenLeases] after WithEnforce, which
// returns a rule without leases. WithEnforce returns an error for a
// fraction that is NaN or outside [0, 1].
//
// docs/production.md ("A canary: enforce on a share of keys") shows a
// canary between a dry run and enforcement.
func (r *Rule) WithEnforce(fraction float64) (*Rule, error) {
	if !(fraction >= 0 && fraction <= 1) {
		return nil, fmt.Errorf("core: Rule.WithEnforce: fraction %v is not from 0 to 1", fraction)
	}
	p, err := r.lim.plans.compileScoped(r.p.scope, r.p.limits)
	if err != nil {
		return nil, err
	}
	p.modesOf(r.p)
	p.canary = r.lim.plans.canaryHash.canaryOf(fraction)
	return &Rule{lim: r.lim, p: p}, nil
}

// canaryOf returns the canary of fraction, a number from 0 to 1, on c:
// nil for 1, which enforces every key.
func (c *canaryHash) canaryOf(fraction float64) *canary {
	if fraction >= 1 {
		return nil
	}
	// fraction·2⁶⁴ is below 2⁶⁴ here, and exact for a power of two.
	return &canary{below: uint64(math.Ldexp(fraction, 64)), hash: c}
}

// Enforced reports whether the rule enforces its limits on key: false for
// a dry-run rule ([Rule.DryRun]) and for a key a canary leaves in dry run
// ([Rule.WithEnforce]), true otherwise. Its decisions of key are marked
// [Result.DryRun] exactly when Enforced is false. It is safe for
// concurrent use.
func (r *Rule) Enforced(key string) bool { return !r.p.dry(key) }

// WithEnforce returns a rule with the same levels, penalty, dry run and
// buckets that enforces its levels on a fraction of paths, picked by the
// keyed hash of the path's root key, and decides every other path as
// [PathRule.DryRun] does: decided, charged and observed as usual, marked
// [Result.DryRun]. The hash is [Rule.WithEnforce]'s, so a root key is
// enforced by a path rule exactly when a Rule at the same fraction
// enforces it as a key (the same on every replica and after restarts,
// keyed by [WithSlotKey]'s secret, and growing with the fraction): a
// canary of a new limit on 5% of organisations takes each organisation
// whole, with all its teams, users and keys. [PathRule.Enforced] says
// whether a root is enforced.
//
// A fraction of 1 enforces every path, at no cost; 0 none. A dry-run
// rule stays a dry run whatever the fraction; WithEnforce again replaces
// the fraction. The rule itself is unchanged. WithEnforce returns an
// error for a fraction that is NaN or outside [0, 1].
func (r *PathRule) WithEnforce(fraction float64) (*PathRule, error) {
	if !(fraction >= 0 && fraction <= 1) {
		return nil, fmt.Errorf("core: PathRule.WithEnforce: fraction %v is not from 0 to 1", fraction)
	}
	c := *r
	c.canary = r.lim.plans.canaryHash.canaryOf(fraction)
	return &c, nil
}

// Enforced reports whether the rule enforces its levels on the paths
// whose root key is root: false for a dry-run rule ([PathRule.DryRun])
// and for a root a canary leaves in dry run ([PathRule.WithEnforce]),
// true otherwise. Its decisions of those paths are marked [Result.DryRun]
// exactly when Enforced is false. It is safe for concurrent use.
func (r *PathRule) Enforced(root string) bool { return !r.dry(root) }

// dry reports whether r's decisions of paths under root are a dry run's.
func (r *PathRule) dry(root string) bool {
	return r.dryRun || r.canary != nil && !r.canary.enforces(root)
}
