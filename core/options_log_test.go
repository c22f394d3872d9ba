package core

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestNewNilOption(t *testing.T) {
	for _, opts := range [][]Option{{nil}, {WithTimeout(time.Second), nil}} {
		if _, err := NewMemory(opts...); err == nil || !strings.Contains(err.Error(), "is nil") {
			t.Errorf("NewMemory with a nil option = %v, want an error", err)
		}
		if _, err := New(&fakeScripter{}, opts...); err == nil || !strings.Contains(err.Error(), "is nil") {
			t.Errorf("New with a nil option = %v, want an error", err)
		}
	}
}

// TestFallbackShareOverflowMessage: 1000/8760h over 300 replicas cannot
// be shared exactly (8760h × 300 overflows a Duration); the warning says
// so, not "Period … got -1ns".
func TestFallbackShareOverflowMessage(t *testing.T) {
	log := &warnings{}
	lim, err := NewMemory(WithFallbackReplicas(300), WithLogger(slog.New(log)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lim.Allow(context.Background(), "k", Limit{Rate: 1000, Period: 8760 * time.Hour, Burst: 1000}); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(log.Lines(), "\n")
	if !strings.Contains(got, "its Period times the replicas is longer than a time.Duration holds") || strings.Contains(got, "-1ns") || strings.Contains(got, "-2562047h") {
		t.Errorf("logged %q, want the overflow named", got)
	}
}
