package keyfunc

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"net/textproto"
	"strconv"
	"strings"
	"sync/atomic"
)

// Header names in the canonical form that net/http looks up without
// allocating.
const (
	headerXFF       = "X-Forwarded-For"
	headerRealIP    = "X-Real-Ip"
	headerForwarded = "Forwarded"
)

// forwardingHeaders are the headers whose presence, with no trusted proxies,
// means the service probably runs behind a proxy that IP does not know about.
var forwardingHeaders = [...]string{headerXFF, headerRealIP, headerForwarded}

var errBadPeer = fmt.Errorf("%w: peer address is not an IP address", ErrNoKey)

// IP returns a Func that keys requests by client address: "ip:<address>"
// for a full-length prefix, such as "ip:203.0.113.7", and
// "ip:<network>/<bits>" otherwise, such as "ip:2001:db8:1:2::/64".
//
// By default the client is the connection's peer ([Request.RemoteAddr]) and
// no header is read: forwarding headers are written by whoever sends the
// request, so trusting them lets any client pick its own key. Behind a proxy
// or load balancer, name it with [TrustProxies] or [TrustPrefixes]; then
// X-Forwarded-For, or the header named by [TrustHeader], is used for
// requests that arrive from a trusted proxy. See the package documentation
// for the exact rules. The Forwarded header (RFC 7239) is never read.
//
// IPv4-mapped IPv6 addresses are keyed as IPv4 and zones are dropped. IPv6
// addresses are grouped by /64 and IPv4 addresses are kept whole; change
// that with [IPv6Prefix] and [IPv4Prefix].
//
// When no proxies are trusted and a request arrives with X-Forwarded-For,
// X-Real-IP or Forwarded, the Func ignores the headers and, the first time
// only, logs a warning through the logger that [slog.Default] returns at
// that moment.
//
// The Func fails with [ErrNoKey] when the peer address is not an IP address
// (a Unix socket, say); it never returns header text. IP panics if an
// option is nil. The returned Func is safe for concurrent use.
func IP(opts ...IPOption) Func {
	o := ipOptions{v4Bits: 32, v6Bits: 64}
	for i, opt := range opts {
		if opt == nil {
			panic(fmt.Sprintf("keyfunc: IP: option %d is nil", i))
		}
		opt(&o)
	}
	f := &ipFunc{
		framework: o.framework,
		trusted:   o.trusted,
		header:    o.header,
		v4Bits:    o.v4Bits,
		v6Bits:    o.v6Bits,
		v4Suffix:  prefixSuffix(o.v4Bits, 32),
		v6Suffix:  prefixSuffix(o.v6Bits, 128),
	}
	return f.key
}

func prefixSuffix(bits, full int) string {
	if bits == full {
		return ""
	}
	return "/" + strconv.Itoa(bits)
}

// IPOption configures [IP]. The zero value is nil and must not be passed to
// IP.
type IPOption func(*ipOptions)

type ipOptions struct {
	trusted   []netip.Prefix
	header    string
	v4Bits    int
	v6Bits    int
	framework bool
}

// ClientIPer is implemented by request views whose framework resolves the
// client address itself (gin's ClientIP, echo's RealIP, fiber's IP), for
// [FrameworkClientIP].
type ClientIPer interface {
	ClientIP() string
}

// FrameworkClientIP returns an option that keys by the client address the
// web framework resolved, where the adapter's request view offers one
// ([ClientIPer]: gin's Context.ClientIP, echo's Context.RealIP, fiber's
// Ctx.IP), instead of applying this package's own proxy rules. The address
// is grouped and formatted as [IP] does. A view without one (net/http), or
// an address that does not parse, falls back to IP's own rules.
//
// Use it only where the framework's trusted proxies are configured (gin's
// SetTrustedProxies, echo's IPExtractor, fiber's ProxyHeader with
// TrustedProxies): gin and echo trust forwarding headers from anyone by
// default, and then every client can choose its own key.
//
// Default: off; the framework's resolver is never used.
func FrameworkClientIP() IPOption {
	return func(o *ipOptions) { o.framework = true }
}

// TrustProxies returns an option that trusts the proxies whose addresses
// fall in the given CIDR prefixes ("10.0.0.0/8", "2001:db8::/32"). A bare
// address ("192.0.2.10", "::1") stands for itself. It is shorthand for
// TrustPrefixes with the result of [ParseProxies].
//
// List only proxies: any host inside a trusted range can name any client
// address it likes. TrustProxies panics, when called, if an entry is
// neither a prefix nor an address; the message names the entry. Use
// [ParseProxies] and [TrustPrefixes] for values read from configuration.
//
// Passing TrustProxies or TrustPrefixes again replaces the list.
//
// Default: no proxies are trusted, and only the peer address is used.
func TrustProxies(cidrs ...string) IPOption {
	prefixes, err := ParseProxies(cidrs...)
	if err != nil {
		panic(err.Error())
	}
	return TrustPrefixes(prefixes...)
}

// TrustPrefixes returns an option that trusts the proxies whose addresses
// fall in the given prefixes. It never panics: invalid prefixes (such as the
// zero Prefix) are skipped. Prefixes are used in their masked form, and an
// IPv4-mapped IPv6 prefix of length 96 or more is treated as the IPv4 prefix
// it maps.
//
// Passing TrustProxies or TrustPrefixes again replaces the list.
//
// Default: no proxies are trusted, and only the peer address is used.
func TrustPrefixes(prefixes ...netip.Prefix) IPOption {
	list := make([]netip.Prefix, 0, len(prefixes))
	for _, p := range prefixes {
		if p, ok := normalizePrefix(p); ok {
			list = append(list, p)
		}
	}
	return func(o *ipOptions) { o.trusted = list }
}

// ParseProxies parses CIDR prefixes and bare IP addresses, as accepted by
// [TrustProxies], for use with [TrustPrefixes]. Surrounding spaces are
// ignored. It returns an error naming the first entry that does not parse.
func ParseProxies(cidrs ...string) ([]netip.Prefix, error) {
	var list []netip.Prefix
	for _, s := range cidrs {
		s := strings.TrimSpace(s)
		var p netip.Prefix
		var err error
		if strings.Contains(s, "/") {
			p, err = netip.ParsePrefix(s)
		} else {
			var a netip.Addr
			a, err = netip.ParseAddr(s)
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if err != nil {
			return nil, fmt.Errorf("keyfunc: invalid trusted proxy %q: %w", s, err)
		}
		p, ok := normalizePrefix(p)
		if !ok {
			return nil, fmt.Errorf("keyfunc: invalid trusted proxy %q", s)
		}
		list = append(list, p)
	}
	return list, nil
}

// normalizePrefix returns p masked, without a zone, and with an
// IPv4-mapped address turned into IPv4, since addresses are compared in
// that form.
func normalizePrefix(p netip.Prefix) (netip.Prefix, bool) {
	if !p.IsValid() {
		return netip.Prefix{}, false
	}
	a, bits := p.Addr().WithZone(""), p.Bits()
	if a.Is4In6() && bits >= 96 {
		a, bits = a.Unmap(), bits-96
	}
	return netip.PrefixFrom(a, bits).Masked(), true
}

// TrustHeader returns an option that reads the client address from the
// named header, such as "X-Real-IP" or "CF-Connecting-IP", instead of
// X-Forwarded-For. The header must hold a single address (a port or
// brackets are allowed) and is read only for requests whose peer is a
// trusted proxy; without [TrustProxies] or [TrustPrefixes] it is ignored.
//
// When a trusted peer sends the header empty, repeated or unparsable, the
// peer address itself is used: the proxy did not say who the client was,
// and guessing from client-supplied text would let the client choose. An
// empty name restores the X-Forwarded-For behaviour. TrustHeader panics if
// name is not a valid header field name.
//
// Default: "", meaning X-Forwarded-For.
func TrustHeader(name string) IPOption {
	if name != "" {
		checkHeaderName("TrustHeader", name)
		name = textproto.CanonicalMIMEHeaderKey(name)
	}
	return func(o *ipOptions) { o.header = name }
}

// IPv6Prefix returns an option that keys IPv6 clients by their network of
// the given prefix length: with 64, every address in 2001:db8:1:2::/64
// shares the key "ip:2001:db8:1:2::/64". A host or customer usually receives
// at least a /64 and can move between its addresses at will, so a longer
// prefix lets one client spread over many buckets. With 128 each address is
// keyed on its own. IPv6Prefix panics if bits is outside 1..128.
//
// Default: 64.
func IPv6Prefix(bits int) IPOption {
	if bits < 1 || bits > 128 {
		panic(fmt.Sprintf("keyfunc: IPv6Prefix: bits must be in 1..128, got %d", bits))
	}
	return func(o *ipOptions) { o.v6Bits = bits }
}

// IPv4Prefix returns an option that keys IPv4 clients by their network of
// the given prefix length: with 24, every address in 198.51.100.0/24 shares
// the key "ip:198.51.100.0/24". IPv4Prefix panics if bits is outside 1..32.
//
// Default: 32, each address on its own.
func IPv4Prefix(bits int) IPOption {
	if bits < 1 || bits > 32 {
		panic(fmt.Sprintf("keyfunc: IPv4Prefix: bits must be in 1..32, got %d", bits))
	}
	return func(o *ipOptions) { o.v4Bits = bits }
}

type ipFunc struct {
	framework bool // FrameworkClientIP
	trusted   []netip.Prefix
	header    string // canonical name, or "" for X-Forwarded-For
	v4Bits    int
	v6Bits    int
	v4Suffix  string // "/<bits>", or "" for a whole address
	v6Suffix  string
	warned    atomic.Bool
	looked    atomic.Uint32 // requests checked for forwarding headers, up to 64
	recent    ipCache
}

// ipCache remembers the keys of recently seen addresses, so that a client
// seen again (most requests, on a real service) costs no allocation. It is
// direct-mapped: each address has one of 256 slots, and a newer address in
// the same slot replaces the older one, so its memory is fixed (a few
// kilobytes per extractor) however many clients there are.
type ipCache [256]atomic.Pointer[ipEntry]

type ipEntry struct {
	addr netip.Addr
	key  string
}

// slot returns a's slot.
func (c *ipCache) slot(a netip.Addr) *atomic.Pointer[ipEntry] {
	b := a.As16()
	h := (binary.LittleEndian.Uint64(b[:8]) ^ binary.LittleEndian.Uint64(b[8:])) * 0x9e3779b97f4a7c15
	return &c[h>>56]
}

func (f *ipFunc) key(r Request) (string, error) {
	if f.framework {
		if c, ok := r.(ClientIPer); ok {
			if a, ok := parseHost(c.ClientIP()); ok {
				return f.format(a), nil
			}
		}
	}
	peer, ok := parseHost(r.RemoteAddr())
	if !ok {
		return "", errBadPeer
	}
	if len(f.trusted) == 0 {
		f.warnForwarded(r)
		return f.format(peer), nil
	}
	return f.format(f.client(r, peer)), nil
}

// client returns the client address of a request whose peer is peer.
func (f *ipFunc) client(r Request, peer netip.Addr) netip.Addr {
	if !f.isTrusted(peer) {
		return peer
	}
	if f.header != "" {
		if a, ok := parseHost(trimOWS(r.Header(f.header))); ok {
			return a
		}
		return peer
	}
	// Walk X-Forwarded-For from the right. Each entry was appended by the
	// hop to its right (the last one by the peer), so an entry can be
	// believed only while every hop to its right is trusted.
	hop := peer
	list := r.Header(headerXFF)
	for list != "" {
		var entry string
		if i := strings.LastIndexByte(list, ','); i >= 0 {
			entry, list = list[i+1:], list[:i]
		} else {
			entry, list = list, ""
		}
		entry = trimOWS(entry)
		if entry == "" {
			continue // RFC 9110, section 5.6.1: empty list elements are ignored
		}
		a, ok := parseHost(entry)
		if !ok {
			return hop // the trusted hop that wrote the garbage
		}
		if !f.isTrusted(a) {
			return a
		}
		hop = a
	}
	return hop
}

func (f *ipFunc) isTrusted(a netip.Addr) bool {
	for _, p := range f.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// warnForwarded logs, once per Func, that a request carried forwarding
// headers which are being ignored.
func (f *ipFunc) warnForwarded(r Request) {
	if f.warned.Load() {
		return
	}
	// Looking for three headers costs more than the rest of the key, so
	// after the first 64 requests only one in 16, picked at random, looks.
	// A proxy that forwards the headers does so on every request, and is
	// still found within a few dozen.
	if f.looked.Load() >= 64 {
		if rand.Uint32N(16) != 0 {
			return
		}
	} else {
		f.looked.Add(1)
	}
	for _, h := range forwardingHeaders {
		if r.Header(h) == "" {
			continue
		}
		if f.warned.CompareAndSwap(false, true) {
			slog.Warn("keyfunc: a request carried a forwarding header, but keyfunc.IP trusts no proxies, "+
				"so it ignores X-Forwarded-For, X-Real-IP and Forwarded and keys on the connection's peer address; "+
				"if a proxy or load balancer sits in front of this service, every client behind it shares one key: "+
				"name the proxy with keyfunc.TrustProxies",
				slog.String("header", h))
		}
		return
	}
}

// format returns the key for a, masked to the configured prefix length. It
// allocates once, for the result.
func (f *ipFunc) format(a netip.Addr) string {
	bits, suffix := f.v6Bits, f.v6Suffix
	if a.Is4() {
		bits, suffix = f.v4Bits, f.v4Suffix
	}
	if suffix != "" {
		p, _ := a.Prefix(bits) // cannot fail: bits is within a's length
		a = p.Addr()
	}
	slot := f.recent.slot(a)
	if e := slot.Load(); e != nil && e.addr == a {
		return e.key
	}
	var buf [64]byte
	b := append(buf[:0], prefixIP...)
	b = a.AppendTo(b)
	b = append(b, suffix...)
	key := string(b)
	slot.Store(&ipEntry{addr: a, key: key})
	return key
}

// parseHost parses an address written as "host", "host:port", "[host]" or
// "[host]:port", and returns it unmapped and without a zone.
func parseHost(s string) (netip.Addr, bool) {
	var a netip.Addr
	var err error
	switch n := len(s); {
	case n == 0:
		return netip.Addr{}, false
	case s[0] == '[' && s[n-1] == ']':
		a, err = netip.ParseAddr(s[1 : n-1])
		if err == nil && !a.Is6() {
			return netip.Addr{}, false // brackets are for IPv6 only
		}
	case s[0] == '[' || strings.Count(s, ":") == 1:
		var ap netip.AddrPort
		ap, err = netip.ParseAddrPort(s)
		a = ap.Addr()
	default:
		a, err = netip.ParseAddr(s)
	}
	if err != nil {
		return netip.Addr{}, false
	}
	return a.WithZone("").Unmap(), true
}

// trimOWS removes optional whitespace (spaces and tabs) around s.
func trimOWS(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}
