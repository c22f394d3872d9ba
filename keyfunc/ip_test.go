package keyfunc_test

import (
	"bytes"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/keyfunc"
)

const (
	xff    = "X-Forwarded-For"
	realIP = "X-Real-IP"
)

func TestIPDefault(t *testing.T) {
	fn := keyfunc.IP()
	exact := keyfunc.IP(keyfunc.IPv6Prefix(128))
	call := "IP()"
	runKeyCases(t, []keyCase{
		{name: "IPv4 with port", call: call, fn: fn, req: req("203.0.113.7:5678"), want: "ip:203.0.113.7"},
		{name: "IPv4 bare", call: call, fn: fn, req: req("203.0.113.7"), want: "ip:203.0.113.7"},
		{name: "X-Forwarded-For ignored", call: call, fn: fn, req: req("203.0.113.7:5678", xff, "198.51.100.1"), want: "ip:203.0.113.7"},
		{name: "X-Real-IP ignored", call: call, fn: fn, req: req("203.0.113.7:5678", realIP, "198.51.100.1"), want: "ip:203.0.113.7"},
		{name: "Forwarded ignored", call: call, fn: fn, req: req("203.0.113.7:5678", "Forwarded", "for=198.51.100.1"), want: "ip:203.0.113.7"},
		{name: "all headers ignored", call: call, fn: fn, req: req("203.0.113.7:5678", xff, "1.1.1.1", realIP, "2.2.2.2", "CF-Connecting-IP", "3.3.3.3"), want: "ip:203.0.113.7"},
		{name: "IPv6 bracketed with port", call: call, fn: fn, req: req("[2001:db8:1:2::7]:443"), want: "ip:2001:db8:1:2::/64"},
		{name: "IPv6 bracketed without port", call: call, fn: fn, req: req("[2001:db8:1:2::7]"), want: "ip:2001:db8:1:2::/64"},
		{name: "IPv6 bare", call: call, fn: fn, req: req("2001:db8:1:2::7"), want: "ip:2001:db8:1:2::/64"},
		{name: "IPv6 same /64", call: call, fn: fn, req: req("[2001:db8:1:2:ffff:ffff:ffff:ffff]:1"), want: "ip:2001:db8:1:2::/64"},
		{name: "IPv6 next /64", call: call, fn: fn, req: req("[2001:db8:1:3::7]:1"), want: "ip:2001:db8:1:3::/64"},
		{name: "IPv4-mapped", call: call, fn: fn, req: req("[::ffff:203.0.113.7]:5678"), want: "ip:203.0.113.7"},
		{name: "IPv4-mapped bare", call: call, fn: fn, req: req("::ffff:203.0.113.7"), want: "ip:203.0.113.7"},
		{name: "zone stripped", call: call, fn: fn, req: req("[fe80::1%eth0]:80"), want: "ip:fe80::/64"},
		{name: "zone stripped bare", call: "IP(IPv6Prefix(128))", fn: exact, req: req("fe80::1%eth0"), want: "ip:fe80::1"},
		{name: "IPv6Prefix(128)", call: "IP(IPv6Prefix(128))", fn: exact, req: req("[2001:db8:1:2::7]:443"), want: "ip:2001:db8:1:2::7"},
		{name: "IPv6Prefix(48)", call: "IP(IPv6Prefix(48))", fn: keyfunc.IP(keyfunc.IPv6Prefix(48)), req: req("[2001:db8:1:2::7]:443"), want: "ip:2001:db8:1::/48"},
		{name: "IPv4Prefix(24)", call: "IP(IPv4Prefix(24))", fn: keyfunc.IP(keyfunc.IPv4Prefix(24)), req: req("203.0.113.7:1"), want: "ip:203.0.113.0/24"},
		{name: "IPv4Prefix(24) mapped", call: "IP(IPv4Prefix(24))", fn: keyfunc.IP(keyfunc.IPv4Prefix(24)), req: req("[::ffff:203.0.113.7]:1"), want: "ip:203.0.113.0/24"},
		{name: "IPv4Prefix leaves IPv6 alone", call: "IP(IPv4Prefix(24))", fn: keyfunc.IP(keyfunc.IPv4Prefix(24)), req: req("[2001:db8:1:2::7]:1"), want: "ip:2001:db8:1:2::/64"},
		{name: "last option wins", call: "IP(IPv4Prefix(24), IPv4Prefix(32))", fn: keyfunc.IP(keyfunc.IPv4Prefix(24), keyfunc.IPv4Prefix(32)), req: req("203.0.113.7:1"), want: "ip:203.0.113.7"},
		{name: "empty peer", call: call, fn: fn, req: req(""), wantErr: keyfunc.ErrNoKey},
		{name: "hostname peer", call: call, fn: fn, req: req("localhost:80"), wantErr: keyfunc.ErrNoKey},
		{name: "unix socket peer", call: call, fn: fn, req: req("@"), wantErr: keyfunc.ErrNoKey},
		{name: "bad port", call: call, fn: fn, req: req("203.0.113.7:99999"), wantErr: keyfunc.ErrNoKey},
		{name: "empty port", call: call, fn: fn, req: req("203.0.113.7:"), wantErr: keyfunc.ErrNoKey},
		{name: "IPv4 in brackets", call: call, fn: fn, req: req("[203.0.113.7]:80"), wantErr: keyfunc.ErrNoKey},
		{name: "IPv4 in brackets without port", call: call, fn: fn, req: req("[203.0.113.7]"), wantErr: keyfunc.ErrNoKey},
		{name: "IPv6 with port, no brackets", call: call, fn: fn, req: req("2001:db8::7:443"), want: "ip:2001:db8::/64"},
		{name: "unparsable peer with header", call: call, fn: fn, req: req("garbage", xff, "203.0.113.7"), wantErr: keyfunc.ErrNoKey},
	})
}

func TestIPTrustedProxies(t *testing.T) {
	trust := keyfunc.TrustProxies("10.0.0.0/8", "2001:db8:ffff::/48", "192.0.2.1")
	fn := keyfunc.IP(trust)
	exact := keyfunc.IP(trust, keyfunc.IPv6Prefix(128))
	call := "IP(TrustProxies(10.0.0.0/8, 2001:db8:ffff::/48, 192.0.2.1))"
	runKeyCases(t, []keyCase{
		{name: "untrusted peer, header ignored", call: call, fn: fn, req: req("203.0.113.7:1", xff, "198.51.100.1"), want: "ip:203.0.113.7"},
		{name: "untrusted peer, trusted-looking header ignored", call: call, fn: fn, req: req("203.0.113.7:1", xff, "10.0.0.9"), want: "ip:203.0.113.7"},
		{name: "trusted peer, no header", call: call, fn: fn, req: req("10.0.0.1:1"), want: "ip:10.0.0.1"},
		{name: "one hop", call: call, fn: fn, req: req("10.0.0.1:1", xff, "203.0.113.7"), want: "ip:203.0.113.7"},
		{name: "spoofed entries on the left", call: call, fn: fn, req: req("10.0.0.1:1", xff, "6.6.6.6, 7.7.7.7, 203.0.113.7"), want: "ip:203.0.113.7"},
		{name: "spoofed trusted address on the left", call: call, fn: fn, req: req("10.0.0.1:1", xff, "10.9.9.9, 203.0.113.7"), want: "ip:203.0.113.7"},
		{name: "two trusted hops", call: call, fn: fn, req: req("10.0.0.1:1", xff, "6.6.6.6, 203.0.113.7, 10.0.0.5, 192.0.2.1"), want: "ip:203.0.113.7"},
		{name: "all trusted", call: call, fn: fn, req: req("10.0.0.1:1", xff, "10.0.0.7, 10.0.0.5"), want: "ip:10.0.0.7"},
		{name: "garbage behind trusted hop", call: call, fn: fn, req: req("10.0.0.1:1", xff, "garbage, 10.0.0.5"), want: "ip:10.0.0.5"},
		{name: "garbage as last entry", call: call, fn: fn, req: req("10.0.0.1:1", xff, "203.0.113.7, garbage"), want: "ip:10.0.0.1"},
		{name: "garbage left of client", call: call, fn: fn, req: req("10.0.0.1:1", xff, "garbage, 203.0.113.7"), want: "ip:203.0.113.7"},
		{name: "hostname entry", call: call, fn: fn, req: req("10.0.0.1:1", xff, "client.example, 10.0.0.5"), want: "ip:10.0.0.5"},
		{name: "unknown entry", call: call, fn: fn, req: req("10.0.0.1:1", xff, "unknown"), want: "ip:10.0.0.1"},
		{name: "entries with ports and brackets", call: call, fn: fn, req: req("10.0.0.1:1", xff, "[2001:db8:1:2::7]:443, 10.0.0.5:80"), want: "ip:2001:db8:1:2::/64"},
		{name: "bracketed entry without port", call: "IP(trust, IPv6Prefix(128))", fn: exact, req: req("10.0.0.1:1", xff, "[2001:db8:1:2::7]"), want: "ip:2001:db8:1:2::7"},
		{name: "bare IPv6 entry", call: "IP(trust, IPv6Prefix(128))", fn: exact, req: req("10.0.0.1:1", xff, "2001:db8:1:2::7"), want: "ip:2001:db8:1:2::7"},
		{name: "zoned entry", call: "IP(trust, IPv6Prefix(128))", fn: exact, req: req("10.0.0.1:1", xff, "fe80::7%eth0"), want: "ip:fe80::7"},
		{name: "spaces, tabs and empty elements", call: call, fn: fn, req: req("10.0.0.1:1", xff, " 203.0.113.7 ,,\t10.0.0.5\t, "), want: "ip:203.0.113.7"},
		{name: "only empty elements", call: call, fn: fn, req: req("10.0.0.1:1", xff, " , ,"), want: "ip:10.0.0.1"},
		{name: "lines joined by adapter", call: call, fn: fn, req: req("10.0.0.1:1", xff, "6.6.6.6, 203.0.113.7, 10.0.0.5"), want: "ip:203.0.113.7"},
		{name: "X-Real-IP ignored without TrustHeader", call: call, fn: fn, req: req("10.0.0.1:1", realIP, "198.51.100.1"), want: "ip:10.0.0.1"},
		{name: "IPv6 trusted peer", call: call, fn: fn, req: req("[2001:db8:ffff::1]:1", xff, "198.51.100.9"), want: "ip:198.51.100.9"},
		{name: "IPv6 peer outside trusted /48", call: call, fn: fn, req: req("[2001:db8:fffe::1]:1", xff, "198.51.100.9"), want: "ip:2001:db8:fffe::/64"},
		{name: "IPv4-mapped trusted peer", call: call, fn: fn, req: req("[::ffff:10.0.0.1]:1", xff, "198.51.100.9"), want: "ip:198.51.100.9"},
		{name: "IPv4-mapped client entry", call: call, fn: fn, req: req("10.0.0.1:1", xff, "::ffff:198.51.100.9"), want: "ip:198.51.100.9"},
		{name: "IPv4-mapped trusted entry", call: call, fn: fn, req: req("10.0.0.1:1", xff, "198.51.100.9, ::ffff:10.0.0.5"), want: "ip:198.51.100.9"},
		{name: "single trusted address", call: call, fn: fn, req: req("192.0.2.1:1", xff, "198.51.100.9"), want: "ip:198.51.100.9"},
		{name: "neighbour of trusted address", call: call, fn: fn, req: req("192.0.2.2:1", xff, "198.51.100.9"), want: "ip:192.0.2.2"},
		{name: "unparsable peer", call: call, fn: fn, req: req("garbage", xff, "198.51.100.9"), wantErr: keyfunc.ErrNoKey},
	})
}

func TestIPTrustHeader(t *testing.T) {
	fn := keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8"), keyfunc.TrustHeader("X-Real-IP"))
	call := `IP(TrustProxies("10.0.0.0/8"), TrustHeader("X-Real-IP"))`
	runKeyCases(t, []keyCase{
		{name: "header used", call: call, fn: fn, req: req("10.0.0.1:1", realIP, "203.0.113.7"), want: "ip:203.0.113.7"},
		{name: "header with spaces", call: call, fn: fn, req: req("10.0.0.1:1", realIP, " 203.0.113.7 "), want: "ip:203.0.113.7"},
		{name: "header with brackets and port", call: call, fn: fn, req: req("10.0.0.1:1", realIP, "[2001:db8:1:2::7]:443"), want: "ip:2001:db8:1:2::/64"},
		{name: "X-Forwarded-For not read", call: call, fn: fn, req: req("10.0.0.1:1", xff, "203.0.113.7"), want: "ip:10.0.0.1"},
		{name: "header beats X-Forwarded-For", call: call, fn: fn, req: req("10.0.0.1:1", xff, "6.6.6.6", realIP, "203.0.113.7"), want: "ip:203.0.113.7"},
		{name: "header missing", call: call, fn: fn, req: req("10.0.0.1:1"), want: "ip:10.0.0.1"},
		{name: "header unparsable", call: call, fn: fn, req: req("10.0.0.1:1", realIP, "garbage"), want: "ip:10.0.0.1"},
		{name: "header repeated", call: call, fn: fn, req: req("10.0.0.1:1", realIP, "6.6.6.6, 203.0.113.7"), want: "ip:10.0.0.1"},
		{name: "untrusted peer", call: call, fn: fn, req: req("203.0.113.7:1", realIP, "6.6.6.6"), want: "ip:203.0.113.7"},
		{name: "TrustHeader without trusted proxies", call: `IP(TrustHeader("X-Real-IP"))`, fn: keyfunc.IP(keyfunc.TrustHeader("X-Real-IP")), req: req("10.0.0.1:1", realIP, "6.6.6.6"), want: "ip:10.0.0.1"},
		{name: "empty TrustHeader restores X-Forwarded-For", call: `IP(TrustProxies, TrustHeader("X-Real-IP"), TrustHeader(""))`,
			fn:  keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8"), keyfunc.TrustHeader("X-Real-IP"), keyfunc.TrustHeader("")),
			req: req("10.0.0.1:1", xff, "203.0.113.7", realIP, "6.6.6.6"), want: "ip:203.0.113.7"},
		{name: "CF-Connecting-IP", call: `IP(TrustProxies, TrustHeader("CF-Connecting-IP"))`,
			fn:  keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8"), keyfunc.TrustHeader("CF-Connecting-IP")),
			req: req("10.0.0.1:1", "Cf-Connecting-Ip", "203.0.113.7"), want: "ip:203.0.113.7"},
	})
}

func TestIPTrustListReplaced(t *testing.T) {
	// TrustPrefixes after TrustProxies replaces the list: nothing is trusted.
	fn := keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8"), keyfunc.TrustPrefixes())
	checkKey(t, "IP(TrustProxies(10.0.0.0/8), TrustPrefixes())", fn, req("10.0.0.1:1", xff, "203.0.113.7"), "ip:10.0.0.1", nil)

	fn = keyfunc.IP(keyfunc.TrustProxies("192.0.2.0/24"), keyfunc.TrustPrefixes(netip.MustParsePrefix("10.0.0.0/8")))
	checkKey(t, "IP(TrustProxies(192.0.2.0/24), TrustPrefixes(10.0.0.0/8))", fn, req("10.0.0.1:1", xff, "203.0.113.7"), "ip:203.0.113.7", nil)
	checkKey(t, "IP(TrustProxies(192.0.2.0/24), TrustPrefixes(10.0.0.0/8))", fn, req("192.0.2.1:1", xff, "203.0.113.7"), "ip:192.0.2.1", nil)
}

func TestTrustPrefixes(t *testing.T) {
	fn := keyfunc.IP(keyfunc.TrustPrefixes(
		netip.Prefix{},                              // invalid: skipped
		netip.MustParsePrefix("10.1.2.3/8"),         // not masked
		netip.MustParsePrefix("::ffff:0.0.0.0/104"), // IPv4-mapped form of 0.0.0.0/8
	))
	call := "IP(TrustPrefixes(zero, 10.1.2.3/8, ::ffff:0.0.0.0/104))"
	runKeyCases(t, []keyCase{
		{name: "unmasked prefix", call: call, fn: fn, req: req("10.200.0.1:1", xff, "203.0.113.7"), want: "ip:203.0.113.7"},
		{name: "mapped prefix", call: call, fn: fn, req: req("0.1.2.3:1", xff, "203.0.113.7"), want: "ip:203.0.113.7"},
		{name: "outside", call: call, fn: fn, req: req("11.0.0.1:1", xff, "203.0.113.7"), want: "ip:11.0.0.1"},
	})
}

func TestParseProxies(t *testing.T) {
	cases := []struct {
		name    string
		in      []string
		want    string // the prefixes, space-separated
		wantErr string // a substring of the error
	}{
		{name: "none", in: nil, want: ""},
		{name: "prefixes", in: []string{"10.0.0.0/8", "2001:db8::/32"}, want: "10.0.0.0/8 2001:db8::/32"},
		{name: "bare addresses", in: []string{"192.0.2.1", "::1"}, want: "192.0.2.1/32 ::1/128"},
		{name: "unmasked", in: []string{"10.1.2.3/8"}, want: "10.0.0.0/8"},
		{name: "mapped", in: []string{"::ffff:192.0.2.1", "::ffff:10.0.0.0/104"}, want: "192.0.2.1/32 10.0.0.0/8"},
		{name: "spaces", in: []string{" 10.0.0.0/8 "}, want: "10.0.0.0/8"},
		{name: "zone", in: []string{"fe80::1%eth0"}, want: "fe80::1/128"},
		{name: "bad prefix length", in: []string{"10.0.0.0/8", "10.0.0.0/40"}, wantErr: `"10.0.0.0/40"`},
		{name: "hostname", in: []string{"lb.internal"}, wantErr: `"lb.internal"`},
		{name: "empty", in: []string{""}, wantErr: `""`},
		{name: "address with port", in: []string{"10.0.0.1:80"}, wantErr: `"10.0.0.1:80"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := keyfunc.ParseProxies(tc.in...)
			if tc.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), "keyfunc: ") || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("ParseProxies(%q) = %v, %v, want an error naming %s", tc.in, got, err, tc.wantErr)
				}
				return
			}
			var s []string
			for _, p := range got {
				s = append(s, p.String())
			}
			if err != nil || strings.Join(s, " ") != tc.want {
				t.Errorf("ParseProxies(%q) = %v, %v, want %s, <nil>", tc.in, got, err, tc.want)
			}
		})
	}
}

// captureLog sends the default slog logger to a buffer until the test ends.
func captureLog(t *testing.T) *syncBuffer {
	t.Helper()
	buf := new(syncBuffer)
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(buf, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	return buf
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) lines() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.b.String(), "\n")
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestIPWarnsOnce(t *testing.T) {
	logs := captureLog(t)
	fn := keyfunc.IP()

	steps := []struct {
		name  string
		req   *fakeRequest
		lines int // log lines written so far
	}{
		{name: "no forwarding headers", req: req("203.0.113.7:1"), lines: 0},
		{name: "unrelated header", req: req("203.0.113.7:1", "X-Tenant-ID", "acme"), lines: 0},
		{name: "X-Forwarded-For", req: req("203.0.113.7:1", xff, "6.6.6.6"), lines: 1},
		{name: "X-Forwarded-For again", req: req("203.0.113.7:1", xff, "6.6.6.6"), lines: 1},
		{name: "X-Real-IP", req: req("203.0.113.7:1", realIP, "6.6.6.6"), lines: 1},
		{name: "Forwarded", req: req("203.0.113.7:1", "Forwarded", "for=6.6.6.6"), lines: 1},
	}
	for _, s := range steps {
		if _, err := fn(s.req); err != nil {
			t.Fatalf("IP()(%s) failed: %v", s.name, err)
		}
		if got := logs.lines(); got != s.lines {
			t.Fatalf("after %s: %d log lines, want %d\n%s", s.name, got, s.lines, logs)
		}
	}
	out := logs.String()
	for _, want := range []string{"level=WARN", "keyfunc.TrustProxies", "header=X-Forwarded-For"} {
		if !strings.Contains(out, want) {
			t.Errorf("warning %q does not mention %q", out, want)
		}
	}
	if strings.Contains(out, "6.6.6.6") {
		t.Errorf("warning %q repeats header text", out)
	}
}

func TestIPWarnsOncePerFuncConcurrently(t *testing.T) {
	logs := captureLog(t)
	fns := []keyfunc.Func{keyfunc.IP(), keyfunc.IP(keyfunc.IPv4Prefix(24))}
	r := req("203.0.113.7:1", realIP, "6.6.6.6")
	var wg sync.WaitGroup
	for range 8 {
		for _, fn := range fns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 100 {
					_, _ = fn(r)
				}
			}()
		}
	}
	wg.Wait()
	if got := logs.lines(); got != len(fns) {
		t.Errorf("%d IP Funcs called concurrently wrote %d warnings, want one each\n%s", len(fns), got, logs)
	}
}

func TestIPNoWarningWithTrustedProxies(t *testing.T) {
	logs := captureLog(t)
	fn := keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8"))
	for _, r := range []*fakeRequest{
		req("203.0.113.7:1", xff, "6.6.6.6"),
		req("10.0.0.1:1", xff, "6.6.6.6"),
		req("10.0.0.1:1", realIP, "6.6.6.6"),
	} {
		_, _ = fn(r)
	}
	if got := logs.lines(); got != 0 {
		t.Errorf("IP(TrustProxies) logged %d lines, want 0\n%s", got, logs)
	}
}

// TestIPRecentCache checks the cache of recent keys: thousands of addresses
// (far more than its slots, so they collide and replace each other), asked
// in an interleaved order from several goroutines, always get the key a
// fresh extractor gives, and an address asked again costs no allocation.
func TestIPRecentCache(t *testing.T) {
	var addrs []string
	for i := range 3000 {
		if i%2 == 0 {
			addrs = append(addrs, netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}).String())
		} else {
			addrs = append(addrs, netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, byte(i >> 8), byte(i), 7: 1, 15: byte(i)}).String())
		}
	}
	want := func(a string) string {
		k, err := keyfunc.IP(keyfunc.IPv6Prefix(64))(&fakeRequest{remote: a})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	wants := make([]string, len(addrs))
	for i, a := range addrs {
		wants[i] = want(a)
	}
	fn := keyfunc.IP(keyfunc.IPv6Prefix(64))
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 3 {
				for i := range addrs {
					j := (i*7 + g*13 + round*101) % len(addrs)
					got, err := fn(&fakeRequest{remote: addrs[j]})
					if err != nil || got != wants[j] {
						t.Errorf("IP(%s) = %q, %v; want %q", addrs[j], got, err, wants[j])
						return
					}
				}
			}
		}()
	}
	wg.Wait()

	req := &fakeRequest{remote: "198.51.100.23:443"}
	if _, err := fn(req); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = fn(req) }); n != 0 {
		t.Errorf("a repeated address: %v allocations, want 0", n)
	}
}

// TestIPWarnsAfterManyPlainRequests checks that forwarding headers are
// still noticed once the extractor only samples requests for them (after
// its first 64): a proxy forwards them on every request.
func TestIPWarnsAfterManyPlainRequests(t *testing.T) {
	logs := captureLog(t)
	fn := keyfunc.IP()
	plain := &fakeRequest{remote: "203.0.113.7:1"}
	for range 1000 {
		if _, err := fn(plain); err != nil {
			t.Fatal(err)
		}
	}
	if logs.lines() != 0 {
		t.Fatalf("plain requests logged:\n%s", logs)
	}
	forwarded := &fakeRequest{remote: "203.0.113.7:1", headers: map[string]string{xff: "6.6.6.6"}}
	// Sampling one request in 16, 1,000 forwarded requests all go
	// unlooked-at with probability (15/16)^1000, below 1e-28.
	for i := range 1000 {
		if _, err := fn(forwarded); err != nil {
			t.Fatal(err)
		}
		if logs.lines() == 1 {
			t.Logf("warned after %d forwarded requests", i+1)
			return
		}
	}
	t.Fatalf("1000 forwarded requests after 1000 plain ones: %d warnings, want 1", logs.lines())
}

// frameworkReq is a request view whose framework resolved the client
// address itself.
type frameworkReq struct {
	*fakeRequest
	client string
}

func (r frameworkReq) ClientIP() string { return r.client }

// TestFrameworkClientIP: with the option, the framework's resolved address
// is keyed, grouped as IP groups addresses; without it, or without a
// resolver, or with one that returns no address, IP's own rules apply.
func TestFrameworkClientIP(t *testing.T) {
	spoofed := req("10.0.0.1:5000", xff, "198.51.100.9")
	framework := keyfunc.IP(keyfunc.FrameworkClientIP())
	for _, tc := range []struct {
		name string
		fn   keyfunc.Func
		r    keyfunc.Request
		want string
	}{
		{"resolved by the framework", framework, frameworkReq{spoofed, "198.51.100.9"}, "ip:198.51.100.9"},
		{"IPv6 grouped by /64", framework, frameworkReq{spoofed, "2001:db8:1:2::7"}, "ip:2001:db8:1:2::/64"},
		{"not opted in", keyfunc.IP(), frameworkReq{spoofed, "198.51.100.9"}, "ip:10.0.0.1"},
		{"no resolver (net/http)", framework, spoofed, "ip:10.0.0.1"},
		{"resolver returned garbage", framework, frameworkReq{spoofed, "not an address"}, "ip:10.0.0.1"},
	} {
		if got, err := tc.fn(tc.r); err != nil || got != tc.want {
			t.Errorf("%s: key = %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}
