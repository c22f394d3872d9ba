package core

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// goRedis is the import path of the client library the store layer wraps.
const goRedis = "github.com/redis/go-redis/v9"

const (
	modulePath = "github.com/sluicehq/sluice/"
	modelPkg   = modulePath + "core/internal/model"
	storePkg   = modulePath + "core/internal/redisstore"
)

// TestLayers keeps the stack docs/architecture.md draws, which the
// compiler keeps too: package core/internal/model at the bottom, the
// Redis store (core/internal/redisstore) above it, the engine (core) on
// top. The store cannot import the engine (an import cycle); this test
// also holds that
//   - model imports nothing of sluice, nor go-redis;
//   - the store imports nothing of core but model and core's own helper
//     packages (batch, pause);
//   - in core, only redis.go imports go-redis or the store, where New
//     builds the store: go-redis is named only in New's signature, and
//     every other file reaches Redis through the store interface.
func TestLayers(t *testing.T) {
	imports := func(dir string) map[string][]string { // file -> imports
		t.Helper()
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files in %s (%v); is the test running in core's directory?", dir, err)
		}
		out := map[string][]string{}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				out[name] = append(out[name], p)
			}
		}
		return out
	}
	for name, ps := range imports("internal/model") {
		for _, p := range ps {
			if strings.HasPrefix(p, modulePath) || p == goRedis {
				t.Errorf("%s imports %s: the model is the bottom of the stack", name, p)
			}
		}
	}
	allowed := map[string]bool{modelPkg: true, modulePath + "core/internal/batch": true, modulePath + "core/internal/pause": true, modulePath + "internal/storeops": true}
	for name, ps := range imports("internal/redisstore") {
		for _, p := range ps {
			if strings.HasPrefix(p, modulePath) && !allowed[p] {
				t.Errorf("%s imports %s: the Redis store may use the model and core's helpers, nothing of the engine", name, p)
			}
		}
	}
	var engine int
	for name, ps := range imports(".") {
		engine++
		for _, p := range ps {
			if (p == goRedis || p == storePkg) && name != "redis.go" {
				t.Errorf("%s imports %s: in the engine only redis.go (New) may; the others ask through the store interface", name, p)
			}
		}
	}
	if engine < 10 {
		t.Fatalf("found %d engine files in core; is the test running in core's directory?", engine)
	}
	checkRedisNamedInNewOnly(t)
}

// checkRedisNamedInNewOnly holds redis.go to naming go-redis in New's
// signature alone.
func checkRedisNamedInNewOnly(t *testing.T) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "redis.go", nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	local := ""
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == goRedis {
			local = "redis"
			if imp.Name != nil {
				local = imp.Name.Name
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		if fd, ok := n.(*ast.FuncDecl); ok && fd.Recv == nil && fd.Name.Name == "New" {
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				checkNoRedis(t, fset, n, local)
				return true
			})
			return false
		}
		checkNoRedis(t, fset, n, local)
		return true
	})
}

// checkNoRedis fails t if n names the go-redis package imported as local.
func checkNoRedis(t *testing.T, fset *token.FileSet, n ast.Node, local string) {
	t.Helper()
	if sel, ok := n.(*ast.SelectorExpr); ok && local != "" {
		if id, ok := sel.X.(*ast.Ident); ok && id.Name == local {
			t.Errorf("%s: redis.go names %s.%s outside New's signature: only the store may", fset.Position(sel.Pos()), local, sel.Sel.Name)
		}
	}
}

// TestArchitectureNamesExist holds docs/architecture.md to the code: every
// file of core it names in code spans (foo.go, core/foo.lua,
// internal/batch) exists, and every unexported name it gives (a type, a
// function, a method as Type.method, a field) is declared in core or its
// internal packages. A renamed file or type then fails here, not in a
// reader's hands.
func TestArchitectureNamesExist(t *testing.T) {
	doc, err := os.ReadFile("../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	fset := token.NewFileSet()
	for _, dir := range []string{".", "internal/model", "internal/redisstore", "internal/batch", "internal/pause"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range files {
			f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.FuncDecl:
					declared[n.Name.Name] = true
					if n.Recv != nil && len(n.Recv.List) == 1 {
						recv := n.Recv.List[0].Type
						if st, ok := recv.(*ast.StarExpr); ok {
							recv = st.X
						}
						if ix, ok := recv.(*ast.IndexExpr); ok {
							recv = ix.X
						}
						if id, ok := recv.(*ast.Ident); ok {
							declared[id.Name+"."+n.Name.Name] = true
						}
					}
				case *ast.TypeSpec:
					declared[n.Name.Name] = true
				case *ast.ValueSpec:
					for _, id := range n.Names {
						declared[id.Name] = true
					}
				case *ast.Field:
					for _, id := range n.Names {
						declared[id.Name] = true
					}
				}
				return true
			})
		}
	}
	spans := regexp.MustCompile("`([^`\n]+)`").FindAllStringSubmatch(string(doc), -1)
	ident := regexp.MustCompile(`^\*?([a-z][A-Za-z0-9]*|[A-Z][A-Za-z0-9]*\.[a-z][A-Za-z0-9]*)$`)
	var files, names int
	for _, m := range spans {
		s := m[1]
		switch {
		case strings.Contains(s, " ") || strings.HasPrefix(s, ".") || strings.Contains(s, "*") && strings.ContainsAny(s, "./"):
			// a pattern (store_*.go, .lua) or code, not a name
		case strings.HasSuffix(s, ".go") || strings.HasSuffix(s, ".lua"):
			files++
			p := strings.TrimPrefix(s, "core/")
			if !strings.Contains(s, "/") && !inCoreDirs(p) {
				t.Errorf("docs/architecture.md names %s, which core and its internal packages do not have", s)
			} else if _, err := os.Stat(p); err != nil && strings.Contains(s, "/") {
				if _, err := os.Stat(filepath.Join("..", s)); err != nil {
					t.Errorf("docs/architecture.md names %s, which the repository does not have", s)
				}
			}
		case strings.HasPrefix(s, "internal/") || strings.HasPrefix(s, "core/internal/"):
			files++
			_, inCore := os.Stat(strings.TrimPrefix(s, "core/"))
			_, inRepo := os.Stat(filepath.Join("..", s))
			if inCore != nil && inRepo != nil {
				t.Errorf("docs/architecture.md names %s, which the repository does not have", s)
			}
		case ident.MatchString(s):
			name := strings.TrimPrefix(ident.FindStringSubmatch(s)[1], "*")
			last := name[strings.IndexByte(name, '.')+1:]
			if strings.ToLower(last[:1]) != last[:1] || strings.ToLower(name) == name && !strings.Contains(s, ".") {
				continue // exported names are go doc's to check; one lower-case word is a package or prose
			}
			names++
			if !declared[name] {
				t.Errorf("docs/architecture.md names %s, which core does not declare", s)
			}
		}
	}
	t.Logf("%d file names and %d unexported names checked", files, names)
	if files == 0 || names == 0 {
		t.Fatalf("found %d file names and %d unexported names in docs/architecture.md; is the test reading it?", files, names)
	}
}

// TestFunctionSize keeps every function of core and its internal packages
// (tests aside) readable at a glance: at most 70 lines and a cyclomatic
// number of at most 20 (1, plus one per if, for, non-default case, && and
// ||, as gocyclo counts).
func TestFunctionSize(t *testing.T) {
	const maxLines, maxCyclo = 70, 20
	fset := token.NewFileSet()
	var n int
	for _, dir := range []string{".", "internal/model", "internal/redisstore", "internal/batch", "internal/pause"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				n++
				lines := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
				cyclo := 1
				ast.Inspect(fd.Body, func(x ast.Node) bool {
					switch x := x.(type) {
					case *ast.IfStmt, *ast.ForStmt, *ast.RangeStmt:
						cyclo++
					case *ast.CaseClause:
						if x.List != nil {
							cyclo++
						}
					case *ast.CommClause:
						if x.Comm != nil {
							cyclo++
						}
					case *ast.BinaryExpr:
						if x.Op == token.LAND || x.Op == token.LOR {
							cyclo++
						}
					}
					return true
				})
				if lines > maxLines || cyclo > maxCyclo {
					t.Errorf("%s: %s has %d lines and a cyclomatic number of %d; at most %d and %d", fset.Position(fd.Pos()), fd.Name.Name, lines, cyclo, maxLines, maxCyclo)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no function found: is the test running in core's directory?")
	}
}

// inCoreDirs reports whether a file of that name is in core or in one of
// its internal packages of the stack (the Redis store, the model).
func inCoreDirs(name string) bool {
	for _, dir := range []string{".", "internal/redisstore", "internal/model"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}

// TestLimiterStaysSmall keeps the engine's Limiter to at most 16 fields: a
// concern that needs state of its own gets a type of its own (the local
// store, the fleet, the lease keeper), not more fields beside the others.
func TestLimiterStaysSmall(t *testing.T) {
	if n := reflect.TypeFor[Limiter]().NumField(); n > 16 {
		t.Errorf("Limiter has %d fields, at most 16: give the new concern a type of its own", n)
	}
}
