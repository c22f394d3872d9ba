package keyfunc

import (
	"fmt"
	"net/netip"
	"strings"
)

// MaxListEntry is the length, in bytes, of the longest list entry that
// [ParseListEntry] accepts.
const MaxListEntry = 1024

// ParseListEntry reads one entry of an allow or deny list: the policy's
// WithAllow and WithDeny, an allow or deny entry of overrides.Set, and
// the sluice command's allow and deny. It is the one check all of them
// apply, so an entry that one accepts every other accepts too.
//
// An entry is either a client address or a key. A client address is an IP
// address ("203.0.113.7", "2001:db8::1") or a CIDR prefix ("10.0.0.0/8",
// "2001:db8::/32"); ParseListEntry returns it as a masked prefix with isAddr
// true, a bare address as a full-length prefix, an IPv4-mapped IPv6 address
// or prefix as the IPv4 one, without a zone. Anything else is a key,
// matched exactly as a key function returns it ("tenant:acme",
// "ip:203.0.113.7"), and returned with isAddr false.
//
// ParseListEntry returns an error naming the entry and what is wrong with
// it for an empty entry, one longer than [MaxListEntry] bytes, and one
// that is written like an address but is not a valid one, which no client
// could ever match: a prefix length out of range ("10.0.0.0/33"), a
// number out of range ("300.1.2.3"), too few parts ("10.1.2"), an IPv6
// group too long ("2001:db8::12345").
func ParseListEntry(s string) (p netip.Prefix, isAddr bool, err error) {
	switch {
	case s == "":
		return netip.Prefix{}, false, fmt.Errorf("keyfunc: empty list entry; want an IP address, a CIDR prefix or a key")
	case len(s) > MaxListEntry:
		return netip.Prefix{}, false, fmt.Errorf("keyfunc: list entry of %d bytes, at most %d", len(s), MaxListEntry)
	}
	host, bits, isPrefix := strings.Cut(s, "/")
	if !looksLikeAddr(host) {
		return netip.Prefix{}, false, nil
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Prefix{}, false, fmt.Errorf("keyfunc: list entry %q is not a valid IP address: %s", s, addrReason(err))
	}
	if !isPrefix {
		a = a.WithZone("").Unmap()
		return netip.PrefixFrom(a, a.BitLen()), true, nil
	}
	if a.Zone() != "" {
		return netip.Prefix{}, false, fmt.Errorf("keyfunc: list entry %q: a CIDR prefix has no zone", s)
	}
	pr, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, false, fmt.Errorf("keyfunc: list entry %q is not a valid CIDR prefix: the length %q is not a number from 0 to %d", s, bits, a.BitLen())
	}
	pr, _ = normalizePrefix(pr)
	return pr, true, nil
}

// looksLikeAddr reports whether s is written like an IP address: IPv4's
// digits and dots with at least one dot, or IPv6's hex digits, colons (at
// least two) and dots, with an optional zone. A key such as "tenant:acme"
// or "route:GET /a" is not.
func looksLikeAddr(s string) bool {
	if i := strings.IndexByte(s, '%'); i >= 0 && strings.Count(s, ":") >= 2 {
		s = s[:i] // a zone: any text
	}
	if s == "" {
		return false
	}
	digits, dots, colons, hex := 0, 0, 0, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == '.':
			dots++
		case c == ':':
			colons++
		case c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F':
			hex++
		default:
			return false
		}
	}
	if colons >= 2 {
		return true
	}
	return colons == 0 && hex == 0 && dots > 0 && digits > 0
}

// addrReason returns the part of netip's parse error that says what is
// wrong, without repeating the input.
func addrReason(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, "): "); i >= 0 {
		return msg[i+3:]
	}
	return msg
}
