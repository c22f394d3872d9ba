package sluicepage_test

import (
	"os"
	"testing"

	"github.com/sluicehq/sluice/internal/leakcheck"
	"github.com/sluicehq/sluice/redistest"
)

// TestMain runs the tests, then checks that no goroutine of sluice
// outlived them: the page's readers end with each request, and the
// limiters and sets the tests make are closed.
func TestMain(m *testing.M) {
	redistest.QuietClientLogs() // the tests that stop Redis mean to
	os.Exit(leakcheck.Main(m))
}
