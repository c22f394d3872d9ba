package keyfunc_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/keyfunc"
)

func TestParseListEntry(t *testing.T) {
	for _, c := range []struct {
		in     string
		prefix string // "" for a key
		err    string // a substring of the error; "" for none
	}{
		{in: "203.0.113.7", prefix: "203.0.113.7/32"},
		{in: "10.0.0.0/8", prefix: "10.0.0.0/8"},
		{in: "10.1.2.3/8", prefix: "10.0.0.0/8"},
		{in: "0.0.0.0/0", prefix: "0.0.0.0/0"},
		{in: "2001:db8::1", prefix: "2001:db8::1/128"},
		{in: "2001:db8::/32", prefix: "2001:db8::/32"},
		{in: "::ffff:10.0.0.1", prefix: "10.0.0.1/32"},
		{in: "::ffff:10.0.0.0/104", prefix: "10.0.0.0/8"},
		{in: "fe80::1%eth0", prefix: "fe80::1/128"},
		{in: "tenant:acme"},
		{in: "tenant:a:b"},
		{in: "ip:192.0.2.1"},
		{in: "route:GET /a/{id}"},
		{in: "user:42|route:GET /search"},
		{in: "v1.2"},
		{in: "", err: "empty list entry"},
		{in: strings.Repeat("k", 1025), err: "list entry of 1025 bytes, at most 1024"},
		{in: "10.0.0.0/33", err: `list entry "10.0.0.0/33" is not a valid CIDR prefix: the length "33" is not a number from 0 to 32`},
		{in: "2001:db8::/129", err: `the length "129" is not a number from 0 to 128`},
		{in: "10.0.0.0/x", err: `the length "x"`},
		{in: "300.1.2.3", err: `list entry "300.1.2.3" is not a valid IP address: IPv4 field has value >255`},
		{in: "10.1.2", err: `"10.1.2" is not a valid IP address`},
		{in: "300.1.2.3/8", err: `"300.1.2.3/8" is not a valid IP address`},
		{in: "2001:db8::12345", err: `"2001:db8::12345" is not a valid IP address`},
		{in: "fe80::1%eth0/64", err: "a CIDR prefix has no zone"},
	} {
		p, isAddr, err := keyfunc.ParseListEntry(c.in)
		var got string
		if isAddr {
			got = p.String()
		}
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("ParseListEntry(%q) = %q, %v; want an error with %q", c.in, got, err, c.err)
		case c.err == "" && (err != nil || got != c.prefix):
			t.Errorf("ParseListEntry(%q) = %q, %v; want %q", c.in, got, err, c.prefix)
		}
	}
}

// FuzzParseListEntry: no entry makes ParseListEntry panic; an address
// entry is a valid masked prefix; and an entry it accepts as an address
// reads the same when written back in canonical form.
func FuzzParseListEntry(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8", "300.1.2.3", "2001:db8::1", "fe80::1%eth0", "tenant:a:b", "::ffff:1.2.3.4/120", "1.2.3", "", "a:b:c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, isAddr, err := keyfunc.ParseListEntry(s)
		if err != nil || !isAddr {
			return
		}
		if !p.IsValid() || p != p.Masked() || p.Addr().Is4In6() || p.Addr().Zone() != "" {
			t.Fatalf("ParseListEntry(%q) = %v, not a valid masked, unmapped prefix", s, p)
		}
		q, isAddr, err := keyfunc.ParseListEntry(p.String())
		if err != nil || !isAddr || q != p {
			t.Fatalf("ParseListEntry(%q) = %v, but its canonical form %q reads %v, %v, %v", s, p, p.String(), q, isAddr, err)
		}
	})
}
