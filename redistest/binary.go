package redistest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The environment variables that choose the server and the command-line
// client, instead of the search on PATH (see the package doc, "Which
// server").
const (
	envServer = "SLUICE_REDIS_SERVER"
	envCLI    = "SLUICE_REDIS_CLI"
)

// serverNames are the server binaries looked for on PATH, in order: Redis
// first, then Valkey as Debian and most others install it.
var serverNames = []string{"redis-server", "valkey-server"}

// binaries finds the server and client binaries with getenv and lookPath,
// which are os.Getenv and exec.LookPath outside tests.
type binaries struct {
	getenv   func(string) string
	lookPath func(string) (string, error)
}

// osBinaries looks in this process's environment and PATH.
var osBinaries = binaries{getenv: os.Getenv, lookPath: exec.LookPath}

// server returns the server binary to run: SLUICE_REDIS_SERVER when set
// (a path, or a name looked up on PATH), otherwise the first of
// redis-server and valkey-server on PATH. chosen reports that the
// environment variable named it: a choice that does not resolve is an
// error of its own, so that a run meant for one server never passes on
// another, nor skips unseen. A binary not found wraps [exec.ErrNotFound]
// (or the error of the path given).
func (b binaries) server() (bin string, chosen bool, err error) {
	if v := b.getenv(envServer); v != "" {
		bin, err := b.lookPath(v)
		if err != nil {
			return "", true, fmt.Errorf("%s=%s: %w", envServer, v, err)
		}
		return bin, true, nil
	}
	for _, name := range serverNames {
		if bin, err := b.lookPath(name); err == nil {
			return bin, false, nil
		}
	}
	return "", false, fmt.Errorf("%s not found on PATH (%w)", strings.Join(serverNames, " or "), exec.ErrNotFound)
}

// cli returns the command-line client that matches the server:
// SLUICE_REDIS_CLI when set (a path, or a name looked up on PATH);
// otherwise the server's name with "-server" replaced by "-cli", looked
// up on PATH, or beside the server when SLUICE_REDIS_SERVER gave it as a
// path (/opt/valkey/bin/valkey-server gives /opt/valkey/bin/valkey-cli).
// chosen reports that an environment variable decided it.
func (b binaries) cli() (bin string, chosen bool, err error) {
	if v := b.getenv(envCLI); v != "" {
		bin, err := b.lookPath(v)
		if err != nil {
			return "", true, fmt.Errorf("%s=%s: %w", envCLI, v, err)
		}
		return bin, true, nil
	}
	server, chosen, err := b.server()
	if err != nil {
		return "", chosen, err
	}
	dir, name := filepath.Split(server)
	base, ok := strings.CutSuffix(name, "-server")
	if !ok || base == "" {
		return "", chosen, fmt.Errorf("cannot tell which client goes with %s (its name does not end in -server); set %s", server, envCLI)
	}
	want := base + "-cli"
	if chosen && strings.ContainsRune(b.getenv(envServer), filepath.Separator) {
		want = dir + want
		bin, err = b.lookPath(want)
		if err != nil {
			return "", chosen, fmt.Errorf("%s, the client of %s=%s: %w", want, envServer, b.getenv(envServer), err)
		}
		return bin, chosen, nil
	}
	bin, err = b.lookPath(want)
	if err != nil {
		return "", chosen, fmt.Errorf("%s not found on PATH (the client of %s; set %s to choose another): %w", want, server, envCLI, exec.ErrNotFound)
	}
	return bin, chosen, nil
}

// lookServer finds the server binary, or skips or fails the test: it fails
// under CI, and whenever SLUICE_REDIS_SERVER names a binary that is not
// there; otherwise it skips.
func lookServer(tb testing.TB) string {
	tb.Helper()
	bin, chosen, err := osBinaries.server()
	return mustFind(tb, bin, chosen, err, "install Redis or Valkey, or set REDIS_ADDR")
}

// lookCLI finds the command-line client that matches the server, or skips
// or fails the test as lookServer does.
func lookCLI(tb testing.TB) string {
	tb.Helper()
	bin, chosen, err := osBinaries.cli()
	return mustFind(tb, bin, chosen, err, "install Redis or Valkey")
}

// mustFind returns bin, or ends the test: Fatal when the binary was chosen
// by an environment variable or when running under CI, Skip otherwise.
func mustFind(tb testing.TB, bin string, chosen bool, err error, hint string) string {
	tb.Helper()
	if err == nil {
		return bin
	}
	if chosen {
		tb.Fatalf("redistest: %v", err)
	}
	if inCI() {
		tb.Fatalf("redistest: %v; CI requires a real Redis", err)
	}
	tb.Skipf("redistest: %v; %s to run this test", err, hint)
	return ""
}
