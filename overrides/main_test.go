package overrides_test

import (
	"os"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit"
)

// TestMain starts the example's Redis, runs the tests and the example,
// and checks that no goroutine of sluice outlived them (every set's poller
// is stopped by Close); see testkit.MainWithRedis.
func TestMain(m *testing.M) { os.Exit(testkit.MainWithRedis(m, "overrides")) }

// exampleAddr returns the example's Redis, emptied first.
func exampleAddr() string { return testkit.ExampleAddr() }
