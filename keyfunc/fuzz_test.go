package keyfunc_test

import (
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/keyfunc"
)

// fuzzTrusted are the proxies trusted by the trusted-proxy cases of FuzzIP.
var fuzzTrusted = []string{"10.0.0.0/8", "2001:db8:ffff::/48", "127.0.0.1", "::1"}

func FuzzIP(f *testing.F) {
	seeds := []struct{ peer, xff, realIP string }{
		{"203.0.113.7:5678", "", ""},
		{"203.0.113.7:5678", "6.6.6.6", "7.7.7.7"},
		{"10.0.0.1:80", "6.6.6.6, 203.0.113.7", ""},
		{"10.0.0.1:80", "203.0.113.7, 10.0.0.5, 10.0.0.6", "198.51.100.1"},
		{"10.0.0.1:80", "garbage, 10.0.0.5", "garbage"},
		{"10.0.0.1:80", "10.0.0.9, 10.0.0.5", ""},
		{"[2001:db8:ffff::1]:443", "[2001:db8:1:2::7]:443, ::ffff:10.0.0.3", "[2001:db8::1]"},
		{"[::ffff:10.0.0.1]:1", " , 203.0.113.7 ,\t", "203.0.113.7:80"},
		{"[fe80::1%eth0]:80", "fe80::2%lo", ""},
		{"::1", "unknown", ""},
		{"127.0.0.1", "1.2.3.4:99999", "[1.2.3.4]"},
		{"", "", ""},
	}
	for _, s := range seeds {
		f.Add(s.peer, s.xff, s.realIP)
	}

	// The warning about ignored headers would fire in every worker.
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	f.Cleanup(func() { slog.SetDefault(old) })

	trusted, err := keyfunc.ParseProxies(fuzzTrusted...)
	if err != nil {
		f.Fatal(err)
	}
	trust := keyfunc.TrustPrefixes(trusted...)
	isTrusted := func(a netip.Addr) bool {
		for _, p := range trusted {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	exact := []keyfunc.IPOption{keyfunc.IPv6Prefix(128), keyfunc.IPv4Prefix(32)}

	plain := keyfunc.IP()
	plainExact := keyfunc.IP(exact...)
	masked := keyfunc.IP(keyfunc.IPv4Prefix(20), keyfunc.IPv6Prefix(56))
	viaXFF := keyfunc.IP(append([]keyfunc.IPOption{trust}, exact...)...)
	viaXFFMasked := keyfunc.IP(trust)
	viaHeader := keyfunc.IP(append([]keyfunc.IPOption{trust, keyfunc.TrustHeader("X-Real-IP")}, exact...)...)

	f.Fuzz(func(t *testing.T, peer, xffList, real string) {
		r := req(peer, xff, xffList, realIP, real)
		bare := req(peer)
		peerAddr, peerOK := refParse(peer)

		// Without trusted proxies, headers never matter and the key is the
		// canonical peer address.
		for _, c := range []struct {
			name         string
			fn           keyfunc.Func
			bits4, bits6 int
		}{
			{"IP()", plain, 32, 64},
			{"IP(exact)", plainExact, 32, 128},
			{"IP(IPv4Prefix(20), IPv6Prefix(56))", masked, 20, 56},
		} {
			got, err := c.fn(r)
			checkShape(t, c.name, got, err)
			gotBare, errBare := c.fn(bare)
			if got != gotBare || (err == nil) != (errBare == nil) {
				t.Fatalf("%s(%q, xff %q, real %q) = %q, %v; without headers %q, %v", c.name, peer, xffList, real, got, err, gotBare, errBare)
			}
			want := ""
			if peerOK {
				want = refKey(peerAddr, c.bits4, c.bits6)
			}
			if got != want {
				t.Fatalf("%s(%q) = %q, %v, want %q", c.name, peer, got, err, want)
			}
		}

		// With trusted proxies, the key is the peer, or an address from the
		// headers that only trusted hops stand between.
		allowed := map[string]bool{}
		if peerOK {
			allowed[refKey(peerAddr, 32, 128)] = true
			if isTrusted(peerAddr) {
				list := strings.Split(xffList, ",")
				for i := len(list) - 1; i >= 0; i-- {
					e := strings.Trim(list[i], " \t")
					if e == "" {
						continue
					}
					a, ok := refParse(e)
					if !ok {
						break
					}
					allowed[refKey(a, 32, 128)] = true
					if !isTrusted(a) {
						break
					}
				}
			}
		}
		got, err := viaXFF(r)
		checkShape(t, "IP(trusted)", got, err)
		if err == nil && !allowed[got] {
			t.Fatalf("IP(trusted)(%q, xff %q) = %q, want one of %v", peer, xffList, got, allowed)
		}
		if peerOK && !isTrusted(peerAddr) && got != refKey(peerAddr, 32, 128) {
			t.Fatalf("IP(trusted)(%q, xff %q) = %q from an untrusted peer, want the peer", peer, xffList, got)
		}
		if (err == nil) != peerOK {
			t.Fatalf("IP(trusted)(%q) = %q, %v; peer parses: %v", peer, got, err, peerOK)
		}

		// The masked form keys the same client.
		gotMasked, errMasked := viaXFFMasked(r)
		checkShape(t, "IP(trusted, default prefixes)", gotMasked, errMasked)
		if err == nil {
			a, _ := netip.ParseAddr(strings.TrimPrefix(got, "ip:"))
			if want := refKey(a, 32, 64); gotMasked != want {
				t.Fatalf("IP(trusted, default prefixes)(%q, xff %q) = %q, want %q", peer, xffList, gotMasked, want)
			}
		}

		// With TrustHeader, the key is the peer or the header's address.
		got, err = viaHeader(r)
		checkShape(t, "IP(trusted, TrustHeader)", got, err)
		if (err == nil) != peerOK {
			t.Fatalf("IP(trusted, TrustHeader)(%q) = %q, %v; peer parses: %v", peer, got, err, peerOK)
		}
		if peerOK {
			want := refKey(peerAddr, 32, 128)
			if a, ok := refParse(strings.Trim(real, " \t")); ok && isTrusted(peerAddr) {
				want = refKey(a, 32, 128)
			}
			if got != want {
				t.Fatalf("IP(trusted, TrustHeader)(%q, real %q) = %q, want %q", peer, real, got, want)
			}
		}
	})
}

// refParse parses an address in the forms IP accepts: "host:port",
// "[v6]:port", "[v6]" and a bare host. It returns the address unmapped and
// without a zone.
func refParse(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().WithZone("").Unmap(), true
	}
	if len(s) >= 2 && s[0] == '[' && s[len(s)-1] == ']' {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil && a.Is6() {
			return a.WithZone("").Unmap(), true
		}
		return netip.Addr{}, false
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return a.WithZone("").Unmap(), true
	}
	return netip.Addr{}, false
}

// refKey is the key IP should produce for a with the given prefix lengths.
func refKey(a netip.Addr, bits4, bits6 int) string {
	bits := bits6
	if a.Is4() {
		bits = bits4
	}
	if bits == a.BitLen() {
		return "ip:" + a.String()
	}
	return "ip:" + netip.PrefixFrom(a, bits).Masked().String()
}

// checkShape fails unless key and err are either "" and an ErrNoKey error,
// or "ip:" and a canonical address or prefix with a nil error.
func checkShape(t *testing.T, call, key string, err error) {
	t.Helper()
	if err != nil {
		if key != "" || !errors.Is(err, keyfunc.ErrNoKey) {
			t.Fatalf("%s = %q, %v, want \"\" and ErrNoKey", call, key, err)
		}
		return
	}
	rest, ok := strings.CutPrefix(key, "ip:")
	if !ok {
		t.Fatalf("%s = %q, want an ip: key", call, key)
	}
	var a netip.Addr
	if strings.Contains(rest, "/") {
		p, err := netip.ParsePrefix(rest)
		if err != nil || p.String() != rest || p.Masked() != p {
			t.Fatalf("%s = %q, want a canonical masked prefix", call, key)
		}
		a = p.Addr()
	} else {
		a, err = netip.ParseAddr(rest)
		if err != nil || a.String() != rest {
			t.Fatalf("%s = %q, want a canonical address", call, key)
		}
	}
	if a.Zone() != "" || a.Is4In6() {
		t.Fatalf("%s = %q, want no zone and no IPv4-mapped form", call, key)
	}
}

func FuzzJoinEscape(f *testing.F) {
	f.Add("a|b", "c", "a", "b|c")
	f.Add(`a\`, "|b", `a\|`, "b")
	f.Add(`\`, `\`, `\\`, "")
	f.Add("x", "y", "x", "y")
	f.Add(`x\`, "|static:d", `x|static:\`, "d")
	fn := keyfunc.Join(keyfunc.Tenant("A"), keyfunc.Header("B"), keyfunc.Route())
	statics := func(a, b string) string {
		k, _ := keyfunc.Join(keyfunc.Static(a), keyfunc.Static(b))(nil)
		return k
	}
	f.Fuzz(func(t *testing.T, a, b, c, d string) {
		if got, want := splitKey(statics(a, b)), []string{"static:" + a, "static:" + b}; !slices.Equal(got, want) {
			t.Fatalf("Join(Static(%q), Static(%q)) = %q, which splits into %q, want %q", a, b, statics(a, b), got, want)
		}
		r1 := routeReq("GET", a+b)
		r1.headers["A"], r1.headers["B"] = a, b
		r2 := routeReq("GET", c+d)
		r2.headers["A"], r2.headers["B"] = c, d
		k1, err1 := fn(r1)
		k2, err2 := fn(r2)
		same := a == c && b == d
		if err1 == nil && err2 == nil && (k1 == k2) != same {
			t.Fatalf("Join(Tenant, Header, Route)(%q, %q) = %q and (%q, %q) = %q", a, b, k1, c, d, k2)
		}
		if s1, s2 := statics(a, b), statics(c, d); (s1 == s2) != same {
			t.Fatalf("Join(Static(%q), Static(%q)) = %q and Join(Static(%q), Static(%q)) = %q", a, b, s1, c, d, s2)
		}
	})
}
