package main

import (
	"testing"

	"github.com/sluicehq/sluice/examples/internal/smoketest"
)

func TestRun(t *testing.T) {
	out := smoketest.Start(t, run, "-addr", "127.0.0.1:0")
	smoketest.Curl(t, out.String())
}
