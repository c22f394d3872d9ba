package core

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// goRedis is the import path of the client library the store layer wraps.
const goRedis = "github.com/redis/go-redis/v9"

// TestOnlyTheStoreTalksToRedis keeps the layering docs/architecture.md
// draws: in core, only the store layer's files (store.go and store_*.go)
// import go-redis. The one exception is limiter.go, whose New takes the
// user's client and hands it to the store: there, go-redis may be named in
// New's signature and nowhere else. Every other file reaches Redis through
// the store's operations.
func TestOnlyTheStoreTalksToRedis(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var store, engine int
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
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
		if name == "store.go" || strings.HasPrefix(name, "store_") {
			store++
			continue
		}
		engine++
		if local == "" {
			continue
		}
		if name != "limiter.go" {
			t.Errorf("%s imports go-redis: only the store layer (store.go, store_*.go) may talk to Redis", name)
			continue
		}
		// limiter.go: go-redis named only in New's parameters.
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
	t.Logf("%d files of the store layer, %d of the engine", store, engine)
	if store == 0 || engine == 0 {
		t.Fatalf("found %d store files and %d engine files in core; is the test running in core's directory?", store, engine)
	}
}

// checkNoRedis fails t if n names the go-redis package imported as local.
func checkNoRedis(t *testing.T, fset *token.FileSet, n ast.Node, local string) {
	t.Helper()
	if sel, ok := n.(*ast.SelectorExpr); ok {
		if id, ok := sel.X.(*ast.Ident); ok && id.Name == local {
			t.Errorf("%s: limiter.go names %s.%s outside New's signature: only the store layer may", fset.Position(sel.Pos()), local, sel.Sel.Name)
		}
	}
}

// TestEngineAndStoreCallOneWay keeps the line between the engine and the
// Redis store, drawn by files until the store has a package of its own:
// calls go down, from the engine to the store, and come up only through
// what the engine handed the store when the limiter was built (storeUp).
// A file of the Redis store (store.go, store_*.go) never names the
// Limiter nor the engine's own types (its questions are the plain records
// of stores.go); a file of the engine never names the Redis store's
// types, except New, which builds it.
func TestEngineAndStoreCallOneWay(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	storeOnly := map[string]bool{"redisStore": true, "storeConfig": true, "storeUp": true, "serversSeen": true}
	// The engine's own types, which a store's question never carries.
	engineOnly := map[string]bool{"Concurrency": true, "Lease": true, "Reservation": true, "Rule": true, "PathRule": true,
		"hotKey": true, "hotLeases": true, "leaseKeeper": true, "fleet": true, "orphan": true, "pathDecision": true, "pathSettle": true}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		isStore := name == "store.go" || strings.HasPrefix(name, "store_")
		ast.Inspect(f, func(n ast.Node) bool {
			if fd, ok := n.(*ast.FuncDecl); ok && !isStore && name == "limiter.go" && fd.Recv == nil && fd.Name.Name == "New" {
				return false // New builds the store
			}
			if st, ok := n.(*ast.StarExpr); ok && !isStore {
				if id, ok := st.X.(*ast.Ident); ok && (id.Name == "node" || id.Name == "breaker") {
					t.Errorf("%s: the engine names the Redis store's %s: it may only ask through the store interface", fset.Position(id.Pos()), id.Name)
				}
			}
			id, ok := n.(*ast.Ident)
			if !ok {
				return true
			}
			switch {
			case isStore && id.Name == "Limiter":
				t.Errorf("%s: the Redis store names the Limiter: it may only call down, and tell the engine through storeUp", fset.Position(id.Pos()))
			case isStore && engineOnly[id.Name]:
				t.Errorf("%s: the Redis store names the engine's %s: it takes plain records (stores.go), not the engine's types", fset.Position(id.Pos()), id.Name)
			case !isStore && storeOnly[id.Name]:
				t.Errorf("%s: the engine names the Redis store's %s: it may only ask through the store interface", fset.Position(id.Pos()), id.Name)
			}
			return true
		})
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
	for _, dir := range []string{".", "internal/batch", "internal/pause"} {
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
			if _, err := os.Stat(p); err != nil && !strings.Contains(s, "/") {
				t.Errorf("docs/architecture.md names %s, which core does not have", s)
			} else if err != nil {
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
	for _, dir := range []string{".", "internal/batch", "internal/pause"} {
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
