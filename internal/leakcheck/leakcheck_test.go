package leakcheck

import (
	"io"
	"strings"
	"testing"
	"time"
)

// parked blocks until release is closed: a goroutine in a frame of sluice.
func parked(release <-chan struct{}) { <-release }

// TestCheck starts goroutines of sluice, sees Check report them with their
// stacks, stops them, and sees Check come back clean.
func TestCheck(t *testing.T) {
	tests := []struct {
		name  string
		start func(release <-chan struct{}) // starts the goroutine
		want  string                        // in the report
	}{
		{"parked in a function of sluice", func(release <-chan struct{}) { go parked(release) }, "leakcheck.parked"},
		// Its stack holds only io's frames; the line naming the function
		// that started it is sluice's.
		{"started by sluice, running elsewhere", func(release <-chan struct{}) {
			r, w := io.Pipe()
			go func() { <-release; w.Close() }()
			go io.ReadAll(r)
		}, "io.ReadAll"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := check(time.Second); err != nil {
				t.Fatalf("before the goroutine: %v", err)
			}
			release := make(chan struct{})
			tt.start(release)
			err := check(100 * time.Millisecond)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("check() = %v, want a report naming %s", err, tt.want)
			}
			close(release)
			if err := check(5 * time.Second); err != nil {
				t.Fatalf("after the goroutine ended: check() = %v, want nil", err)
			}
		})
	}
}

// TestCounts decides, for stacks as runtime.Stack writes them, which
// goroutines are leaks.
func TestCounts(t *testing.T) {
	tests := []struct {
		name  string
		stack string
		want  bool
	}{
		{"sluice frame", `goroutine 9 [chan receive]:
github.com/sluicehq/sluice/redistest.(*Proxy).serve(0xc000120000, {0x7a2b60, 0xc00011e000})
	/src/sluice/redistest/proxy.go:180 +0x5d
created by github.com/sluicehq/sluice/redistest.ListenProxy in goroutine 7
	/src/sluice/redistest/proxy.go:112 +0x2b5`, true},
		{"generic method", `goroutine 12 [select]:
github.com/sluicehq/sluice/core/internal/batch.(*Batcher[...]).lead(0xc0001a2000, {0x7a2b60, 0xc00011e000})
	/src/sluice/core/internal/batch/batch.go:301 +0x1f0
created by github.com/sluicehq/sluice/core/internal/batch.(*Batcher[...]).Do in goroutine 11
	/src/sluice/core/internal/batch/batch.go:200 +0x2a`, true},
		{"started by sluice", `goroutine 20 [IO wait]:
internal/poll.runtime_pollWait(0x7f0, 0x72)
	/usr/local/go/src/runtime/netpoll.go:351 +0x85
net/http.(*Server).Serve(0xc000200000, {0x7a2b60, 0xc00011e000})
	/usr/local/go/src/net/http/server.go:3330 +0x30c
created by github.com/sluicehq/sluice/core.TestSomething in goroutine 18
	/src/sluice/core/some_test.go:40 +0x1a5`, true},
		{"another module's", `goroutine 30 [select]:
github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper(0xc000300000, 0x3b9aca00)
	/go/pkg/mod/github.com/redis/go-redis/v9/internal/pool/pool.go:500 +0xc5
created by github.com/redis/go-redis/v9/internal/pool.NewConnPool in goroutine 1
	/go/pkg/mod/github.com/redis/go-redis/v9/internal/pool/pool.go:120 +0x2d6`, false},
		{"a running test", `goroutine 7 [chan receive]:
github.com/sluicehq/sluice/core.TestKillAndRestart(0xc000103500)
	/src/sluice/core/degrade_test.go:150 +0x3c5
testing.tRunner(0xc000103500, 0x6f0e48)
	/usr/local/go/src/testing/testing.go:1934 +0xea
created by testing.(*T).Run in goroutine 1
	/usr/local/go/src/testing/testing.go:1997 +0x465`, false},
		{"the tests' main goroutine", `goroutine 1 [chan receive]:
testing.(*T).Run(0xc000103380, {0x6c1b2e, 0x9}, 0x6f0e48)
	/usr/local/go/src/testing/testing.go:2005 +0x485
testing.runTests(...)
	/usr/local/go/src/testing/testing.go:2477 +0x3b
testing.(*M).Run(0xc0000f6140)
	/usr/local/go/src/testing/testing.go:2337 +0x63a
github.com/sluicehq/sluice/core_test.TestMain(0xc0000f6140)
	/src/sluice/core/example_test.go:30 +0x1f
main.main()
	_testmain.go:120 +0xa5`, false},
		{"leakcheck itself", `goroutine 5 [sleep]:
time.Sleep(0xf4240)
	/usr/local/go/src/runtime/time.go:363 +0x165
github.com/sluicehq/sluice/internal/leakcheck.check(0x12a05f200)
	/src/sluice/internal/leakcheck/leakcheck.go:70 +0x12f
created by github.com/sluicehq/sluice/internal/leakcheck.Check in goroutine 1
	/src/sluice/internal/leakcheck/leakcheck.go:60 +0x1a`, false},
		{"runtime only", `goroutine 2 [force gc (idle)]:
runtime.gopark(0x0?, 0x0?, 0x0?, 0x0?, 0x0?)
	/usr/local/go/src/runtime/proc.go:435 +0xce
created by runtime.init.7 in goroutine 1
	/usr/local/go/src/runtime/proc.go:339 +0x1a`, false},
		{"unreadable", "not a stack", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := counts(tt.stack); got != tt.want {
				t.Errorf("counts(%s) = %v, want %v", tt.name, got, tt.want)
			}
		})
	}
}

// TestTrimArgs removes the argument list, and only that.
func TestTrimArgs(t *testing.T) {
	tests := []struct{ in, want string }{
		{"pkg.f(0x1, 0x2)", "pkg.f"},
		{"pkg.(*T).m(...)", "pkg.(*T).m"},
		{"pkg.(*B[...]).Do({0x7a, 0xc0}, 0x1)", "pkg.(*B[...]).Do"},
		{"main.main()", "main.main"},
		{"runtime.init.7", "runtime.init.7"},
	}
	for _, tt := range tests {
		if got := trimArgs(tt.in); got != tt.want {
			t.Errorf("trimArgs(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
