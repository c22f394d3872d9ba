package outbound

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
)

// TestNewRejectsBadOptions: each bad option fails New with an error
// naming what is wrong, and starts nothing (the leak check would see it).
func TestNewRejectsBadOptions(t *testing.T) {
	lim, err := core.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		opt  Option
		want string
	}{
		{"empty name", WithName(""), "WithName"},
		{"name too long", WithName(strings.Repeat("n", 56)), "WithName"},
		{"name with braces", WithName("a{b}"), "WithName"},
		{"pause under a second", WithMaxPause(time.Millisecond), "WithMaxPause"},
		{"pause too long", WithMaxPause(core.MaxPenalty + time.Second), "WithMaxPause"},
		{"negative retries", WithRetry(-1), "WithRetry"},
		{"nil option", nil, "nil"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := New(lim, core.PerSecond(10), c.opt)
			if err == nil {
				_ = b.Close()
				t.Fatal("New accepted it")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not name %s", err, c.want)
			}
		})
	}
	b, err := New(lim, core.PerSecond(10), WithName(strings.Repeat("n", 55)))
	if err != nil {
		t.Fatalf("a 55-byte name: %v", err)
	}
	_ = b.Close()
}
