package outbound

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
)

// BenchmarkTakeWarmLease is the cost of one call's Take from a hot
// upstream key's budget on a real Redis, its token lease warm: most calls
// are admitted from the tokens in hand, without a round trip.
func BenchmarkTakeWarmLease(b *testing.B) {
	lim := fleet(b, 1)[0]
	budget, err := New(lim, core.Limit{Rate: 1_000_000, Period: time.Second, Burst: 1_000_000})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = budget.Close() })
	ctx := context.Background()
	for range 20000 { // warm: the key turns hot and a lease is taken
		if err := budget.Take(ctx, "host:api"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := budget.Take(ctx, "host:api"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTransportWarmLease is the cost the transport adds to a call
// (key, Take from a warm lease, reading the response's fields), around a
// RoundTripper that answers at once.
func BenchmarkTransportWarmLease(b *testing.B) {
	lim := fleet(b, 1)[0]
	budget, err := New(lim, core.Limit{Rate: 1_000_000, Period: time.Second, Burst: 1_000_000})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = budget.Close() })
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Ratelimit": {`"api";r=999;t=1`}}, Body: http.NoBody}
	rt := budget.Transport(Host(), roundTripFunc(func(*http.Request) (*http.Response, error) { return resp, nil }))
	req, err := http.NewRequest(http.MethodGet, "http://api.example/", nil)
	if err != nil {
		b.Fatal(err)
	}
	for range 20000 {
		if _, err := rt.RoundTrip(req); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := rt.RoundTrip(req); err != nil {
			b.Fatal(err)
		}
	}
}
