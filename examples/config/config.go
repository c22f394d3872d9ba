package main

import (
	"fmt"
	"net/http"
	"net/netip"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/policy"
)

// Config is a validated configuration file. Parse returns it; build turns
// it into limiters and an http.Handler.
type Config struct {
	Listen           string
	MetricsListen    string // "" for no metrics endpoint
	Redis            RedisConfig
	Policy           core.FailurePolicy
	FallbackReplicas int
	Headers          policy.HeaderStyle
	ProblemJSON      bool
	TrustedProxies   []netip.Prefix
	TrustedHeader    string
	BeforeAuth       *BeforeAuth // nil: no limit before authentication
	Plans            map[string]core.Limit
	Tenants          []Tenant
	Routes           []Route
}

// RedisConfig holds the limiter's Redis settings. The address is not part
// of the file: it comes from REDIS_ADDR.
type RedisConfig struct {
	Prefix   string
	Timeout  time.Duration
	PoolSize int // 0: go-redis's default
	Batching int
}

// BeforeAuth is the per-IP limit every request passes before it is
// authenticated.
type BeforeAuth struct {
	Limit     core.Limit
	Penalty   time.Duration
	SkipPaths []string
}

// Tenant is a customer: its plan and the API keys that identify it.
type Tenant struct {
	Name    string
	Plan    string
	APIKeys []string
}

// Route is one endpoint and how it is limited.
type Route struct {
	Pattern     string
	Auth        bool
	Key         []string    // dimensions: "ip", "tenant", "route", "global"
	Limit       *core.Limit // nil when Plan is set or the route is not limited
	Plan        bool        // the limit is the authenticated tenant's plan
	ExtraLimits []core.Limit
	Cost        int
	Penalty     time.Duration
	Wait        time.Duration
	DryRun      bool
}

// limited reports whether the route has a limiter.
func (r *Route) limited() bool { return r.Limit != nil || r.Plan }

// keyDimensions are the values a route's "key" may list, in the order error
// messages give them.
var keyDimensions = []string{"ip", "tenant", "route", "global"}

// Parse reads and validates a configuration file. name is used in error
// messages, which name the line and the field at fault:
//
//	config.json:12: routes[1].limit.burst: must be at least 1
//
// Every problem found is reported, not only the first. The error is an
// *Error.
func Parse(name string, data []byte) (*Config, error) {
	s := &source{name: name, data: data}
	root, err := s.parseTree()
	if err != nil {
		return nil, err
	}
	cfg := s.config(root)
	if err := s.err(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// obj reads the fields of one JSON object. Each field is fetched once with
// get; done then reports the fields nobody asked for as unknown.
type obj struct {
	s      *source
	n      *node
	path   string
	fields map[string]*member
	asked  []string
}

// object returns a reader for n, or nil (after recording a problem) when n
// is not an object. Duplicate keys are problems too.
func (s *source) object(n *node, path string) *obj {
	if n.kind != kindObject {
		s.errorf(n.off, path, "want an object, got %s", describe(n))
		return nil
	}
	o := &obj{s: s, n: n, path: path, fields: make(map[string]*member)}
	for i := range n.members {
		m := &n.members[i]
		if commentKey(m.key) {
			continue
		}
		if first, dup := o.fields[m.key]; dup {
			line, _ := s.lineCol(first.off)
			s.errorf(m.off, join(path, m.key), "duplicate field (first set on line %d)", line)
			continue
		}
		o.fields[m.key] = m
	}
	return o
}

// get returns the value of field key, or nil when it is absent.
func (o *obj) get(key string) *node {
	o.asked = append(o.asked, key)
	if m := o.fields[key]; m != nil {
		return m.val
	}
	return nil
}

// has reports whether field key is present, without asking for it.
func (o *obj) has(key string) bool { return o.fields[key] != nil }

// missing records that a required field is absent.
func (o *obj) missing(key string) {
	o.s.errorf(o.n.off, o.path, "missing field %q", key)
}

// done reports every field that was not asked for.
func (o *obj) done() {
	for _, m := range o.n.members {
		if commentKey(m.key) || o.fields[m.key].off != m.off || slicesContains(o.asked, m.key) {
			continue // a comment, a duplicate (already reported), or a known field
		}
		msg := "unknown field"
		if s := suggest(m.key, o.asked); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		o.s.errorf(m.off, join(o.path, m.key), "%s", msg)
	}
}

func slicesContains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// suggest returns the known field closest to key, if it is close enough to
// be a typo.
func suggest(key string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if d := editDistance(strings.ToLower(key), k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := 1
			if a[i-1] == b[j-1] {
				c = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+c)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

// join appends a key to a path: "routes[1].limit", or `plans["a b"]` for a
// key that is not a plain name.
func join(path, key string) string {
	if !identRE.MatchString(key) {
		return path + "[" + strconv.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// describe names a value in "want ..., got ..." messages.
func describe(n *node) string {
	switch n.kind {
	case kindString:
		s := n.text
		if len(s) > 40 {
			s = s[:37] + "..."
		}
		return "the string " + strconv.Quote(s)
	case kindNumber:
		return n.text
	case kindBool:
		return strconv.FormatBool(n.boolean)
	}
	return n.kind.String()
}

func (s *source) str(n *node, path string) (string, bool) {
	if n.kind != kindString {
		s.errorf(n.off, path, "want a string, got %s", describe(n))
		return "", false
	}
	return n.text, true
}

func (s *source) integer(n *node, path string) (int, bool) {
	if n.kind != kindNumber {
		s.errorf(n.off, path, "want an integer, got %s", describe(n))
		return 0, false
	}
	v, err := strconv.Atoi(n.text)
	if err != nil {
		if strings.ContainsAny(n.text, ".eE") {
			s.errorf(n.off, path, "want an integer, got %s", n.text)
		} else {
			s.errorf(n.off, path, "%s is out of range", n.text)
		}
		return 0, false
	}
	return v, true
}

func (s *source) boolean(n *node, path string) (bool, bool) {
	if n.kind != kindBool {
		s.errorf(n.off, path, "want true or false, got %s", describe(n))
		return false, false
	}
	return n.boolean, true
}

// duration reads a Go duration string such as "1m" or "250ms".
func (s *source) duration(n *node, path string) (time.Duration, bool) {
	if n.kind != kindString {
		s.errorf(n.off, path, `want a duration such as "1m" or "250ms", got %s`, describe(n))
		return 0, false
	}
	d, err := time.ParseDuration(n.text)
	if err != nil {
		s.errorf(n.off, path, `want a duration such as "1m" or "250ms", got %q`, n.text)
		return 0, false
	}
	if d < 0 {
		s.errorf(n.off, path, "must not be negative, got %s", n.text)
		return 0, false
	}
	return d, true
}

func (s *source) array(n *node, path string) ([]*node, bool) {
	if n.kind != kindArray {
		s.errorf(n.off, path, "want an array, got %s", describe(n))
		return nil, false
	}
	return n.elems, true
}

// strs reads an array of non-empty strings.
func (s *source) strs(n *node, path string) ([]string, []*node) {
	elems, ok := s.array(n, path)
	if !ok {
		return nil, nil
	}
	var out []string
	var nodes []*node
	for i, e := range elems {
		v, ok := s.str(e, index(path, i))
		if !ok {
			continue
		}
		if v == "" {
			s.errorf(e.off, index(path, i), "must not be empty")
			continue
		}
		out, nodes = append(out, v), append(nodes, e)
	}
	return out, nodes
}

// limit reads a limit object: {"name", "rate", "period", "burst"}. Burst
// defaults to Rate, and Name to defName.
func (s *source) limit(n *node, path, defName string) (core.Limit, bool) {
	o := s.object(n, path)
	if o == nil {
		return core.Limit{}, false
	}
	l := core.Limit{Name: defName}
	ok := true
	if v := o.get("name"); v != nil {
		if name, good := s.str(v, join(path, "name")); good {
			l.Name = name
		} else {
			ok = false
		}
	}
	if v := o.get("rate"); v == nil {
		o.missing("rate")
		ok = false
	} else if rate, good := s.integer(v, join(path, "rate")); !good {
		ok = false
	} else if rate < 1 {
		s.errorf(v.off, join(path, "rate"), "must be at least 1")
		ok = false
	} else {
		l.Rate = rate
	}
	if v := o.get("period"); v == nil {
		o.missing("period")
		ok = false
	} else if d, good := s.duration(v, join(path, "period")); !good {
		ok = false
	} else if d < time.Microsecond || d%time.Microsecond != 0 {
		s.errorf(v.off, join(path, "period"), "must be a positive whole number of microseconds, got %s", v.text)
		ok = false
	} else {
		l.Period = d
	}
	l.Burst = l.Rate
	if v := o.get("burst"); v != nil {
		if b, good := s.integer(v, join(path, "burst")); !good {
			ok = false
		} else if b < 1 {
			s.errorf(v.off, join(path, "burst"), "must be at least 1")
			ok = false
		} else {
			l.Burst = b
		}
	}
	o.done()
	if !ok {
		return core.Limit{}, false
	}
	if err := l.Validate(); err != nil { // the limits of exact arithmetic
		s.errorf(n.off, path, "%v", err)
		return core.Limit{}, false
	}
	return l, true
}

// config reads the whole file.
func (s *source) config(root *node) *Config {
	cfg := &Config{
		Listen:           "127.0.0.1:8080",
		Redis:            RedisConfig{Prefix: "sluice:", Timeout: 50 * time.Millisecond, Batching: 4},
		Policy:           core.FallbackLocal,
		FallbackReplicas: 1,
		Headers:          policy.HeadersLegacy,
		Plans:            map[string]core.Limit{},
	}
	if root.kind != kindObject {
		s.errorf(root.off, "", "the configuration must be a JSON object, got %s", describe(root))
		return cfg
	}
	o := s.object(root, "")
	if v := o.get("listen"); v != nil {
		if a, ok := s.str(v, "listen"); ok && a == "" {
			s.errorf(v.off, "listen", "must not be empty")
		} else if ok {
			cfg.Listen = a
		}
	}
	if v := o.get("metrics_listen"); v != nil {
		cfg.MetricsListen, _ = s.str(v, "metrics_listen")
	}
	if v := o.get("redis"); v != nil {
		s.redis(v, &cfg.Redis)
	}
	if v := o.get("failure"); v != nil {
		s.failure(v, cfg)
	}
	if v := o.get("headers"); v != nil {
		if name, ok := s.str(v, "headers"); ok {
			styles := map[string]policy.HeaderStyle{"legacy": policy.HeadersLegacy, "ietf": policy.HeadersIETF, "both": policy.HeadersBoth, "none": policy.HeadersNone}
			if st, known := styles[name]; known {
				cfg.Headers = st
			} else {
				s.errorf(v.off, "headers", `unknown style %q (want "legacy", "ietf", "both" or "none")`, name)
			}
		}
	}
	if v := o.get("problem_json"); v != nil {
		cfg.ProblemJSON, _ = s.boolean(v, "problem_json")
	}
	if v := o.get("trusted_proxies"); v != nil {
		list, nodes := s.strs(v, "trusted_proxies")
		for i, c := range list {
			ps, err := keyfunc.ParseProxies(c)
			if err != nil {
				s.errorf(nodes[i].off, index("trusted_proxies", i), "not a CIDR prefix or an IP address: %q", c)
				continue
			}
			cfg.TrustedProxies = append(cfg.TrustedProxies, ps...)
		}
	}
	if v := o.get("trusted_header"); v != nil {
		if h, ok := s.str(v, "trusted_header"); ok {
			switch {
			case !validHeaderName(h):
				s.errorf(v.off, "trusted_header", "%q is not a valid header field name", h)
			case !o.has("trusted_proxies"):
				s.errorf(v.off, "trusted_header", `has no effect without "trusted_proxies": the header is read only from trusted proxies`)
			default:
				cfg.TrustedHeader = h
			}
		}
	}
	if v := o.get("before_auth"); v != nil {
		cfg.BeforeAuth = s.beforeAuth(v)
	}
	planNodes := map[string]*node{}
	if v := o.get("plans"); v != nil {
		if po := s.object(v, "plans"); po != nil {
			for _, m := range v.members {
				if commentKey(m.key) || po.fields[m.key] != nil && po.fields[m.key].off != m.off {
					continue
				}
				po.get(m.key)
				path := join("plans", m.key)
				if m.key == "" {
					s.errorf(m.off, "plans", "a plan needs a name")
					continue
				}
				if l, ok := s.limit(m.val, path, m.key); ok {
					cfg.Plans[m.key] = l
					planNodes[m.key] = m.val
				}
			}
		}
	}
	if v := o.get("tenants"); v != nil {
		cfg.Tenants = s.tenants(v, cfg.Plans)
	}
	if v := o.get("routes"); v == nil {
		o.missing("routes")
	} else {
		cfg.Routes = s.routes(v, cfg)
	}
	o.done()
	return cfg
}

func (s *source) redis(n *node, rc *RedisConfig) {
	o := s.object(n, "redis")
	if o == nil {
		return
	}
	if v := o.get("prefix"); v != nil {
		if p, ok := s.str(v, "redis.prefix"); ok {
			switch {
			case strings.ContainsAny(p, "{}"):
				s.errorf(v.off, "redis.prefix", "must not contain braces: the library owns the key's hash tag")
			case len(p) > 64:
				s.errorf(v.off, "redis.prefix", "is %d bytes, at most 64", len(p))
			default:
				rc.Prefix = p
			}
		}
	}
	if v := o.get("timeout"); v != nil {
		if d, ok := s.duration(v, "redis.timeout"); ok {
			rc.Timeout = d
		}
	}
	if v := o.get("pool_size"); v != nil {
		if n, ok := s.integer(v, "redis.pool_size"); ok && n < 1 {
			s.errorf(v.off, "redis.pool_size", "must be at least 1")
		} else if ok {
			rc.PoolSize = n
		}
	}
	if v := o.get("batching"); v != nil {
		if n, ok := s.integer(v, "redis.batching"); ok && n < 0 {
			s.errorf(v.off, "redis.batching", "must be 0 (off) or more")
		} else if ok {
			rc.Batching = n
		}
	}
	o.done()
}

func (s *source) failure(n *node, cfg *Config) {
	o := s.object(n, "failure")
	if o == nil {
		return
	}
	if v := o.get("policy"); v != nil {
		if name, ok := s.str(v, "failure.policy"); ok {
			found := false
			for _, p := range []core.FailurePolicy{core.FallbackLocal, core.FailOpen, core.FailClosed} {
				if p.String() == name {
					cfg.Policy, found = p, true
				}
			}
			if !found {
				s.errorf(v.off, "failure.policy", `unknown policy %q (want "fallback_local", "fail_open" or "fail_closed")`, name)
			}
		}
	}
	if v := o.get("fallback_replicas"); v != nil {
		if r, ok := s.integer(v, "failure.fallback_replicas"); ok && (r < 1 || r > 100_000) {
			s.errorf(v.off, "failure.fallback_replicas", "must be between 1 and 100000, got %d", r)
		} else if ok {
			cfg.FallbackReplicas = r
		}
	}
	o.done()
}

func (s *source) beforeAuth(n *node) *BeforeAuth {
	o := s.object(n, "before_auth")
	if o == nil {
		return nil
	}
	ba := &BeforeAuth{}
	ok := true
	if v := o.get("limit"); v == nil {
		o.missing("limit")
		ok = false
	} else if l, good := s.limit(v, "before_auth.limit", ""); good {
		ba.Limit = l
	} else {
		ok = false
	}
	if v := o.get("penalty"); v != nil {
		ba.Penalty, _ = s.duration(v, "before_auth.penalty")
	}
	if v := o.get("skip_paths"); v != nil {
		paths, nodes := s.strs(v, "before_auth.skip_paths")
		for i, p := range paths {
			if !strings.HasPrefix(p, "/") {
				s.errorf(nodes[i].off, index("before_auth.skip_paths", i), "must begin with /, got %q", p)
				continue
			}
			ba.SkipPaths = append(ba.SkipPaths, p)
		}
	}
	o.done()
	if !ok {
		return nil
	}
	return ba
}

func (s *source) tenants(n *node, plans map[string]core.Limit) []Tenant {
	o := s.object(n, "tenants")
	if o == nil {
		return nil
	}
	type firstUse struct {
		tenant string
		off    int
	}
	keys := map[string]firstUse{}
	var out []Tenant
	for _, m := range n.members {
		if commentKey(m.key) || o.fields[m.key] != nil && o.fields[m.key].off != m.off {
			continue
		}
		o.get(m.key)
		path := join("tenants", m.key)
		if m.key == "" {
			s.errorf(m.off, "tenants", "a tenant needs a name")
			continue
		}
		to := s.object(m.val, path)
		if to == nil {
			continue
		}
		t := Tenant{Name: m.key}
		if v := to.get("plan"); v == nil {
			to.missing("plan")
		} else if p, ok := s.str(v, join(path, "plan")); ok {
			if _, known := plans[p]; !known {
				s.errorf(v.off, join(path, "plan"), "unknown plan %q (plans: %s)", p, planList(plans))
			}
			t.Plan = p
		}
		if v := to.get("api_keys"); v == nil {
			to.missing("api_keys")
		} else {
			list, nodes := s.strs(v, join(path, "api_keys"))
			if len(v.elems) == 0 && v.kind == kindArray {
				s.errorf(v.off, join(path, "api_keys"), "must list at least one key")
			}
			for i, k := range list {
				if prev, dup := keys[k]; dup {
					line, _ := s.lineCol(prev.off)
					s.errorf(nodes[i].off, index(join(path, "api_keys"), i), "already used by tenant %q on line %d", prev.tenant, line)
					continue
				}
				keys[k] = firstUse{tenant: t.Name, off: nodes[i].off}
				t.APIKeys = append(t.APIKeys, k)
			}
		}
		to.done()
		out = append(out, t)
	}
	return out
}

func planList(plans map[string]core.Limit) string {
	if len(plans) == 0 {
		return "none defined"
	}
	names := make([]string, 0, len(plans))
	for name := range plans {
		names = append(names, name)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// methodNoSpace matches patterns such as "GET/items", which ServeMux reads
// as the host "GET" and the path "/items".
var methodNoSpace = regexp.MustCompile(`^(GET|HEAD|POST|PUT|PATCH|DELETE|CONNECT|OPTIONS|TRACE)/`)

// registeredAt is the part of ServeMux's conflict message that names Go
// source lines, which mean nothing to someone editing the file.
var registeredAt = regexp.MustCompile(` \(registered at [^)]*\)`)

func (s *source) routes(n *node, cfg *Config) []Route {
	elems, ok := s.array(n, "routes")
	if !ok {
		return nil
	}
	if len(elems) == 0 {
		s.errorf(n.off, "routes", "must list at least one route")
	}
	scratch := http.NewServeMux()
	patterns := map[string]int{}
	var out []Route
	for i, e := range elems {
		path := index("routes", i)
		o := s.object(e, path)
		if o == nil {
			continue
		}
		r := Route{Cost: 1}
		if v := o.get("pattern"); v == nil {
			o.missing("pattern")
		} else if p, good := s.str(v, join(path, "pattern")); good {
			pp := join(path, "pattern")
			if prev, dup := patterns[p]; dup {
				line, _ := s.lineCol(elems[prev].off)
				s.errorf(v.off, pp, "%q is already routes[%d] on line %d", p, prev, line)
			} else if methodNoSpace.MatchString(p) {
				s.errorf(v.off, pp, "%q reads as a host name followed by a path; put a space after the method", p)
			} else if err := register(scratch, p); err != nil {
				s.errorf(v.off, pp, "%v", err)
			} else {
				patterns[p] = i
				r.Pattern = p
			}
		}
		if v := o.get("auth"); v != nil {
			r.Auth, _ = s.boolean(v, join(path, "auth"))
		}
		if v := o.get("limit"); v != nil {
			if l, good := s.limit(v, join(path, "limit"), ""); good {
				r.Limit = &l
			}
		}
		planNode := o.get("plan")
		if planNode != nil {
			r.Plan, _ = s.boolean(planNode, join(path, "plan"))
			switch {
			case !r.Plan:
			case o.has("limit"):
				s.errorf(planNode.off, join(path, "plan"), `conflicts with "limit": a route takes its limit from one or the other`)
			case !r.Auth:
				s.errorf(planNode.off, join(path, "plan"), `needs "auth": true, since only authenticated requests have a tenant and a plan`)
			case len(cfg.Plans) == 0:
				s.errorf(planNode.off, join(path, "plan"), `no "plans" are defined`)
			}
		}
		limited := o.has("limit") || r.Plan
		if v := o.get("key"); v == nil {
			if limited {
				s.errorf(e.off, path, `missing field "key": a limited route needs one of "ip", "tenant", "route" or "global"`)
			}
		} else if !limited {
			s.errorf(v.off, join(path, "key"), `set on a route without "limit" or "plan"`)
		} else {
			s.routeKey(v, join(path, "key"), &r)
		}
		needsLimit := func(field string) (*node, bool) {
			v := o.get(field)
			if v != nil && !limited {
				s.errorf(v.off, join(path, field), `set on a route without "limit" or "plan"`)
				return nil, false
			}
			return v, v != nil
		}
		if v, ok := needsLimit("extra_limits"); ok {
			if list, good := s.array(v, join(path, "extra_limits")); good {
				for j, ln := range list {
					if l, good := s.limit(ln, index(join(path, "extra_limits"), j), ""); good {
						r.ExtraLimits = append(r.ExtraLimits, l)
					}
				}
			}
		}
		if v, ok := needsLimit("cost"); ok {
			if c, good := s.integer(v, join(path, "cost")); good {
				if c < 1 {
					s.errorf(v.off, join(path, "cost"), "must be at least 1")
				} else if msg := costTooHigh(c, &r, cfg); msg != "" {
					s.errorf(v.off, join(path, "cost"), "%s", msg)
				} else {
					r.Cost = c
				}
			}
		}
		if v, ok := needsLimit("penalty"); ok {
			r.Penalty, _ = s.duration(v, join(path, "penalty"))
		}
		if v, ok := needsLimit("wait"); ok {
			r.Wait, _ = s.duration(v, join(path, "wait"))
		}
		if v, ok := needsLimit("dry_run"); ok {
			r.DryRun, _ = s.boolean(v, join(path, "dry_run"))
		}
		o.done()
		out = append(out, r)
	}
	return out
}

// routeKey reads a route's key dimensions.
func (s *source) routeKey(n *node, path string, r *Route) {
	list, nodes := s.strs(n, path)
	if n.kind == kindArray && len(n.elems) == 0 {
		s.errorf(n.off, path, `must list at least one of "ip", "tenant", "route" or "global"`)
	}
	for i, k := range list {
		p := index(path, i)
		switch {
		case !slicesContains(keyDimensions, k):
			s.errorf(nodes[i].off, p, `unknown key %q (want "ip", "tenant", "route" or "global")`, k)
		case slicesContains(r.Key, k):
			s.errorf(nodes[i].off, p, "%q is listed twice", k)
		case k == "tenant" && !r.Auth:
			s.errorf(nodes[i].off, p, `"tenant" needs "auth": true: the tenant is known only after authentication`)
		default:
			r.Key = append(r.Key, k)
		}
	}
}

// costTooHigh explains why a fixed cost can never pass one of the route's
// limits, or returns "". Under fallback_local the local fallback's bursts
// count too: each replica's share of a Burst B is ceil(B/n), and a request
// costing more would be denied throughout a Redis outage.
func costTooHigh(c int, r *Route, cfg *Config) string {
	n := 1
	if cfg.Policy == core.FallbackLocal {
		n = cfg.FallbackReplicas
	}
	check := func(what string, burst int) string {
		if c > burst {
			return fmt.Sprintf("%d exceeds the burst of %s (%d); such a request could never pass", c, what, burst)
		}
		if local := (burst + n - 1) / n; c > local {
			return fmt.Sprintf("%d exceeds the burst of %s in the local fallback (ceil(%d/%d) = %d): every such request would be denied while Redis is down; lower the cost, raise the burst or lower failure.fallback_replicas",
				c, what, burst, n, local)
		}
		return ""
	}
	var limits []core.Limit
	if r.Limit != nil {
		limits = append(limits, *r.Limit)
	}
	limits = append(limits, r.ExtraLimits...)
	for _, l := range limits {
		if msg := check("limit "+l.String(), l.Burst); msg != "" {
			return msg
		}
	}
	if r.Plan {
		for _, name := range sortedKeys(cfg.Plans) {
			if msg := check(fmt.Sprintf("plan %q", name), cfg.Plans[name].Burst); msg != "" {
				return msg
			}
		}
	}
	return ""
}

// register adds pattern to mux, turning ServeMux's panics into errors.
func register(mux *http.ServeMux, pattern string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			msg := registeredAt.ReplaceAllString(fmt.Sprint(p), "")
			err = fmt.Errorf("%s", strings.ReplaceAll(strings.TrimSpace(msg), "\n", " "))
		}
	}()
	mux.Handle(pattern, http.NotFoundHandler())
	return nil
}

// validHeaderName reports whether h is a header field name (an RFC 9110
// token).
func validHeaderName(h string) bool {
	if h == "" {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
