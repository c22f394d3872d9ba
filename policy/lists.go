package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/overrides"
)

// ErrDenyList is wrapped by the error of a request refused by a deny list
// ([WithDeny], or a deny entry of [WithOverrides]): test for it with
// errors.Is in an error handler. Such a request fails with status 403; it
// is not a rate-limit denial (nothing was decided or charged) and not a
// misconfiguration (nothing is logged).
var ErrDenyList = errors.New("policy: the request's key or address is on a deny list")

// errDenyKey and errDenyAddr are the errors of a refused request, made
// once.
var (
	errDenyKey  = fmt.Errorf("%w (its key)", ErrDenyList)
	errDenyAddr = fmt.Errorf("%w (its client address)", ErrDenyList)
)

// WithAllow lets the requests whose key, or client address, is one of
// entries pass without a decision and without rate-limit fields, as
// [WithSkip] does. An entry is a key, exactly as the middleware's key
// function returns it ("tenant:internal", "ip:192.0.2.7"), or a client
// address: an IP address or a CIDR prefix ("10.0.0.0/8", "2001:db8::/32"),
// matched against the client address as the key function reads it,
// trusted proxies included, or as [WithListClientIP] finds it. A deny entry
// ([WithDeny], or one of [WithOverrides]) wins over an allow entry.
//
// Entries are read by [keyfunc.ParseListEntry], as overrides.Set and the
// sluice command read theirs. The constructor fails (an adapter panics) on
// an empty entry, one longer than 1024 bytes, or one that looks like an
// address but is not a valid one ("10.0.0.0/33", "300.1.2.3"): no client
// could ever match it. Passing the option again replaces the list.
//
// Default: none.
func WithAllow[C, H any](entries ...string) Option[C, H] {
	return func(c *Config[C, H]) { c.allow = append([]string(nil), entries...) }
}

// WithDeny refuses the requests whose key, or client address, is one of
// entries (written as for [WithAllow]), before any decision: they fail
// with an error wrapping [ErrDenyList], answered 403 by default (with its
// own problem type under [WithProblemJSON]) or by the error handler, which
// can tell them apart with errors.Is. Nothing is charged, no rate-limit
// field is written, and nothing is logged; the limiter's observer is told
// of each refusal as a decision of source [core.SourceDenyList].
//
// The constructor fails (an adapter panics) on an entry as [WithAllow]
// does. Passing the option again replaces the list.
//
// Default: none.
func WithDeny[C, H any](entries ...string) Option[C, H] {
	return func(c *Config[C, H]) { c.deny = append([]string(nil), entries...) }
}

// WithListClientIP sets how the lists' address entries find a request's
// client address: with the rules of [keyfunc.IP] given opts. It is needed
// only when the key function does not read the client address, or reads
// it with other rules than the lists should:
//
//	gateway := keyfunc.TrustProxies("10.0.0.0/8") // the gateway in front
//	httplimit.New(lim, limit, keyfunc.Tenant("X-Tenant-ID"),
//		httplimit.WithListClientIP(gateway),
//		httplimit.WithAllow("192.0.2.0/24"))
//
// Without it the lists read the client as the key function does: when the
// request's key has an "ip:" part (keyfunc.IP, alone or in keyfunc.Join or
// keyfunc.First) naming a client other than the connection's peer, which
// keyfunc.IP does only for a peer it trusts as a proxy ([keyfunc.TrustProxies],
// [keyfunc.TrustHeader]) or with [keyfunc.FrameworkClientIP], the lists see
// that client; otherwise they see the peer. So
// keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8")) as the key is enough for
// WithDeny("203.0.113.7") to refuse 203.0.113.7 behind that proxy. A client
// the key groups (an IPv6 /64 by default) is matched as that group; name
// the rules here to match whole addresses behind a proxy.
//
// The lists match whole addresses whatever opts say ([keyfunc.IPv4Prefix]
// and [keyfunc.IPv6Prefix] group keys, not list entries), so an entry of one
// IPv6 address matches that address. A request whose address cannot be found
// matches no address entry (its key entries still apply). Passing the option
// again replaces the rules; with no opts it restores the default. The
// constructor fails (an adapter panics) on a nil option.
//
// Where neither the key function nor this option trusts the proxy, the
// lists see the proxy's address as every client's: an allow range that
// contains the proxy lets every request pass. The first request allowed
// that way, one that carried a forwarding header (X-Forwarded-For,
// X-Real-IP or Forwarded) from a peer that an allow entry holds, is logged
// as a warning, once per middleware, naming the fix.
//
// Default: the client as the key function reads it, else the connection's
// peer address.
func WithListClientIP[C, H any](opts ...keyfunc.IPOption) Option[C, H] {
	return func(c *Config[C, H]) { c.listIP = append([]keyfunc.IPOption(nil), opts...) }
}

// listAction is what a list says about a request.
type listAction int8

const (
	listNone listAction = iota
	listAllow
	listDeny
)

// addrSet matches addresses against prefixes, one map lookup per distinct
// prefix length.
type addrSet struct {
	v4, v6 []int // the prefix lengths present, longest first
	m      map[netip.Prefix]listAction
}

func (s *addrSet) add(p netip.Prefix, a listAction) {
	if s.m == nil {
		s.m = make(map[netip.Prefix]listAction)
	}
	bits := &s.v6
	if p.Addr().Is4() {
		bits = &s.v4
	}
	if !slices.Contains(*bits, p.Bits()) {
		*bits = append(*bits, p.Bits())
		slices.Sort(*bits)
		slices.Reverse(*bits)
	}
	if s.m[p] != listDeny {
		s.m[p] = a
	}
}

func (s *addrSet) empty() bool { return len(s.m) == 0 }

// match returns the action of the prefixes containing client, a prefix of
// bits significant bits: deny if any denies, else allow if any allows.
func (s *addrSet) match(client netip.Prefix) listAction {
	bits := s.v6
	if client.Addr().Is4() {
		bits = s.v4
	}
	got := listNone
	for _, b := range bits {
		if b > client.Bits() {
			continue
		}
		p, _ := client.Addr().Prefix(b)
		switch s.m[p] {
		case listDeny:
			return listDeny
		case listAllow:
			got = listAllow
		}
	}
	return got
}

// lists are a policy's local allow and deny lists and its shared ones (the
// allow and deny entries of its overrides).
type lists struct {
	keys   map[string]listAction
	addrs  addrSet
	shared *overrides.Set // nil: none
	ip     keyfunc.Func   // keys by the whole client address; nil: as the request's key says (see client)
	lim    *core.Limiter
	warned atomic.Bool // an allow entry held a forwarding proxy: logged

	mu   sync.Mutex                // serializes rebuilds of sharedAddrs
	addr atomic.Pointer[sharedSet] // the shared address entries, per version
}

type sharedSet struct {
	version int64
	addrs   addrSet
}

// newLists returns the lists configured, or nil when there are none.
func newLists(lim *core.Limiter, allow, deny []string, shared *overrides.Set, ipOpts []keyfunc.IPOption) (*lists, error) {
	if len(allow) == 0 && len(deny) == 0 && shared == nil {
		return nil, nil
	}
	for i, o := range ipOpts {
		if o == nil {
			return nil, fmt.Errorf("WithListClientIP: option %d is nil", i)
		}
	}
	l := &lists{shared: shared, lim: lim}
	if len(ipOpts) > 0 {
		// The last options win: whole addresses, whatever opts group by.
		l.ip = keyfunc.IP(append(slices.Clip(ipOpts), keyfunc.IPv4Prefix(32), keyfunc.IPv6Prefix(128))...)
	}
	for _, set := range []struct {
		what    string
		entries []string
		action  listAction
	}{{"WithAllow", allow, listAllow}, {"WithDeny", deny, listDeny}} {
		for _, e := range set.entries {
			p, isAddr, err := keyfunc.ParseListEntry(e)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", set.what, err)
			}
			if isAddr {
				l.addrs.add(p, set.action)
				continue
			}
			if l.keys == nil {
				l.keys = make(map[string]listAction)
			}
			if l.keys[e] != listDeny {
				l.keys[e] = set.action
			}
		}
	}
	return l, nil
}

// check returns what the lists say about a request with key.
func (l *lists) check(r keyfunc.Request, key string) (listAction, error) {
	got := l.keys[key]
	if got == listDeny {
		return listDeny, errDenyKey
	}
	if l.shared != nil {
		if o, ok := l.shared.Lookup(key); ok {
			switch {
			case o.Deny:
				return listDeny, errDenyKey
			case o.Allow:
				got = listAllow
			}
		}
	}
	shared := l.sharedAddrs()
	if l.addrs.empty() && (shared == nil || shared.empty()) {
		return got, nil
	}
	client, ok := l.client(r, key)
	if !ok {
		return got, nil
	}
	byAddr := false
	for _, s := range []*addrSet{&l.addrs, shared} {
		if s == nil {
			continue
		}
		switch s.match(client) {
		case listDeny:
			return listDeny, errDenyAddr
		case listAllow:
			got, byAddr = listAllow, true
		}
	}
	if byAddr && !l.warned.Load() {
		l.warnProxy(r, client.Addr())
	}
	return got, nil
}

// forwardingHeaders are the headers a proxy adds to say whom it forwards
// for.
var forwardingHeaders = [...]string{"X-Forwarded-For", "X-Real-Ip", "Forwarded"}

// warnProxy logs, once, a request allowed by an address entry that holds
// the address of the proxy that forwarded it: the lists saw the proxy, not
// its client, so every client behind that proxy is allowed.
func (l *lists) warnProxy(r keyfunc.Request, allowed netip.Addr) {
	header := ""
	for _, h := range forwardingHeaders {
		if r.Header(h) != "" {
			header = h
			break
		}
	}
	if header == "" {
		return
	}
	peer, ok := peerAddr(r.RemoteAddr())
	if !ok || peer != allowed || !l.warned.CompareAndSwap(false, true) {
		return
	}
	l.lim.Logger().Warn("sluice: an allow entry of the lists holds the address of a proxy that forwarded a request; "+
		"no proxy is trusted where the lists read the client, so they see the proxy and allow every client behind it; "+
		"trust the proxy in the key function, keyfunc.IP(keyfunc.TrustProxies(...)), which the lists follow, "+
		"or, when the key is not by client address, with WithListClientIP(keyfunc.TrustProxies(...)) (logged once)",
		"peer", peer.String(), "header", header)
}

// peerAddr reads a peer address written as host, host:port, [host] or
// [host]:port, unmapped and without a zone.
func peerAddr(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().WithZone("").Unmap(), true
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	a, err := netip.ParseAddr(s)
	return a.WithZone("").Unmap(), err == nil
}

// client returns the request's client address, as a prefix: with the
// rules of WithListClientIP, or as the request's key names it.
func (l *lists) client(r keyfunc.Request, key string) (netip.Prefix, bool) {
	if l.ip == nil {
		return clientOfKey(r, key)
	}
	k, err := l.ip(r)
	s, ok := strings.CutPrefix(k, "ip:")
	if err != nil || !ok {
		return netip.Prefix{}, false
	}
	return parseClient(s)
}

// clientOfKey returns the client as the key function read it: the "ip:"
// part of key when it names a client other than r's peer (read through a
// trusted proxy), else the peer, whole.
func clientOfKey(r keyfunc.Request, key string) (netip.Prefix, bool) {
	peer, hasPeer := peerAddr(r.RemoteAddr())
	if p, ok := keyClient(key); ok && !(hasPeer && p.Contains(peer)) {
		return p, true
	}
	if !hasPeer {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(peer, peer.BitLen()), true
}

// keyClient returns the address of key's first "ip:" part: the key
// itself, or a part of a key keyfunc.Join made, split at the '|' not
// escaped by a backslash (keyfunc escapes '|' and '\' in values, so a
// header's text cannot pose as a part).
func keyClient(key string) (netip.Prefix, bool) {
	start := 0
	for i := 0; i <= len(key); i++ {
		if i < len(key) && key[i] == '\\' {
			i++
			continue
		}
		if i < len(key) && key[i] != '|' {
			continue
		}
		if s, ok := strings.CutPrefix(key[start:i], "ip:"); ok {
			return parseClient(s)
		}
		start = i + 1
	}
	return netip.Prefix{}, false
}

// parseClient reads an address or a prefix as keyfunc.IP writes them.
func parseClient(s string) (netip.Prefix, bool) {
	if strings.IndexByte(s, '/') >= 0 {
		p, err := netip.ParsePrefix(s)
		return p, err == nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a, a.BitLen()), true
}

// sharedAddrs returns the address entries of the shared set at its current
// version, rebuilt once per version; nil without a shared set. While one
// request rebuilds them, others get the previous version's.
func (l *lists) sharedAddrs() *addrSet {
	if l.shared == nil {
		return nil
	}
	v := l.shared.Version()
	old := l.addr.Load()
	if old != nil && old.version == v {
		return &old.addrs
	}
	// One request rebuilds (a pass over the set); the others meanwhile
	// use the previous version's entries rather than wait.
	if old != nil {
		if !l.mu.TryLock() {
			return &old.addrs
		}
	} else {
		l.mu.Lock()
	}
	defer l.mu.Unlock()
	if s := l.addr.Load(); s != nil && s.version == v {
		return &s.addrs
	}
	s := &sharedSet{version: v}
	l.shared.Range(func(key string, o overrides.Override) bool {
		if !o.Allow && !o.Deny {
			return true
		}
		p, isAddr, err := keyfunc.ParseListEntry(key)
		if err != nil || !isAddr {
			return true
		}
		a := listAllow
		if o.Deny {
			a = listDeny
		}
		s.addrs.add(p, a)
		return true
	})
	l.addr.Store(s)
	return &s.addrs
}

// listed applies the policy's lists to a request with key: done is true
// when they decided it, with the verdict to return.
func (p *Policy) listed(r keyfunc.Request, key string) (v Verdict, done bool) {
	if p.lists == nil {
		return Verdict{}, false
	}
	switch a, err := p.lists.check(r, key); a {
	case listAllow:
		return Verdict{Action: Continue}, true
	case listDeny:
		p.lim.ObserveDenyList(p.dryRun)
		return p.fail(r, key, err, atKey), true
	}
	return Verdict{}, false
}

// DenyListProblem is the problem type of the RFC 9457 body of a request
// refused by a deny list, under [WithProblemJSON] (status 403).
const DenyListProblem = "https://pkg.go.dev/github.com/sluicehq/sluice/policy#ErrDenyList"

// problemType returns the problem type of a failure with err.
func problemType(err error) string {
	if errors.Is(err, ErrDenyList) {
		return DenyListProblem
	}
	return "about:blank"
}
