package policy

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// peerReq is a request from peer with headers.
type peerReq struct {
	fakeReq
	peer string
}

func (r peerReq) RemoteAddr() string { return r.peer }

func from(peer, tenant string, kv ...string) peerReq {
	h := map[string]string{"X-Tenant": tenant}
	for i := 0; i+1 < len(kv); i += 2 {
		h[kv[i]] = kv[i+1]
	}
	return peerReq{fakeReq: fakeReq{headers: h}, peer: peer}
}

// countingObserver counts decisions by source.
type countingObserver struct {
	core.Observer
	bySource map[core.Source]int
}

func (o *countingObserver) ObserveDecision(_ core.Result, src core.Source) { o.bySource[src]++ }

func TestLists(t *testing.T) {
	obs := &countingObserver{bySource: map[core.Source]int{}}
	log := &lines{}
	lim, err := core.NewMemory(core.WithObserver(obs), core.WithLogger(slog.New(log)))
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := New(lim, core.PerMinute(1), keyfunc.Tenant("X-Tenant"), self,
		WithAllow[req, struct{}]("tenant:internal", "10.0.0.0/8", "2001:db8::/32"),
		WithDeny[req, struct{}]("tenant:evil", "203.0.113.0/24", "10.6.6.6", "tenant:internal-but-bad"),
		WithAllow[req, struct{}]("tenant:internal", "10.0.0.0/8", "2001:db8::/32", "tenant:internal-but-bad"),
		WithListClientIP[req, struct{}](keyfunc.TrustProxies("192.0.2.0/24")),
		WithProblemJSON[req, struct{}](true),
	)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tt := range []struct {
		name   string
		r      keyfunc.Request
		action Action
		status int
	}{
		{"allowed key", from("198.51.100.1:1", "internal"), Continue, 0},
		{"allowed key again", from("198.51.100.1:1", "internal"), Continue, 0},
		{"allowed network", from("10.1.2.3:1", "a"), Continue, 0},
		{"allowed network again", from("10.1.2.3:1", "a"), Continue, 0},
		{"allowed IPv6 /64 within the /32", from("[2001:db8:1:2::9]:1", "b"), Continue, 0},
		{"denied key", from("198.51.100.1:1", "evil"), Fail, 403},
		{"deny wins over allow for a key", from("198.51.100.1:1", "internal-but-bad"), Fail, 403},
		{"deny wins over allow for an address", from("10.6.6.6:1", "c"), Fail, 403},
		{"denied network", from("203.0.113.9:1", "d"), Fail, 403},
		{"denied through a trusted proxy", from("192.0.2.5:1", "e", "X-Forwarded-For", "203.0.113.77"), Fail, 403},
		{"forwarding header of an untrusted peer ignored", from("198.51.100.2:1", "f", "X-Forwarded-For", "203.0.113.77"), Continue, 0},
		{"not listed: limited", from("198.51.100.3:1", "f"), Deny, 429},
	} {
		v := p.Decide(ctx, tt.r)
		if v.Action != tt.action || v.Status != tt.status {
			t.Errorf("%s: Decide = action %d status %d (%v), want %d %d", tt.name, v.Action, v.Status, v.Err, tt.action, tt.status)
		}
		if tt.action == Continue && len(headersOf(v)) != 0 && strings.HasPrefix(tt.name, "allowed") {
			t.Errorf("%s: rate-limit fields %v on an allowed request", tt.name, headersOf(v))
		}
		if tt.status == 403 {
			if !errors.Is(v.Err, ErrDenyList) {
				t.Errorf("%s: Err = %v, want ErrDenyList", tt.name, v.Err)
			}
			ct, body := v.Body()
			if ct != "application/problem+json" || !strings.Contains(string(body), `"type":"`+DenyListProblem+`"`) ||
				!strings.Contains(string(body), `"title":"Forbidden","status":403`) {
				t.Errorf("%s: Body = %s %s", tt.name, ct, body)
			}
		}
	}
	if n := obs.bySource[core.SourceDenyList]; n != 5 {
		t.Errorf("observed %d deny-list refusals, want 5", n)
	}
	if got := log.got; len(got) != 0 {
		t.Errorf("logged %q; a deny-list refusal is not a misconfiguration", got)
	}
}

func TestListsBadEntries(t *testing.T) {
	for _, e := range []string{"", "10.0.0.0/33", "300.1.2.3", "1.2.3", "2001:db8::/129", strings.Repeat("k", 1025)} {
		lim, _ := core.NewMemory()
		if _, _, err := New(lim, core.PerMinute(1), keyfunc.IP(), self, WithDeny[req, struct{}](e)); err == nil || !strings.HasPrefix(err.Error(), "WithDeny: ") {
			t.Errorf("WithDeny(%q): New = %v, want a WithDeny error", e, err)
		}
	}
	// Keys that merely contain slashes or colons are keys.
	lim, _ := core.NewMemory()
	if _, _, err := New(lim, core.PerMinute(1), keyfunc.IP(), self, WithAllow[req, struct{}]("route:GET /a/{id}", "ip:192.0.2.1", "tenant:a:b")); err != nil {
		t.Errorf("WithAllow of keys: %v", err)
	}
}

func TestListsDryRun(t *testing.T) {
	var reports []DryRunReport
	p := newTestPolicy(t, core.PerMinute(1), keyfunc.Tenant("X-Tenant"), WithDeny[req, struct{}]("tenant:evil"),
		WithDryRun[req, struct{}](true), WithDryRunHandler[req, struct{}](func(_ req, r DryRunReport) { reports = append(reports, r) }))
	v := p.Decide(context.Background(), from("198.51.100.1:1", "evil"))
	if v.Action != Continue || len(reports) != 1 || !errors.Is(reports[0].Err, ErrDenyList) {
		t.Fatalf("dry run: %+v, reports %+v", v, reports)
	}
}

// TestListsBehindGateway runs the lists behind a simulated gateway: every
// request arrives from the gateway's address in 10/8, with the client in
// X-Forwarded-For. Without the gateway named, the allow range 10.0.0.0/8
// (meant for internal clients) holds the gateway, lets every client pass,
// and that is logged once; named once and shared with the key function,
// the lists see the real client.
func TestListsBehindGateway(t *testing.T) {
	const gatewayPeer = "10.0.0.5:41000"
	via := func(client, tenant string) peerReq {
		return from(gatewayPeer, tenant, "X-Forwarded-For", client)
	}
	gateway := keyfunc.TrustProxies("10.0.0.5")
	entries := func(opts ...Option[req, struct{}]) []Option[req, struct{}] {
		return append([]Option[req, struct{}]{
			WithAllow[req, struct{}]("10.0.0.0/8", "2001:db8:1::7"),
			WithDeny[req, struct{}]("203.0.113.0/24", "2001:db8:1::666"),
		}, opts...)
	}
	for _, tt := range []struct {
		name  string
		opts  []Option[req, struct{}]
		steps []struct {
			r      peerReq
			action Action
			status int
		}
		warned bool
	}{
		{"peer only (the default)", nil, []struct {
			r      peerReq
			action Action
			status int
		}{
			{via("203.0.113.9", "a"), Continue, 0}, // the deny range never matches: the gateway is allowed
			{via("198.51.100.7", "b"), Continue, 0},
			{via("198.51.100.7", "b"), Continue, 0}, // never limited
			{from("10.9.9.9:1", "c"), Continue, 0},  // an internal client, directly
		}, true},
		{"gateway named", []Option[req, struct{}]{WithListClientIP[req, struct{}](gateway)}, []struct {
			r      peerReq
			action Action
			status int
		}{
			{via("203.0.113.9", "a"), Fail, 403},
			{via("198.51.100.7", "b"), Continue, 0}, // limited: the first of one per minute
			{via("198.51.100.7", "b"), Deny, 429},
			{via("10.1.2.3", "c"), Continue, 0}, // an internal client through the gateway
			{via("10.1.2.3", "c"), Continue, 0}, // allowed, never limited
			{from("10.9.9.9:1", "d"), Continue, 0},
			{via("2001:db8:1::666", "e"), Fail, 403}, // one IPv6 address, matched whole
			{via("2001:db8:1::667", "f"), Continue, 0},
			{via("2001:db8:1::667", "f"), Deny, 429}, // its /64 neighbour is not allowed
			{via("2001:db8:1::7", "g"), Continue, 0},
			{via("2001:db8:1::7", "g"), Continue, 0},
			{from("198.51.100.8:1", "h", "X-Forwarded-For", "10.1.2.3"), Continue, 0}, // a spoofed header from an untrusted peer: ignored, limited
			{from("198.51.100.8:1", "h", "X-Forwarded-For", "10.1.2.3"), Deny, 429},
		}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			log := &lines{}
			lim, err := core.NewMemory(core.WithLogger(slog.New(log)))
			if err != nil {
				t.Fatal(err)
			}
			p, _, err := New(lim, core.PerMinute(1), keyfunc.Tenant("X-Tenant"), self, entries(tt.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range tt.steps {
				v := p.Decide(context.Background(), st.r)
				if v.Action != st.action || v.Status != st.status {
					t.Errorf("step %d (%s from %s): Decide = action %d status %d (%v), want %d %d",
						i, st.r.headers["X-Forwarded-For"], st.r.peer, v.Action, v.Status, v.Err, st.action, st.status)
				}
			}
			var warnings []string
			for _, l := range log.got {
				if strings.Contains(l, "holds the address of a proxy") {
					warnings = append(warnings, l)
				}
			}
			switch {
			case tt.warned && (len(warnings) != 1 || !strings.Contains(warnings[0], "peer=10.0.0.5 header=X-Forwarded-For")):
				t.Errorf("logged %q, want one warning naming the gateway", log.got)
			case !tt.warned && len(warnings) != 0:
				t.Errorf("logged %q, want no warning", warnings)
			}
		})
	}
	lim, _ := core.NewMemory()
	if _, _, err := New(lim, core.PerMinute(1), keyfunc.IP(), self, WithDeny[req, struct{}]("10.0.0.1"),
		WithListClientIP[req, struct{}](gateway, nil)); err == nil || !strings.Contains(err.Error(), "WithListClientIP: option 1 is nil") {
		t.Errorf("WithListClientIP with a nil option: New = %v", err)
	}
}

// TestKeyClient: the lists find the client in a key's "ip:" part, alone or
// joined, never in a value that only looks like one.
func TestKeyClient(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want string // "" for none
	}{
		{"ip:203.0.113.7", "203.0.113.7/32"},
		{"ip:2001:db8:1:2::/64", "2001:db8:1:2::/64"},
		{"tenant:acme|ip:203.0.113.7", "203.0.113.7/32"},
		{`tenant:a\|ip:203.0.113.7`, ""},                // a tenant header's text, escaped by keyfunc
		{`tenant:a\\|ip:203.0.113.7`, "203.0.113.7/32"}, // an escaped backslash, then a real part
		{"tenant:acme", ""},
		{"ip:not-an-address", ""},
	} {
		p, ok := keyClient(tc.key)
		got := ""
		if ok {
			got = p.String()
		}
		if got != tc.want {
			t.Errorf("keyClient(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
}
