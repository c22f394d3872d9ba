package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/leakcheck"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/redistest"
)

func TestMain(m *testing.M) { os.Exit(leakcheck.Main(m)) }

// sluice runs the command with args against addr and returns its exit
// code, standard output and standard error.
func sluice(t *testing.T, addr string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), append([]string{"-redis", addr, "-prefix", "clitest:", "-timeout", "10s"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestCommand(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()

	// A service's replica reads what the command writes.
	rdb := redistest.NewClient(t, addr)
	lim, err := core.New(rdb, core.WithPrefix("clitest:"), core.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ov, err := overrides.New(lim, "plans", overrides.WithRefresh(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer ov.Close()

	steps := []struct {
		args    []string
		code    int
		out     string // a substring of standard output
		errText string // a substring of standard error
	}{
		{[]string{"override", "set", "plans", "tenant:acme", "600/1m burst 600"}, 0, "plans tenant:acme = 600/m (version 1)", ""},
		{[]string{"override", "set", "plans", "tenant:big", "10/s; 1000/h"}, 0, "= 10/s; 1000/h (version 2)", ""},
		{[]string{"deny", "plans", "203.0.113.0/24"}, 0, "plans 203.0.113.0/24 = deny", ""},
		{[]string{"allow", "plans", "tenant:internal"}, 0, "= allow", ""},
		{[]string{"override", "list", "plans"}, 0, "203.0.113.0/24\tdeny\ntenant:acme\t600/m\ntenant:big\t10/s; 1000/h\ntenant:internal\tallow\n# plans: 4 entries, version 4\n", ""},
		{[]string{"override", "rm", "plans", "tenant:big"}, 0, "plans tenant:big removed (version 5)", ""},
		{[]string{"override", "rm", "plans", "tenant:big"}, 2, "", "plans has no entry for tenant:big"},
		{[]string{"override", "set", "plans", "tenant:x", "0/m"}, 2, "", "invalid limit"},
		{[]string{"override", "set", "plans", "tenant:x"}, 2, "", "override set takes <set> <key> <override>, got 2 arguments"},
		{[]string{"override", "frob", "plans"}, 2, "", `unknown override command "frob"`},
		{[]string{"frob"}, 2, "", `unknown command "frob"`},
		{[]string{}, 2, "", "no command"},
		{[]string{"override", "list", "bad{name}"}, 2, "", "without braces"},
		// Entries no request could match: refused, and nothing written.
		{[]string{"deny", "plans", "10.0.0.0/33"}, 2, "", `list entry "10.0.0.0/33" is not a valid CIDR prefix: the length "33" is not a number from 0 to 32`},
		{[]string{"deny", "plans", "300.1.2.3"}, 2, "", `list entry "300.1.2.3" is not a valid IP address: IPv4 field has value >255`},
		{[]string{"allow", "plans", "10.1.2"}, 2, "", `"10.1.2" is not a valid IP address`},
		{[]string{"override", "set", "plans", "2001:db8::/129", "deny"}, 2, "", `the length "129"`},
		{[]string{"allow", "plans", ""}, 2, "", "empty list entry"},
		{[]string{"override", "list", "plans"}, 0, "# plans: 3 entries, version 5\n", ""},
		// An exact IPv6 address is a valid entry (the lists match whole
		// addresses), as is a limit on a key that looks like an address.
		{[]string{"deny", "plans", "2001:db8::1"}, 0, "plans 2001:db8::1 = deny (version 6)", ""},
		{[]string{"override", "rm", "plans", "2001:db8::1"}, 0, "removed (version 7)", ""},
	}
	for _, st := range steps {
		code, out, errOut := sluice(t, addr, st.args...)
		if code != st.code || !strings.Contains(out, st.out) || !strings.Contains(errOut, st.errText) {
			t.Errorf("sluice %q = %d, stdout %q, stderr %q; want %d, %q, %q", st.args, code, out, errOut, st.code, st.out, st.errText)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		o, ok := ov.Lookup("tenant:acme")
		_, big := ov.Lookup("tenant:big")
		if ok && o.String() == "600/m" && !big && ov.Len() == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica did not read the command's changes: %d entries", ov.Len())
		}
		time.Sleep(5 * time.Millisecond)
	}

	// Redis down: exit code 1.
	srv.Kill()
	if code, _, errOut := sluice(t, addr, "override", "list", "plans"); code != 1 || !strings.Contains(errOut, "store unavailable") {
		t.Errorf("with Redis down: %d, %q; want 1 and the store unavailable", code, errOut)
	}
}

func TestBadFlag(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"-nope"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "usage:") {
		t.Errorf("bad flag: %d, %q", code, errOut.String())
	}
}
