// Command release releases sluice's modules in lockstep: every module of the
// repository requires each of its siblings at the one version they are all
// tagged with, as the OpenTelemetry Go repositories do. It uses the standard
// library and the go and git commands only. RELEASING.md gives the whole
// procedure.
//
// Run it from anywhere in the repository:
//
//	go run ./internal/release check        # the modules are in lockstep: prints the version
//	go run ./internal/release set v0.2.0   # requires every sibling at v0.2.0; prints the tags
//	go run ./internal/release tags         # the tags of the version the modules declare
//	go run ./internal/release proxy DIR    # a file-based module proxy serving that version
//	go run ./internal/release verify       # what a user downloads: go get, then build
//
// check fails when a module requires a sibling at a pseudo-version (the
// zero pseudo-version v0.0.0-00010101000000-000000000000 above all, which
// no proxy serves), at a version that is no release, or at two versions,
// and when a published module requires anything at the zero
// pseudo-version. The modules of bench, docs, examples and internal/compat
// are never published: they get no tag, but require their siblings at the
// release version all the same.
//
// The replace lines that point each module at its siblings' directories
// stay: they let go mod tidy and go build work in one module without the
// workspace, and a user's build ignores them. verify is the test that it
// does not need them: it serves the work tree's modules from a file proxy
// at the declared version, and in an empty module, outside the workspace,
// go gets every published module at that version and builds the first Go
// example of README.md and every package of every published module.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	flag.Usage = func() {
		fmt.Fprint(os.Stderr, `usage: go run ./internal/release <command>

	check        check that the modules are in lockstep and print their version
	set vX.Y.Z   require every sibling at vX.Y.Z in every go.mod; print the tags
	tags         print the tags of the version the modules declare
	proxy DIR    write a file-based module proxy serving that version
	verify       go get every published module from such a proxy and build
`)
		os.Exit(2)
	}
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 {
		flag.Usage()
	}
	var err error
	switch cmd, args := args[0], args[1:]; {
	case cmd == "check" && len(args) == 0:
		err = check()
	case cmd == "set" && len(args) == 1:
		err = set(args[0])
	case cmd == "tags" && len(args) == 0:
		err = tags()
	case cmd == "proxy" && len(args) == 1:
		err = proxy(args[0])
	case cmd == "verify" && len(args) == 0:
		err = verify()
	default:
		flag.Usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

// repo is the repository as the commands see it.
type repo struct {
	root  string
	files []string
	mods  []module
}

func load() (repo, error) {
	root, err := repoRoot()
	if err != nil {
		return repo{}, err
	}
	all, err := files(root)
	if err != nil {
		return repo{}, err
	}
	mods, err := modules(root, all)
	if err != nil {
		return repo{}, err
	}
	return repo{root, all, mods}, nil
}

// loadVersion loads the repository and the one version its modules
// require of each other.
func loadVersion() (repo, string, error) {
	r, err := load()
	if err != nil {
		return repo{}, "", err
	}
	v, err := version(r.mods)
	return r, v, err
}

func check() error {
	_, v, err := loadVersion()
	if err != nil {
		return err
	}
	fmt.Println(v)
	return nil
}

// set requires, in every go.mod of the repository, each sibling module at
// v, and prints the tags to push.
func set(v string) error {
	if err := checkVersion(v); err != nil {
		return err
	}
	r, err := load()
	if err != nil {
		return err
	}
	for _, m := range r.mods {
		if len(m.Own) == 0 {
			continue
		}
		args := []string{"mod", "edit"}
		for _, q := range m.Own {
			args = append(args, "-require="+q.Path+"@"+v)
		}
		if _, err := run(filepath.Join(r.root, filepath.FromSlash(m.Dir)), "go", args...); err != nil {
			return err
		}
	}
	if r, err = load(); err != nil {
		return err
	}
	got, err := version(r.mods)
	if err != nil {
		return err
	}
	if got != v {
		return fmt.Errorf("after set %s the modules declare %s", v, got)
	}
	printTags(r.mods, v)
	return nil
}

func tags() error {
	r, v, err := loadVersion()
	if err != nil {
		return err
	}
	printTags(r.mods, v)
	return nil
}

func printTags(mods []module, v string) {
	for _, m := range mods {
		if m.published() {
			fmt.Println(m.tag(v))
		}
	}
}

func proxy(dir string) error {
	r, v, err := loadVersion()
	if err != nil {
		return err
	}
	wrote, err := writeProxy(dir, r.root, r.files, r.mods, v)
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for _, m := range wrote {
		fmt.Printf("%s@%s\n", m.Path, v)
	}
	fmt.Printf("GOPROXY=file://%s\n", filepath.ToSlash(abs))
	return nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// indent indents every line of s by a tab, for output under a heading.
func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	return "\t" + strings.ReplaceAll(s, "\n", "\n\t")
}
