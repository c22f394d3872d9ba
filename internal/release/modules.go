package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// unpublished are the modules of the repository that are never tagged: no
// user imports them. They still require their siblings at the release
// version, like every module.
var unpublished = map[string]bool{
	"bench":           true,
	"docs":            true,
	"examples":        true,
	"internal/compat": true,
}

// module is one module of the repository.
type module struct {
	Dir      string    // relative to the repository root, "." for the root
	Path     string    // module path
	Require  []require // all its requirements
	Own      []require // those on other modules of the repository
	Replaced []string  // the module paths its go.mod replaces
}

// require is one requirement on a module of the repository.
type require struct {
	Path, Version string
}

// published reports whether m is tagged in a release.
func (m module) published() bool { return !unpublished[m.Dir] }

// tag is the git tag of m at version v: "v0.1.0" for the root,
// "ginlimit/v0.1.0" for a module in ginlimit/.
func (m module) tag(v string) string {
	if m.Dir == "." {
		return v
	}
	return m.Dir + "/" + v
}

// repoRoot returns the top directory of the git work tree holding the
// current directory.
func repoRoot() (string, error) {
	out, err := run("", "git", "rev-parse", "--show-toplevel")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(out), nil
}

// run runs a command in dir and returns its standard output; an error
// carries its standard error.
func run(dir, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.Bytes())
	}
	return string(out), nil
}

// files returns the files of the work tree that git tracks or would track
// (not ignored), as slash-separated paths relative to root, sorted. Files
// deleted from the work tree are left out.
func files(root string) ([]string, error) {
	out, err := run(root, "git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	if err != nil {
		return nil, err
	}
	var list []string
	seen := map[string]bool{}
	for _, f := range strings.Split(out, "\x00") {
		if f == "" || seen[f] {
			continue
		}
		seen[f] = true
		if fi, err := os.Lstat(filepath.Join(root, filepath.FromSlash(f))); err != nil || !fi.Mode().IsRegular() {
			continue // deleted, a symbolic link, or a submodule: never in a module zip
		}
		list = append(list, f)
	}
	sort.Strings(list)
	return list, nil
}

// modules returns the modules whose go.mod is among files, root first, then
// by directory.
func modules(root string, files []string) ([]module, error) {
	var mods []module
	for _, f := range files {
		if path.Base(f) != "go.mod" || strings.Contains(f, "testdata/") {
			continue
		}
		dir := path.Dir(f)
		out, err := run(filepath.Join(root, filepath.FromSlash(dir)), "go", "mod", "edit", "-json")
		if err != nil {
			return nil, err
		}
		var gm struct {
			Module  struct{ Path string }
			Require []struct{ Path, Version string }
			Replace []struct{ Old struct{ Path string } }
		}
		if err := json.Unmarshal([]byte(out), &gm); err != nil {
			return nil, fmt.Errorf("%s: %v", f, err)
		}
		m := module{Dir: dir, Path: gm.Module.Path}
		for _, r := range gm.Require {
			m.Require = append(m.Require, require{r.Path, r.Version})
		}
		for _, r := range gm.Replace {
			m.Replaced = append(m.Replaced, r.Old.Path)
		}
		mods = append(mods, m)
	}
	sort.SliceStable(mods, func(i, j int) bool { return mods[i].Dir == "." && mods[j].Dir != "." })
	if len(mods) == 0 || mods[0].Dir != "." {
		return nil, fmt.Errorf("%s: no go.mod at the top", root)
	}
	// Keep only the requirements on the repository's own modules.
	own := map[string]bool{}
	for _, m := range mods {
		own[m.Path] = true
	}
	for i := range mods {
		for _, r := range mods[i].Require {
			if own[r.Path] {
				mods[i].Own = append(mods[i].Own, r)
			}
		}
	}
	for d := range unpublished {
		if !hasDir(mods, d) {
			return nil, fmt.Errorf("internal/release lists %s as unpublished, but it holds no module", d)
		}
	}
	return mods, nil
}

func ownPath(mods []module, p string) bool {
	for _, m := range mods {
		if m.Path == p {
			return true
		}
	}
	return false
}

func hasDir(mods []module, dir string) bool {
	for _, m := range mods {
		if m.Dir == dir {
			return true
		}
	}
	return false
}

// semver matches the versions a release may have: vMAJOR.MINOR.PATCH with
// an optional pre-release, never a pseudo-version.
var (
	semver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)
	pseudo = regexp.MustCompile(`[0-9]{14}-[0-9a-f]{12}$`)
)

// checkVersion reports why v cannot be a release version, or nil.
func checkVersion(v string) error {
	switch {
	case v == zeroPseudo:
		return fmt.Errorf("%s is the zero pseudo-version, which no proxy serves", v)
	case pseudo.MatchString(v):
		return fmt.Errorf("%s is a pseudo-version, not a release", v)
	case !semver.MatchString(v):
		return fmt.Errorf("%s is not a version vMAJOR.MINOR.PATCH[-pre]", v)
	}
	return nil
}

// zeroPseudo is the version the go command makes up for a module that is
// only replaced, never released: no proxy has it.
const zeroPseudo = "v0.0.0-00010101000000-000000000000"

// version returns the one version at which the modules require each other,
// or an error naming each requirement that breaks lockstep: a zero or other
// pseudo-version, a version that is no release, or two versions. A
// published module that requires anything at the zero pseudo-version is
// named too: a user's build could never find it.
func version(mods []module) (string, error) {
	versions := map[string][]string{} // version -> "dir/go.mod requires path"
	var problems []string
	for _, m := range mods {
		if m.published() {
			for _, r := range m.Require {
				if r.Version == zeroPseudo && !ownPath(mods, r.Path) { // the repository's own are checked below
					problems = append(problems, fmt.Sprintf("%s requires %s at the zero pseudo-version, which no proxy serves", path.Join(m.Dir, "go.mod"), r.Path))
				}
			}
		}
		for _, r := range m.Own {
			where := fmt.Sprintf("%s requires %s %s", path.Join(m.Dir, "go.mod"), r.Path, r.Version)
			if err := checkVersion(r.Version); err != nil {
				problems = append(problems, fmt.Sprintf("%s requires %s: %v", path.Join(m.Dir, "go.mod"), r.Path, err))
				continue
			}
			versions[r.Version] = append(versions[r.Version], where)
		}
	}
	if len(versions) > 1 {
		var vs []string
		for v, w := range versions {
			vs = append(vs, fmt.Sprintf("%s (%d requirements, e.g. %s)", v, len(w), w[0]))
		}
		sort.Strings(vs)
		problems = append(problems, "the modules require each other at more than one version: "+strings.Join(vs, "; "))
	}
	if len(problems) > 0 {
		return "", fmt.Errorf("not in lockstep:\n\t%s", strings.Join(problems, "\n\t"))
	}
	for v := range versions {
		return v, nil
	}
	return "", fmt.Errorf("no module requires another module of the repository")
}
