package main

import (
	"archive/zip"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

func TestZipFiles(t *testing.T) {
	all := []string{
		"LICENSE",
		"go.mod",
		"core/core.go",
		"core/testdata/mod/go.mod",
		"core/testdata/mod/x.go",
		"core/sluiceprom/go.mod",
		"core/sluiceprom/prom.go",
		"ginlimit/go.mod",
		"ginlimit/gin.go",
		"ginlimit/vendor/modules.txt",
		"grpclimit/LICENSE",
		"grpclimit/go.mod",
	}
	tests := []struct {
		name, dir string
		want      map[string]string
	}{
		{"root", ".", map[string]string{"LICENSE": "LICENSE", "go.mod": "go.mod", "core/core.go": "core/core.go"}},
		{"nested", "core/sluiceprom", map[string]string{"go.mod": "core/sluiceprom/go.mod", "prom.go": "core/sluiceprom/prom.go", "LICENSE": "LICENSE"}},
		{"vendor", "ginlimit", map[string]string{"go.mod": "ginlimit/go.mod", "gin.go": "ginlimit/gin.go", "LICENSE": "LICENSE"}},
		{"own license", "grpclimit", map[string]string{"go.mod": "grpclimit/go.mod", "LICENSE": "grpclimit/LICENSE"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := zipFiles(tt.dir, all); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("zipFiles(%q) = %v, want %v", tt.dir, got, tt.want)
			}
		})
	}
}

func TestCheckVersion(t *testing.T) {
	for _, tt := range []struct {
		v  string
		ok bool
	}{
		{"v0.1.0", true},
		{"v1.12.3", true},
		{"v0.2.0-rc.1", true},
		{"v0.0.0-00010101000000-000000000000", false},
		{"v0.0.0-20260101120000-0123456789ab", false},
		{"v0.1.1-0.20260101120000-0123456789ab", false},
		{"0.1.0", false},
		{"v0.1", false},
		{"v01.0.0", false},
	} {
		if err := checkVersion(tt.v); (err == nil) != tt.ok {
			t.Errorf("checkVersion(%q) = %v, want ok %v", tt.v, err, tt.ok)
		}
	}
}

func TestVersion(t *testing.T) {
	const root = "github.com/sluicehq/sluice"
	mods := func(gin, docs string, ginDeps ...require) []module {
		return []module{
			{Dir: ".", Path: root},
			{Dir: "ginlimit", Path: root + "/ginlimit", Own: []require{{root, gin}}, Require: append([]require{{root, gin}}, ginDeps...)},
			{Dir: "docs", Path: root + "/docs", Own: []require{{root, docs}}, Require: []require{{root, docs}, {"example.com/x", zeroPseudo}}},
		}
	}
	if v, err := version(mods("v0.1.0", "v0.1.0")); v != "v0.1.0" || err != nil {
		t.Errorf("version(lockstep) = %q, %v, want v0.1.0, nil", v, err)
	}
	for _, tt := range []struct {
		name string
		mods []module
		want []string
	}{
		{"zero", mods(zeroPseudo, "v0.1.0"), []string{"ginlimit/go.mod requires github.com/sluicehq/sluice: v0.0.0-00010101000000-000000000000 is the zero pseudo-version"}},
		{"two", mods("v0.1.0", "v0.2.0"), []string{"more than one version", "v0.1.0 (1 requirements", "v0.2.0 (1 requirements"}},
		{"published zero", mods("v0.1.0", "v0.1.0", require{"example.com/y", zeroPseudo}), []string{"ginlimit/go.mod requires example.com/y at the zero pseudo-version"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := version(tt.mods)
			if err == nil {
				t.Fatalf("version() = nil error, want one saying %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("version() = %v, want it to say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "docs/go.mod requires example.com/x") {
				t.Errorf("version() = %v, names an unpublished module's requirement", err)
			}
		})
	}
}

func TestWriteProxy(t *testing.T) {
	root := t.TempDir()
	for name, text := range map[string]string{
		"LICENSE":          "license",
		"go.mod":           "module example.com/Root\n",
		"a.go":             "package root\n",
		"sub/go.mod":       "module example.com/Root/sub\n",
		"sub/b.go":         "package sub\n",
		"bench/go.mod":     "module example.com/Root/bench\n",
		"bench/bench_test": "",
	} {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	all := []string{"LICENSE", "a.go", "bench/bench_test", "bench/go.mod", "go.mod", "sub/b.go", "sub/go.mod"}
	mods := []module{{Dir: ".", Path: "example.com/Root"}, {Dir: "bench", Path: "example.com/Root/bench"}, {Dir: "sub", Path: "example.com/Root/sub"}}
	dir := t.TempDir()
	wrote, err := writeProxy(dir, root, all, mods, "v0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	if len(wrote) != 2 {
		t.Errorf("writeProxy wrote %v, want the root and sub (bench is unpublished)", wrote)
	}
	for _, tt := range []struct {
		dir  string
		want []string
	}{
		{"example.com/!root", []string{"example.com/Root@v0.1.0/LICENSE", "example.com/Root@v0.1.0/a.go", "example.com/Root@v0.1.0/go.mod"}},
		{"example.com/!root/sub", []string{"example.com/Root/sub@v0.1.0/LICENSE", "example.com/Root/sub@v0.1.0/b.go", "example.com/Root/sub@v0.1.0/go.mod"}},
	} {
		vdir := filepath.Join(dir, filepath.FromSlash(tt.dir), "@v")
		for _, f := range []string{"list", "v0.1.0.info", "v0.1.0.mod"} {
			if _, err := os.Stat(filepath.Join(vdir, f)); err != nil {
				t.Error(err)
			}
		}
		zr, err := zip.OpenReader(filepath.Join(vdir, "v0.1.0.zip"))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, f := range zr.File {
			names = append(names, f.Name)
		}
		zr.Close()
		sort.Strings(names)
		if !reflect.DeepEqual(names, tt.want) {
			t.Errorf("%s zip holds %v, want %v", tt.dir, names, tt.want)
		}
	}
}

func TestReadmeProgram(t *testing.T) {
	readme := "# x\n\n```sh\ngo get x\n```\n\n```go\n" +
		"rdb := redis.NewClient(&redis.Options{Addr: \"localhost:6379\"})\n" +
		"lim, err := core.New(rdb)\n" +
		"if err != nil {\n\tlog.Fatal(err)\n}\n" +
		"r := gin.New()\n" +
		"r.GET(\"/search\", ginlimit.New(lim, core.PerMinute(60), keyfunc.IP()), search)\n" +
		"```\n\n```go\nunrelated()\n```\n"
	prog, err := readmeProgram([]byte(readme))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"package main\n",
		`"github.com/gin-gonic/gin"`,
		`"github.com/sluicehq/sluice/ginlimit"`,
		`"log"`,
		"\tsearch gin.HandlerFunc\n",
		"\t_ = r\n",
	} {
		if !strings.Contains(prog, want) {
			t.Errorf("readmeProgram lacks %q:\n%s", want, prog)
		}
	}
	for _, unwanted := range []string{"rdb *redis.Client", "unrelated", `"net/http"`} {
		if strings.Contains(prog, unwanted) {
			t.Errorf("readmeProgram holds %q:\n%s", unwanted, prog)
		}
	}
	if _, err := parser.ParseFile(token.NewFileSet(), "main.go", prog, 0); err != nil {
		t.Errorf("readmeProgram is not Go: %v\n%s", err, prog)
	}

	whole := "```go\npackage main\n\nfunc main() {}\n```\n"
	if prog, err := readmeProgram([]byte(whole)); err != nil || prog != "package main\n\nfunc main() {}\n" {
		t.Errorf("readmeProgram(a whole file) = %q, %v, want the file", prog, err)
	}
}
