package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// WithShare makes the level named level of [WithPath] (its root or a
// level below) a parent shared by its children, the keys of the level
// below it, as [core.Share] says: fair share among them when it is
// contended (with weights), and priority classes with reserves of its
// burst, a request's class chosen by [WithClass]. An upstream's quota
// shared fairly by tenants, say:
//
//	httplimit.New(lim, core.PerSecond(1000).WithBurst(100), keyfunc.Static("payments-api"),
//		httplimit.WithPath("upstream", policy.PathLevel{Name: "tenant", Key: keyfunc.Header("X-Tenant"), Limits: []core.Limit{core.PerSecond(500)}}),
//		httplimit.WithShare("upstream", core.Share{Fair: true}))
//
// A denial by the shared level beyond its bucket is a 429 like any, whose
// [core.Result.Reason] says "fair share" or "class reserve" (the problem
// body's reason member, with [WithProblemJSON]); the level must have one
// continuous limit. New panics (or returns an error, for the policy) for
// a level WithPath does not name, and for a Share [core.Limiter.PreparePath]
// refuses.
//
// Default: none; no level is shared.
func WithShare[C, H any](level string, s core.Share) Option[C, H] {
	return func(c *Config[C, H]) {
		c.shareLevel, c.share = level, &s
	}
}

// WithClass picks each request's priority class of the [WithShare] level
// with f, a function of the request as a key function is: its result is a
// class's name. A request whose class f does not find ([keyfunc.ErrNoKey],
// or "") is of the last class; a name the level has no class of fails the
// request as a limit function's error does. f must be safe for
// concurrent use.
//
// Default: every request is of the last class.
func WithClass[C, H any](f keyfunc.Func) Option[C, H] {
	return func(c *Config[C, H]) { c.classOf = f }
}

// checkShare validates WithShare and WithClass against ps, the policy's
// path whose root has limits root (unless a request chooses others), by
// preparing the path's static levels on lim (which does no I/O).
func checkShare[C, H any](cfg *Config[C, H], lim *core.Limiter, root []core.Limit, ps *pathSet) error {
	switch {
	case cfg.share == nil && cfg.classOf != nil:
		return errors.New("WithClass without WithShare: a request's class is of a shared level")
	case cfg.share == nil:
		return nil
	case ps == nil:
		return errors.New("WithShare without WithPath: the shared level is a level of a path")
	case cfg.classOf != nil && len(cfg.share.Classes) == 0:
		return errors.New("WithClass: the shared level has no classes")
	}
	names := []string{ps.root}
	for _, lv := range ps.below {
		names = append(names, lv.Name)
	}
	i := slices.Index(names, cfg.shareLevel)
	if i < 0 {
		return fmt.Errorf("WithShare: no level of WithPath is named %q", cfg.shareLevel)
	}
	ps.share, ps.shareAt, ps.classOf = cfg.share, i, cfg.classOf
	// The levels' limits as far as they are static, the shared level's at
	// least: PreparePath says what is wrong with the Share.
	levels := []core.Level{{Name: ps.root, Limits: root}}
	for _, lv := range ps.below {
		if len(lv.Limits) == 0 {
			break
		}
		levels = append(levels, core.Level{Name: lv.Name, Limits: lv.Limits})
	}
	if i >= len(levels) {
		return nil // a planned level's limits are known per request
	}
	levels[i].Share = cfg.share
	if _, err := lim.PreparePath("", levels...); err != nil {
		return fmt.Errorf("WithShare: %w", err)
	}
	return nil
}

// shareRules completes rl, a path's rule in which names[i] is the level
// of each of levels, with the rules of its classes.
func (ps *pathSet) shareRules(rl *rule) error {
	if ps.share == nil || len(ps.share.Classes) == 0 {
		return nil
	}
	rl.classes = make(map[string]*rule, len(ps.share.Classes))
	for _, c := range ps.share.Classes {
		pr, err := rl.path.InClass(c.Name)
		if err != nil {
			return err
		}
		cr := *rl
		cr.path = pr
		rl.classes[c.Name] = &cr
	}
	return nil
}

// writeShareMembers writes a 429's members about a shared level (see
// WithShare): "reason" ("fair share", "class reserve") when the shared
// level denied beyond its bucket, and "class" when the request has one.
// Both are bounded labels of the configuration, never request data.
func writeShareMembers(b *strings.Builder, d *decided) {
	if d.reason != "" {
		b.WriteString(`,"reason":`)
		b.WriteString(strconv.Quote(d.reason))
	}
	if d.class != "" {
		b.WriteString(`,"class":`)
		b.WriteString(jsonString(d.class))
	}
}

// jsonString is s as a JSON string.
func jsonString(s string) string {
	v, err := json.Marshal(s)
	if err != nil {
		return `""`
	}
	return string(v)
}

// classRule returns the rule of request r's class under rl.
func (ps *pathSet) classRule(r keyfunc.Request, rl *rule) (*rule, error) {
	if rl.classes == nil || ps.classOf == nil {
		return rl, nil
	}
	name, err := ps.classOf(r)
	if errors.Is(err, keyfunc.ErrNoKey) || err == nil && name == "" {
		return rl, nil
	}
	if err != nil {
		return nil, err
	}
	if cr := rl.classes[name]; cr != nil {
		return cr, nil
	}
	return nil, fmt.Errorf("policy: WithClass: the shared level has no class %q", name)
}
