package redistest

import (
	"errors"
	"io/fs"
	"os/exec"
	"strings"
	"testing"
)

// fakeBinaries resolves names against a fixed set of installed files, the
// way exec.LookPath does against PATH: a name without a slash is looked up
// in pathDirs, a path is taken as it is.
func fakeBinaries(env map[string]string, pathDirs []string, files ...string) binaries {
	have := make(map[string]bool, len(files))
	for _, f := range files {
		have[f] = true
	}
	return binaries{
		getenv: func(k string) string { return env[k] },
		lookPath: func(name string) (string, error) {
			if strings.Contains(name, "/") {
				if have[name] {
					return name, nil
				}
				return "", &exec.Error{Name: name, Err: fs.ErrNotExist}
			}
			for _, d := range pathDirs {
				if have[d+"/"+name] {
					return d + "/" + name, nil
				}
			}
			return "", &exec.Error{Name: name, Err: exec.ErrNotFound}
		},
	}
}

func TestBinaries(t *testing.T) {
	path := []string{"/usr/local/bin", "/usr/bin"}
	tests := []struct {
		name    string
		env     map[string]string
		files   []string
		server  string // "" for an error
		cli     string // "" for an error
		chosen  bool   // the environment decided (server and cli alike here)
		wantErr string // in the server's error, or else the client's
	}{
		{
			name:   "redis only",
			files:  []string{"/usr/bin/redis-server", "/usr/bin/redis-cli"},
			server: "/usr/bin/redis-server", cli: "/usr/bin/redis-cli",
		},
		{
			name:   "valkey only, as Debian installs it",
			files:  []string{"/usr/bin/valkey-server", "/usr/bin/valkey-cli"},
			server: "/usr/bin/valkey-server", cli: "/usr/bin/valkey-cli",
		},
		{
			name:   "both: redis wins without a choice",
			files:  []string{"/usr/bin/valkey-server", "/usr/bin/valkey-cli", "/usr/bin/redis-server", "/usr/bin/redis-cli"},
			server: "/usr/bin/redis-server", cli: "/usr/bin/redis-cli",
		},
		{
			name:   "client found on PATH, not only beside the server",
			files:  []string{"/usr/local/bin/redis-server", "/usr/bin/redis-cli"},
			server: "/usr/local/bin/redis-server", cli: "/usr/bin/redis-cli",
		},
		{
			name:   "both: a name chooses valkey",
			env:    map[string]string{envServer: "valkey-server"},
			files:  []string{"/usr/bin/valkey-server", "/usr/bin/valkey-cli", "/usr/bin/redis-server", "/usr/bin/redis-cli"},
			server: "/usr/bin/valkey-server", cli: "/usr/bin/valkey-cli", chosen: true,
		},
		{
			name:   "a path chooses a build, its client beside it",
			env:    map[string]string{envServer: "/opt/redis-8/bin/redis-server"},
			files:  []string{"/opt/redis-8/bin/redis-server", "/opt/redis-8/bin/redis-cli", "/usr/bin/redis-cli"},
			server: "/opt/redis-8/bin/redis-server", cli: "/opt/redis-8/bin/redis-cli", chosen: true,
		},
		{
			name:    "a path whose client is not beside it",
			env:     map[string]string{envServer: "/opt/redis-8/bin/redis-server"},
			files:   []string{"/opt/redis-8/bin/redis-server", "/usr/bin/redis-cli"},
			server:  "/opt/redis-8/bin/redis-server",
			chosen:  true,
			wantErr: "/opt/redis-8/bin/redis-cli, the client of SLUICE_REDIS_SERVER",
		},
		{
			name:   "the client set on its own",
			env:    map[string]string{envServer: "/opt/v/bin/valkey-server", envCLI: "/usr/bin/redis-cli"},
			files:  []string{"/opt/v/bin/valkey-server", "/usr/bin/redis-cli"},
			server: "/opt/v/bin/valkey-server", cli: "/usr/bin/redis-cli", chosen: true,
		},
		{
			name:    "a server name without -server needs the client set",
			env:     map[string]string{envServer: "/opt/x/myredis"},
			files:   []string{"/opt/x/myredis", "/usr/bin/redis-cli"},
			server:  "/opt/x/myredis",
			chosen:  true,
			wantErr: "set SLUICE_REDIS_CLI",
		},
		{
			name:    "a chosen server that is not there",
			env:     map[string]string{envServer: "valkey-server"},
			files:   []string{"/usr/bin/redis-server", "/usr/bin/redis-cli"},
			chosen:  true,
			wantErr: "SLUICE_REDIS_SERVER=valkey-server",
		},
		{
			name:    "a chosen client that is not there",
			env:     map[string]string{envCLI: "/nope/valkey-cli"},
			files:   []string{"/usr/bin/redis-server", "/usr/bin/redis-cli"},
			server:  "/usr/bin/redis-server",
			chosen:  true, // for the client; the server was found on PATH
			wantErr: "SLUICE_REDIS_CLI=/nope/valkey-cli",
		},
		{
			name:    "server without its client",
			files:   []string{"/usr/bin/valkey-server", "/usr/bin/redis-cli"},
			server:  "/usr/bin/valkey-server",
			wantErr: "valkey-cli not found on PATH",
		},
		{
			name:    "nothing installed",
			wantErr: "redis-server or valkey-server not found on PATH",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := fakeBinaries(tt.env, path, tt.files...)
			server, schosen, serr := b.server()
			cli, cchosen, cerr := b.cli()
			if server != tt.server || (serr == nil) != (tt.server != "") {
				t.Errorf("server() = %q, %v, want %q", server, serr, tt.server)
			}
			if cli != tt.cli || (cerr == nil) != (tt.cli != "") {
				t.Errorf("cli() = %q, %v, want %q", cli, cerr, tt.cli)
			}
			if _, set := tt.env[envServer]; schosen != set {
				t.Errorf("server() chosen = %v, want %v", schosen, set)
			}
			if cchosen != tt.chosen {
				t.Errorf("cli() chosen = %v, want %v", cchosen, tt.chosen)
			}
			err := serr
			if err == nil {
				err = cerr
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("unexpected error %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("error = %v, want it to contain %q", err, tt.wantErr)
			}
			if tt.server == "" && tt.env[envServer] == "" && !errors.Is(serr, exec.ErrNotFound) {
				t.Errorf("server() error = %v, want it to wrap exec.ErrNotFound", serr)
			}
		})
	}
}

// TestChosenServerMissingFails checks that a server named by
// SLUICE_REDIS_SERVER that is not there fails the test outside CI too,
// where a server merely missing from PATH skips it.
func TestChosenServerMissingFails(t *testing.T) {
	for _, ci := range []string{"", "true"} {
		t.Run("CI="+ci, func(t *testing.T) {
			t.Setenv("CI", ci)
			t.Setenv(envServer, "/nonexistent/valkey-server")
			t.Setenv(envCLI, "")
			ft := &fakeTB{TB: t}
			runFake(func() { Start(ft) })
			defer ft.runCleanups()
			if !ft.failed || ft.skipped {
				t.Fatalf("Start() with %s unresolvable: failed = %v, skipped = %v, want a failure", envServer, ft.failed, ft.skipped)
			}
			if !strings.Contains(ft.msg, envServer+"=/nonexistent/valkey-server") {
				t.Errorf("message = %q, want it to name the variable and its value", ft.msg)
			}
		})
	}
}
