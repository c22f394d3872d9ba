package main

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// verify builds what a user downloads. It writes the file proxy of the
// declared version into a temporary directory, then in an empty module
// outside the workspace, with that proxy first and no replace line, go gets
// every published module at that version and builds the first Go example
// of README.md and every package of every published module.
//
// The modules of sluice come from the file proxy alone; their
// dependencies come from the local module cache, then from the configured
// GOPROXY. A module cache of its own (kept between runs, in the user cache
// directory) holds what it downloads, so that a version built from one work
// tree never lands in the module cache other builds read: sluice's modules
// are removed from it before each run.
func verify() error {
	start := time.Now()
	r, v, err := loadVersion()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "sluice-verify-")
	if err != nil {
		return err
	}
	keep := false
	defer func() {
		if keep {
			fmt.Fprintf(os.Stderr, "release: the proxy and the consumer module are kept in %s\n", tmp)
		} else {
			os.RemoveAll(tmp)
		}
	}()
	proxyDir := filepath.Join(tmp, "proxy")
	published, err := writeProxy(proxyDir, r.root, r.files, r.mods, v)
	if err != nil {
		return err
	}
	rootPath := r.mods[0].Path

	readme, err := os.ReadFile(filepath.Join(r.root, "README.md"))
	if err != nil {
		return err
	}
	prog, err := readmeProgram(readme)
	if err != nil {
		return fmt.Errorf("README.md: %v", err)
	}
	rootMod, err := os.ReadFile(filepath.Join(r.root, "go.mod"))
	if err != nil {
		return err
	}
	goLine := regexp.MustCompile(`(?m)^go \S+$`).Find(rootMod)
	consumer := filepath.Join(tmp, "consumer")
	if err := os.MkdirAll(consumer, 0o755); err != nil {
		return err
	}
	for name, text := range map[string]string{
		"go.mod":  "module example.com/consumer\n\n" + string(goLine) + "\n",
		"main.go": prog,
	} {
		if err := os.WriteFile(filepath.Join(consumer, name), []byte(text), 0o644); err != nil {
			return err
		}
	}

	env, err := verifyEnv(r.root, proxyDir, rootPath)
	if err != nil {
		return err
	}
	goCmd := func(args ...string) error {
		t := time.Now()
		cmd := exec.Command("go", args...)
		cmd.Dir = consumer
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			keep = true
			return fmt.Errorf("go %s in a module of its own, from the file proxy: %v\n%s", strings.Join(args, " "), err, indent(string(out)))
		}
		fmt.Printf("ok   go %s (%.1fs)\n", strings.Join(args, " "), time.Since(t).Seconds())
		return nil
	}
	get := []string{"get"}
	for _, m := range published {
		get = append(get, m.Path+"@"+v)
	}
	// Every package first: the README's program then links what that
	// build compiled.
	for _, args := range [][]string{
		get,
		{"build", rootPath + "/..."},
		{"build", "-o", os.DevNull, "."},
	} {
		if err := goCmd(args...); err != nil {
			return err
		}
	}
	gomod, err := os.ReadFile(filepath.Join(consumer, "go.mod"))
	if err != nil {
		return err
	}
	for _, m := range published {
		if !regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(m.Path) + ` ` + regexp.QuoteMeta(v) + `\b`).Match(gomod) {
			keep = true
			return fmt.Errorf("the consumer module does not require %s %s:\n%s", m.Path, v, indent(string(gomod)))
		}
	}
	fmt.Printf("ok   %d modules at %s, from a file proxy, in %.1fs\n", len(published), v, time.Since(start).Seconds())
	return nil
}

// verifyEnv is the environment of verify's go commands: no workspace, the
// file proxy first, no checksum database for sluice's modules (they are
// not published yet), and a module cache of verify's own.
func verifyEnv(root, proxyDir, rootPath string) ([]string, error) {
	goenv, err := run(root, "go", "env", "GOPROXY", "GOMODCACHE", "GOFLAGS")
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimRight(goenv, "\n"), "\n")
	if len(lines) != 3 {
		return nil, fmt.Errorf("go env printed %q", goenv)
	}
	upstream, modcache, goflags := lines[0], lines[1], lines[2]
	cacheDir, err := os.UserCacheDir()
	if err != nil {
		cacheDir = os.TempDir()
	}
	own := filepath.Join(cacheDir, "sluice-release", fmt.Sprintf("%x", sha256.Sum256([]byte(root)))[:12], "mod")
	if err := removeModules(own, rootPath); err != nil {
		return nil, err
	}
	proxies := []string{"file://" + filepath.ToSlash(proxyDir)}
	if modcache != "" && modcache != own {
		// The module cache's download directory is itself a proxy.
		proxies = append(proxies, "file://"+filepath.ToSlash(filepath.Join(modcache, "cache", "download")))
	}
	if upstream != "" && upstream != "off" {
		proxies = append(proxies, upstream)
	}
	env := []string{
		"GOWORK=off",
		"GOTOOLCHAIN=local",
		"GOPROXY=" + strings.Join(proxies, ","),
		"GONOSUMDB=" + rootPath,
		"GOPRIVATE=",
		"GONOPROXY=",
		"GOMODCACHE=" + own,
		"GOFLAGS=" + strings.TrimSpace(goflags+" -mod=mod"),
		// The go command indexes the packages of a module in the module
		// cache once, by its directory, since a version never changes;
		// here the same version comes back with other files.
		"GODEBUG=" + strings.Trim(os.Getenv("GODEBUG")+",goindex=0", ","),
	}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "GOWORK", "GOTOOLCHAIN", "GOPROXY", "GONOSUMDB", "GOPRIVATE", "GONOPROXY", "GOMODCACHE", "GOFLAGS", "GODEBUG":
		default:
			env = append(env, kv)
		}
	}
	return env, nil
}

// removeModules removes from the module cache at modcache every version of
// the modules whose path starts with rootPath, extracted or downloaded. The
// go command makes the cache read-only, so it makes them writable first.
func removeModules(modcache, rootPath string) error {
	esc := filepath.FromSlash(escapePath(rootPath))
	targets, err := filepath.Glob(filepath.Join(modcache, esc+"@*"))
	if err != nil {
		return err
	}
	targets = append(targets, filepath.Join(modcache, esc), filepath.Join(modcache, "cache", "download", esc))
	for _, t := range targets {
		err := filepath.WalkDir(t, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				return os.Chmod(p, 0o755)
			}
			return nil
		})
		if err != nil && !os.IsNotExist(err) {
			return err
		}
		if err := os.RemoveAll(t); err != nil {
			return err
		}
	}
	return nil
}
