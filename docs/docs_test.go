// Package docs holds no code, only tests that keep the documentation honest:
// every Go snippet in README.md and docs/*.md compiles and passes go vet,
// every metric the docs, the Grafana dashboards and the Prometheus rule
// files name is one that sluiceprom exports (or, for the -otel files,
// that sluiceotel exports through the OpenTelemetry Prometheus exporter),
// with labels and label values it really uses, every OpenTelemetry
// instrument and attribute the docs name is one that sluiceotel records,
// and the defaults the docs state (breaker, budget, fallback sizing, dial
// advice, the middleware options) are the code's (defaults_test.go).
package docs

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/sluiceotel"
	"github.com/sluicehq/sluice/core/sluiceprom"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// docFiles returns README.md and every docs/*.md, as absolute paths.
func docFiles(t *testing.T) []string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	files := []string{filepath.Join(root, "README.md")}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(more)
	return append(files, more...)
}

// rel names a doc file relative to the repository root, for messages.
func rel(path string) string {
	root, _ := filepath.Abs("..")
	if r, err := filepath.Rel(root, path); err == nil {
		return r
	}
	return path
}

// ---------------------------------------------------------------------------
// Go snippets

// notCompiled, on the last non-blank line before a ```go fence, exempts the
// block. Keep it rare: a fragment that cannot compile is usually better
// written as one that can.
const notCompiled = "<!-- not compiled -->"

// snippet is one ```go block.
type snippet struct {
	file string // absolute path of the Markdown file
	line int    // line of the block's first code line
	code string
}

func (s snippet) String() string { return fmt.Sprintf("%s:%d", rel(s.file), s.line) }

// extractGo returns the ```go blocks of a Markdown file, except those
// marked notCompiled.
func extractGo(path string) ([]snippet, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []snippet
	var cur *snippet
	var indent string
	prev := "" // the last non-blank line outside code blocks
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 1<<16), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if cur != nil {
			if strings.HasPrefix(trimmed, "```") {
				out = append(out, *cur)
				cur = nil
				continue
			}
			cur.code += strings.TrimPrefix(line, indent) + "\n"
			continue
		}
		if strings.HasPrefix(trimmed, "```") {
			lang := strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))
			if lang == "go" && prev != notCompiled {
				indent = line[:len(line)-len(strings.TrimLeft(line, " \t"))]
				cur = &snippet{file: path, line: n + 1}
				prev = ""
				continue
			}
			// Another language: skip to its closing fence.
			for n++; sc.Scan(); n++ {
				if strings.HasPrefix(strings.TrimSpace(sc.Text()), "```") {
					break
				}
			}
			prev = ""
			continue
		}
		if trimmed != "" {
			prev = trimmed
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("%s: unclosed ```go block", cur)
	}
	return out, sc.Err()
}

// packages are the names a snippet may use without importing them.
var packages = map[string]string{
	"context":    "context",
	"errors":     "errors",
	"fmt":        "fmt",
	"io":         "io",
	"log":        "log",
	"slog":       "log/slog",
	"http":       "net/http",
	"httptest":   "net/http/httptest",
	"netip":      "net/netip",
	"os":         "os",
	"signal":     "os/signal",
	"strconv":    "strconv",
	"strings":    "strings",
	"sync":       "sync",
	"time":       "time",
	"json":       "encoding/json",
	"redis":      "github.com/redis/go-redis/v9",
	"core":       "github.com/sluicehq/sluice/core",
	"sluiceprom": "github.com/sluicehq/sluice/core/sluiceprom",
	"sluiceotel": "github.com/sluicehq/sluice/core/sluiceotel",
	"replay":     "github.com/sluicehq/sluice/core/replay",
	"keyfunc":    "github.com/sluicehq/sluice/keyfunc",
	"httplimit":  "github.com/sluicehq/sluice/httplimit",
	"ginlimit":   "github.com/sluicehq/sluice/ginlimit",
	"echolimit":  "github.com/sluicehq/sluice/echolimit",
	"fiberlimit": "github.com/sluicehq/sluice/fiberlimit",
	"grpclimit":  "github.com/sluicehq/sluice/grpclimit",
	"outbound":   "github.com/sluicehq/sluice/outbound",
	"grpcout":    "github.com/sluicehq/sluice/outbound/grpcout",
	"grpc":       "google.golang.org/grpc",
	"status":     "google.golang.org/grpc/status",
	"insecure":   "google.golang.org/grpc/credentials/insecure",
	"healthpb":   "google.golang.org/grpc/health/grpc_health_v1",
	"errdetails": "google.golang.org/genproto/googleapis/rpc/errdetails",
	"policy":     "github.com/sluicehq/sluice/policy",
	"overrides":  "github.com/sluicehq/sluice/overrides",
	"sluicepage": "github.com/sluicehq/sluice/sluicepage",
	"prometheus": "github.com/prometheus/client_golang/prometheus",
	"promhttp":   "github.com/prometheus/client_golang/prometheus/promhttp",
	"gin":        "github.com/gin-gonic/gin",
	"echo":       "github.com/labstack/echo/v4",
	"fiber":      "github.com/gofiber/fiber/v2",
	"miniredis":  "github.com/alicebob/miniredis/v2",
}

// env are the variables a snippet may use without declaring them, with their
// types. They stand for what surrounding code would have set up.
var env = map[string]string{
	"ctx":          "context.Context",
	"rdb":          "*redis.Client",
	"lim":          "*core.Limiter",
	"mux":          "*http.ServeMux",
	"obs":          "*sluiceprom.Collector",
	"logger":       "*slog.Logger",
	"addr":         "string",
	"tenantKey":    "any",
	"userKey":      "any",
	"userID":       "string",
	"authenticate": "func(http.Handler) http.Handler",
	"search":       "gin.HandlerFunc",
	"login":        "http.Handler",
	"complete":     "http.Handler",
	"api":          "http.Handler",
	"conn":         "*grpc.ClientConn",
}

// idents collects the identifiers a file declares and those it uses.
type idents struct {
	declared map[string]bool
	used     map[string]token.Pos
}

func collectIdents(f *ast.File) idents {
	id := idents{declared: map[string]bool{}, used: map[string]token.Pos{}}
	declare := func(names ...*ast.Ident) {
		for _, n := range names {
			id.declared[n.Name] = true
		}
	}
	fields := func(fl *ast.FieldList) {
		if fl == nil {
			return
		}
		for _, f := range fl.List {
			declare(f.Names...)
		}
	}
	skip := map[*ast.Ident]bool{} // identifiers that are not references
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.File:
			skip[n.Name] = true
		case *ast.AssignStmt:
			if n.Tok == token.DEFINE {
				for _, e := range n.Lhs {
					if i, ok := e.(*ast.Ident); ok {
						declare(i)
					}
				}
			}
		case *ast.RangeStmt:
			if n.Tok == token.DEFINE {
				for _, e := range []ast.Expr{n.Key, n.Value} {
					if i, ok := e.(*ast.Ident); ok {
						declare(i)
					}
				}
			}
		case *ast.ValueSpec:
			declare(n.Names...)
		case *ast.TypeSpec:
			declare(n.Name)
			fields(n.TypeParams)
		case *ast.FuncDecl:
			declare(n.Name)
			fields(n.Recv)
		case *ast.FuncType:
			fields(n.TypeParams)
			fields(n.Params)
			fields(n.Results)
		case *ast.StructType:
			for _, f := range n.Fields.List {
				for _, name := range f.Names {
					skip[name] = true
				}
			}
		case *ast.InterfaceType:
			for _, f := range n.Methods.List {
				for _, name := range f.Names {
					skip[name] = true
				}
			}
		case *ast.SelectorExpr:
			skip[n.Sel] = true
		case *ast.KeyValueExpr:
			if i, ok := n.Key.(*ast.Ident); ok {
				skip[i] = true // a struct field name, most likely
			}
		case *ast.LabeledStmt:
			skip[n.Label] = true
		case *ast.BranchStmt:
			if n.Label != nil {
				skip[n.Label] = true
			}
		case *ast.ImportSpec:
			if n.Name != nil {
				declare(n.Name)
			}
		case *ast.Ident:
			if !skip[n] {
				if _, seen := id.used[n.Name]; !seen {
					id.used[n.Name] = n.Pos()
				}
			}
		}
		return true
	})
	return id
}

// generated is one snippet turned into a package of the scratch module.
type generated struct {
	dir string
	src string
}

// generate turns snippet s into Go source for package directory dir.
// Snippets that are whole files are kept as they are. Declarations get a
// package clause and imports. Statements become the body of a function
// returning error, with imports for the packages they use, variables from
// env for the names they use without declaring, and uses of their top-level
// variables so that a snippet may declare what it only shows.
func generate(s snippet, dir string) (generated, error) {
	fset := token.NewFileSet()
	directive := fmt.Sprintf("//line %s:%d\n", s.file, s.line)
	if _, err := parser.ParseFile(fset, "", s.code, parser.PackageClauseOnly); err == nil {
		return generated{dir: dir, src: directive + s.code}, nil
	}

	declSrc := "package p\n" + s.code
	if f, err := parser.ParseFile(fset, "", declSrc, parser.ParseComments); err == nil {
		pkg := dir
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == "main" && fd.Recv == nil {
				pkg = "main"
			}
		}
		head, err := header(s, pkg, collectIdents(f), fset, 1)
		if err != nil {
			return generated{}, err
		}
		return generated{dir: dir, src: head + directive + s.code}, nil
	}

	const pre = "package p\nfunc _() error {\n"
	f, err := parser.ParseFile(fset, "", pre+s.code+"\n}\n", parser.ParseComments)
	if err != nil {
		return generated{}, fmt.Errorf("%s: neither a Go file, declarations nor statements: %v", s, err)
	}
	head, err := header(s, dir, collectIdents(f), fset, 2)
	if err != nil {
		return generated{}, err
	}
	body := f.Decls[0].(*ast.FuncDecl).Body.List
	var uses []string
	for _, st := range body {
		var names []*ast.Ident
		switch st := st.(type) {
		case *ast.AssignStmt:
			if st.Tok == token.DEFINE {
				for _, e := range st.Lhs {
					if i, ok := e.(*ast.Ident); ok {
						names = append(names, i)
					}
				}
			}
		case *ast.DeclStmt:
			if gd, ok := st.Decl.(*ast.GenDecl); ok && gd.Tok == token.VAR {
				for _, sp := range gd.Specs {
					names = append(names, sp.(*ast.ValueSpec).Names...)
				}
			}
		}
		for _, n := range names {
			if n.Name != "_" && !contains(uses, n.Name) {
				uses = append(uses, n.Name)
			}
		}
	}
	lines := strings.Split(strings.TrimSuffix(s.code, "\n"), "\n")
	var use string
	for _, n := range uses {
		use += "_ = " + n + "\n"
	}
	var b strings.Builder
	b.WriteString(head)
	b.WriteString("func snippet() error {\n")
	b.WriteString(directive)
	last := body[len(body)-1:]
	if len(last) == 1 {
		if _, ok := last[0].(*ast.ReturnStmt); ok {
			// Uses go before the final return, which keeps its line.
			at := fset.Position(last[0].Pos()).Line - 2 // lines of pre
			b.WriteString(strings.Join(lines[:at-1], "\n") + "\n")
			b.WriteString(use)
			fmt.Fprintf(&b, "//line %s:%d\n", s.file, s.line+at-1)
			b.WriteString(strings.Join(lines[at-1:], "\n") + "\n}\n")
			return generated{dir: dir, src: b.String()}, nil
		}
	}
	b.WriteString(strings.Join(lines, "\n") + "\n")
	b.WriteString(use)
	b.WriteString("return nil\n}\n")
	return generated{dir: dir, src: b.String()}, nil
}

// header returns the package clause, imports and env variables for a
// snippet whose identifiers are ids, parsed with pre lines of wrapping
// before the snippet's first line.
func header(s snippet, pkg string, ids idents, fset *token.FileSet, pre int) (string, error) {
	imports := map[string]string{} // path -> name
	var vars []string
	var unknown []string
	names := make([]string, 0, len(ids.used))
	for n := range ids.used {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		switch {
		case ids.declared[n] || n == "_":
		case packages[n] != "":
			imports[packages[n]] = n
		case env[n] != "":
			vars = append(vars, fmt.Sprintf("\t%s %s\n", n, env[n]))
			for _, w := range regexp.MustCompile(`[a-z]+\.`).FindAllString(env[n], -1) {
				name := strings.TrimSuffix(w, ".")
				imports[packages[name]] = name
			}
		case types.Universe.Lookup(n) != nil:
		default:
			line := s.line + fset.Position(ids.used[n]).Line - pre - 1
			unknown = append(unknown, fmt.Sprintf("%q (line %d)", n, line))
		}
	}
	if len(unknown) > 0 {
		return "", fmt.Errorf("%s: the snippet uses %s, which it neither declares nor imports; declare it, add it to env in docs/docs_test.go, or put %s before the block",
			s, strings.Join(unknown, ", "), notCompiled)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "package %s\n\n", pkg)
	paths := make([]string, 0, len(imports))
	for p := range imports {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		fmt.Fprintf(&b, "import %s %q\n", imports[p], p) // named: a package's name may differ from its path's end
	}
	if len(vars) > 0 {
		b.WriteString("\nvar (\n" + strings.Join(vars, "") + ")\n")
	}
	b.WriteString("\n")
	return b.String(), nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// scratchModule writes a module that requires this repository's modules
// (replaced by their working trees) at the versions this module pins, and
// returns its directory.
func scratchModule(t *testing.T) string {
	t.Helper()
	gomod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	gosum, err := os.ReadFile("go.sum")
	if err != nil {
		t.Fatal(err)
	}
	var mod strings.Builder
	mod.WriteString("module sluicedocs\n\n")
	if m := regexp.MustCompile(`(?m)^go \S+$`).Find(gomod); m != nil {
		mod.Write(m)
		mod.WriteString("\n\n")
	}
	mod.WriteString(localReplaces(t))
	for _, m := range regexp.MustCompile(`(?ms)^require \(.*?^\)|^require [^(\n].*$`).FindAll(gomod, -1) {
		mod.Write(m)
		mod.WriteString("\n")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), gosum, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// localReplaces returns a replace block pointing every module of this
// repository that a user imports at its working tree: the modules this
// module's go.mod replaces.
func localReplaces(t *testing.T) string {
	t.Helper()
	gomod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("replace (\n")
	for _, m := range regexp.MustCompile(`(?m)^\s*(github\.com/sluicehq/sluice\S*) => (\S+)$`).FindAllSubmatch(gomod, -1) {
		dir, err := filepath.Abs(string(m[2]))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "\t%s => %s\n", m[1], dir)
	}
	b.WriteString(")\n\n")
	return b.String()
}

// goCmd runs the go command in dir, in module mode, outside any workspace.
func goCmd(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS="+os.Getenv("GOFLAGS")+" -mod=mod")
	return cmd.CombinedOutput()
}

// TestGoSnippets type-checks and vets every ```go block of README.md and
// docs/*.md, all in one scratch module so that the build cache is shared.
// Errors name the Markdown file and line.
func TestGoSnippets(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
	var snippets []snippet
	for _, f := range docFiles(t) {
		s, err := extractGo(f)
		if err != nil {
			t.Fatal(err)
		}
		snippets = append(snippets, s...)
	}
	if len(snippets) == 0 {
		t.Fatal("no ```go blocks found; is the test reading the right files?")
	}
	mod := scratchModule(t)
	for i, s := range snippets {
		dir := fmt.Sprintf("snippet%02d", i)
		g, err := generate(s, dir)
		if err != nil {
			t.Error(err)
			continue
		}
		if err := os.MkdirAll(filepath.Join(mod, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(mod, dir, "snippet.go"), []byte(g.src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if t.Failed() {
		return
	}
	// go vet type-checks every snippet against its imports' compiled
	// export data, so it reports every compile error, then vets. A go
	// build of the same packages found nothing more and cost about 2 s of
	// CPU per snippet (over 60 s in all, minutes beside CPU hogs).
	// -mod=readonly: a snippet may import only what this module requires,
	// at the versions the repository tests (snippetdeps_test.go), never
	// whatever version the proxy serves that day.
	start := time.Now()
	if out, err := goCmd(mod, "vet", "-mod=readonly", "./..."); err != nil {
		t.Fatalf("go vet on %d snippets: %v\n%s", len(snippets), err, out)
	}
	t.Logf("%d snippets type-checked and vetted in %v", len(snippets), time.Since(start).Round(time.Millisecond))
}

// TestGenerate pins down how snippets are wrapped.
func TestGenerate(t *testing.T) {
	s := snippet{file: "/x/README.md", line: 10, code: "lim, err := core.New(rdb)\nif err != nil {\n\treturn err\n}\nres, err := lim.Allow(ctx, \"k\", core.PerSecond(1))\n"}
	g, err := generate(s, "snippet00")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"package snippet00\n",
		`import core "github.com/sluicehq/sluice/core"`,
		`import redis "github.com/redis/go-redis/v9"`,
		"\tctx context.Context\n",
		"\trdb *redis.Client\n",
		"//line /x/README.md:10\nlim, err := core.New(rdb)\n",
		"_ = lim\n_ = err\n_ = res\nreturn nil\n}\n",
	} {
		if !strings.Contains(g.src, want) {
			t.Errorf("generated source lacks %q:\n%s", want, g.src)
		}
	}
	if strings.Contains(g.src, "\tlim ") {
		t.Errorf("declared variable lim also declared from env:\n%s", g.src)
	}

	_, err = generate(snippet{file: "/x/a.md", line: 3, code: "x := mystery()\n_ = x\n"}, "snippet01")
	if err == nil || !strings.Contains(err.Error(), `"mystery" (line 3)`) {
		t.Errorf("generate with an unknown name = %v, want an error naming it and its line", err)
	}
}

// ---------------------------------------------------------------------------
// Metrics

// family is what the registry says of one metric family.
type family struct {
	typ    string              // "COUNTER", "GAUGE", "HISTOGRAM", ...
	labels map[string][]string // label name -> values seen
}

// observeAll tells obs one thing of every kind, so that every labelled
// series (every attribute set) exists.
func observeAll(obs core.Observer) {
	for _, limit := range []core.Limit{core.PerMinute(60).WithName("api"), core.PerMinute(60)} {
		for _, src := range []core.Source{core.SourceStore, core.SourceDenyCache, core.SourceFallback, core.SourceFailOpen, core.SourceFailClosed, core.SourceDenyList, core.SourceLease} {
			for _, dry := range []bool{false, true} {
				obs.ObserveDecision(core.Result{Allowed: true, Limit: limit, DryRun: dry}, src)
				obs.ObserveDecision(core.Result{Allowed: true, Wait: 50 * time.Millisecond, Limit: limit, DryRun: dry}, src)
				obs.ObserveDecision(core.Result{Limit: limit, DryRun: dry}, src)
				obs.ObserveDecision(core.Result{Limit: limit, Locked: true, DryRun: dry}, src)
			}
		}
	}
	obs.ObserveStore(core.StoreCall{Node: "redis:6379", Op: core.OpDecide, Latency: time.Millisecond})
	obs.ObserveStore(core.StoreCall{Node: "redis:6379", Op: core.OpDecide, Latency: 50 * time.Millisecond, Err: errors.New("down")})
	if co, ok := obs.(core.ConcurrencyObserver); ok {
		cap := core.ConcurrencyLimit{Name: "uploads", Max: 10}
		co.ObserveAcquire(cap, true, core.SourceStore)
		co.ObserveAcquire(cap, false, core.SourceStore)
		co.ObserveRelease(cap)
	}
	if lo, ok := obs.(core.LeaseObserver); ok {
		for _, limit := range []core.Limit{core.PerMinute(60).WithName("api"), core.PerMinute(60)} {
			lo.ObserveTokenLease(limit, core.LeaseEvent{Taken: 10, Spent: 4, Returned: 3, Lost: 1})
		}
	}
	if to, ok := obs.(core.ThresholdObserver); ok {
		for _, limit := range []core.Limit{core.PerMinute(60).WithName("api"), core.PerMinute(60)} {
			to.ObserveThreshold(limit)
		}
	}
	obs.ObserveDegraded(core.StoreOutage{Node: "redis:6379", Start: time.Now(), Err: errors.New("down")})
	obs.ObserveRecovered(core.StoreOutage{Node: "redis:6379", Duration: time.Second})
	// Shadow limits' decisions come in results only a limiter makes.
	lim, err := core.NewMemory(core.WithObserver(obs))
	if err != nil {
		panic(err)
	}
	defer lim.Close()
	r, err := lim.Prepare(core.PerMinute(60).WithName("api"))
	if err == nil {
		r, err = r.WithShadowLimits(core.PerMinute(1).WithName("api-lower"), core.PerMinute(1))
	}
	if err != nil {
		panic(err)
	}
	for range 2 { // the second would be denied
		if _, err := r.Allow(context.Background(), "k"); err != nil {
			panic(err)
		}
	}
}

// exported returns the metric families a sluiceprom.Collector exports,
// after one observation of every kind.
func exported(t *testing.T) map[string]family {
	t.Helper()
	reg := prometheus.NewRegistry()
	obs, err := sluiceprom.New(sluiceprom.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	observeAll(obs)
	if _, err := sluiceprom.NewTop(topLimiter(t), sluiceprom.WithRegisterer(reg)); err != nil {
		t.Fatal(err)
	}
	return gather(t, reg, "sluiceprom")
}

// topLimiter returns a limiter keeping top talkers, with an admission and
// a denial counted under a named limit, so that every top-talkers series
// exists.
func topLimiter(t *testing.T) *core.Limiter {
	t.Helper()
	lim, err := core.NewMemory(core.WithTopTalkers(core.TopTalkers{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	for range 2 {
		lim.Allow(context.Background(), "tenant:acme", core.PerHour(1).WithName("api"))
	}
	return lim
}

// gather returns the metric families reg holds, with the label values each
// carries; who names the exporter in messages.
func gather(t *testing.T, reg *prometheus.Registry, who string) map[string]family {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]family{}
	for _, mf := range mfs {
		f := family{typ: mf.GetType().String(), labels: map[string][]string{}}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if !contains(f.labels[lp.GetName()], lp.GetValue()) {
					f.labels[lp.GetName()] = append(f.labels[lp.GetName()], lp.GetValue())
				}
			}
		}
		out[mf.GetName()] = f
	}
	if len(out) < 6 {
		t.Fatalf("%s registered %d families, want at least 6: %v", who, len(out), out)
	}
	return out
}

// instruments returns the names of the instruments a sluiceotel.Observer
// records, and the attribute keys each carries, after one observation of
// every kind, read back through a manual reader.
func instruments(t *testing.T) map[string][]string {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	obs, err := sluiceotel.New(sluiceotel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	observeAll(obs)
	if _, err := sluiceotel.RegisterTop(topLimiter(t), sluiceotel.WithMeterProvider(mp)); err != nil {
		t.Fatal(err)
	}
	obs.ObserveDegraded(core.StoreOutage{Node: "redis:6379", Start: time.Now(), Err: errors.New("down")})
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			var sets []attribute.Set
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					sets = append(sets, p.Attributes)
				}
			case metricdata.Sum[float64]:
				for _, p := range d.DataPoints {
					sets = append(sets, p.Attributes)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					sets = append(sets, p.Attributes)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					sets = append(sets, p.Attributes)
				}
			default:
				t.Fatalf("%s: unexpected data %T; teach instruments about it", m.Name, m.Data)
			}
			keys := []string{}
			for _, set := range sets {
				for _, kv := range set.ToSlice() {
					if !contains(keys, string(kv.Key)) {
						keys = append(keys, string(kv.Key))
					}
				}
			}
			out[m.Name] = keys
		}
	}
	if len(out) < 5 {
		t.Fatalf("sluiceotel recorded %d instruments, want at least 5: %v", len(out), out)
	}
	return out
}

// otelNameRE matches dotted sluice names: instruments and attribute keys.
var otelNameRE = regexp.MustCompile(`\bsluice\.[a-z_]+(?:\.[a-z_]+)+`)

// TestDocInstruments checks every dotted sluice name in README.md and
// docs/*.md against the instruments and attribute keys sluiceotel records,
// and that docs/production.md documents every instrument and every
// attribute key.
func TestDocInstruments(t *testing.T) {
	t.Parallel()
	ins := instruments(t)
	known := map[string]bool{}
	for name, keys := range ins {
		known[name] = true
		for _, k := range keys {
			known[k] = true
		}
	}
	for _, f := range docFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			for _, name := range otelNameRE.FindAllString(line, -1) {
				if !known[name] {
					t.Errorf("%s:%d: %s is neither an instrument sluiceotel records nor one of its attributes", rel(f), i+1, name)
				}
			}
		}
		if filepath.Base(f) == "production.md" {
			for name := range known {
				if !strings.Contains(string(data), "`"+name+"`") {
					t.Errorf("%s does not document %s", rel(f), name)
				}
			}
		}
	}
}

var (
	metricRE   = regexp.MustCompile(`\bsluice_[a-z0-9_]+`)
	selectorRE = regexp.MustCompile(`\b(sluice_[a-z0-9_]+)\s*\{([^}]*)\}`)
	matcherRE  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"`)
	byRE       = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	wordRE     = regexp.MustCompile(`^[a-z_]+$`)
)

// metricNames returns the sluice metric names in q. Names next to a colon
// belong to recording rules (job:sluice_denial_ratio:rate10m), which no
// exporter produces.
func metricNames(q string) []string {
	var out []string
	for _, loc := range metricRE.FindAllStringIndex(q, -1) {
		if loc[0] > 0 && q[loc[0]-1] == ':' || loc[1] < len(q) && q[loc[1]] == ':' {
			continue
		}
		out = append(out, q[loc[0]:loc[1]])
	}
	return out
}

// isLabel reports whether name is a label of one of fams: sluiceotel's
// attributes become labels that start with sluice_, as metric names do.
func isLabel(name string, fams map[string]family) bool {
	for _, f := range fams {
		if _, ok := f.labels[name]; ok {
			return true
		}
	}
	return false
}

// targetLabels are added by Prometheus to every series it scrapes.
var targetLabels = []string{"job", "instance"}

// resolve maps a series name to its family: a histogram's _bucket, _sum and
// _count series belong to the histogram.
func resolve(name string, fams map[string]family) (string, bool) {
	if _, ok := fams[name]; ok {
		return name, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base := strings.TrimSuffix(name, suffix)
		if f, ok := fams[base]; ok && base != name && (f.typ == "HISTOGRAM" || f.typ == "SUMMARY" && suffix != "_bucket") {
			return base, true
		}
	}
	return "", false
}

// checkQuery reports metric names, label names and label values in a
// PromQL expression (or in Markdown text holding several) that sluiceprom
// does not export. withBy also checks "by (...)" label lists.
func checkQuery(where, q string, fams map[string]family, withBy bool) []string {
	var problems []string
	used := map[string]bool{}
	for _, name := range metricNames(q) {
		base, ok := resolve(name, fams)
		if !ok {
			if !isLabel(name, fams) {
				problems = append(problems, fmt.Sprintf("%s: %s is not a metric the observer exports", where, name))
			}
			continue
		}
		used[base] = true
	}
	for _, m := range selectorRE.FindAllStringSubmatch(q, -1) {
		base, ok := resolve(m[1], fams)
		if !ok {
			continue
		}
		f := fams[base]
		for _, mm := range matcherRE.FindAllStringSubmatch(m[2], -1) {
			label, op, value := mm[1], mm[2], mm[3]
			if contains(targetLabels, label) || label == "le" && strings.HasSuffix(m[1], "_bucket") {
				continue
			}
			values, ok := f.labels[label]
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: %s has no label %q", where, m[1], label))
				continue
			}
			if label == "limit" || strings.Contains(value, "$") {
				continue // user-chosen names and dashboard variables
			}
			alts := []string{value}
			if op == "=~" || op == "!~" {
				alts = strings.Split(value, "|")
			}
			for _, a := range alts {
				if a == "" {
					continue // the label absent: sluiceotel's error.type on a call that succeeded
				}
				if (op == "=" || op == "!=" || wordRE.MatchString(a)) && !contains(values, a) {
					problems = append(problems, fmt.Sprintf("%s: %s{%s} never has the value %q (values: %s)", where, m[1], label, a, strings.Join(values, ", ")))
				}
			}
		}
	}
	if withBy {
		allowed := append([]string{"le"}, targetLabels...)
		for base := range used {
			for l := range fams[base].labels {
				allowed = append(allowed, l)
			}
		}
		for _, m := range byRE.FindAllStringSubmatch(q, -1) {
			for _, l := range strings.Split(m[1], ",") {
				if l = strings.TrimSpace(l); l != "" && !contains(allowed, l) {
					problems = append(problems, fmt.Sprintf("%s: grouping by %q, a label none of its metrics has", where, l))
				}
			}
		}
	}
	return problems
}

// dashboards are the Grafana dashboards in docs/, each with the metric
// families its queries must name: one per observer package.
var dashboards = []struct {
	file     string
	families func(*testing.T) map[string]family
}{
	{"grafana-dashboard.json", exported},
	{"grafana-dashboard-otel.json", otelExported},
}

// dashboard reads a dashboard file in docs/.
func dashboard(t *testing.T, file string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return d
}

// queries returns every PromQL expression in a dashboard: panel targets'
// expr and templating queries, keyed by where they are.
func queries(v any, where string, out map[string]string) {
	switch v := v.(type) {
	case map[string]any:
		if title, ok := v["title"].(string); ok {
			where += " / " + title
		} else if name, ok := v["name"].(string); ok {
			where += " / " + name
		}
		for k, x := range v {
			switch s := x.(type) {
			case string:
				if k == "expr" || k == "query" || k == "definition" {
					out[where+" ("+k+")"] += s + "\n"
				}
			default:
				queries(x, where, out)
			}
		}
	case []any:
		for i, x := range v {
			queries(x, fmt.Sprintf("%s[%d]", where, i), out)
		}
	}
}

// TestDashboardMetrics checks that every query of each Grafana dashboard
// names metrics, labels and label values that its observer exports
// (sluiceprom, or sluiceotel through the OpenTelemetry Prometheus
// exporter), and that it shows every family.
func TestDashboardMetrics(t *testing.T) {
	t.Parallel()
	for _, db := range dashboards {
		t.Run(db.file, func(t *testing.T) {
			checkDashboardMetrics(t, db.file, db.families(t))
		})
	}
}

func checkDashboardMetrics(t *testing.T, file string, fams map[string]family) {
	t.Helper()
	qs := map[string]string{}
	queries(dashboard(t, file), file, qs)
	n := 0
	covered := map[string]bool{}
	for where, q := range qs {
		if !strings.Contains(q, "sluice_") {
			continue
		}
		n++
		for _, p := range checkQuery(where, q, fams, true) {
			t.Error(p)
		}
		for _, name := range metricNames(q) {
			if base, ok := resolve(name, fams); ok {
				covered[base] = true
			}
		}
	}
	if n < 10 {
		t.Errorf("the dashboard has %d queries on sluice metrics, want at least 10", n)
	}
	for name := range fams {
		if !covered[name] {
			t.Errorf("the dashboard never shows %s", name)
		}
	}
}

// TestDashboardShape checks what Grafana needs to import each dashboard
// anywhere: a Prometheus datasource variable that every panel uses, unique
// panel ids and a layout; and that the dashboards' uids differ, so that
// both can be imported.
func TestDashboardShape(t *testing.T) {
	t.Parallel()
	uids := map[string]string{}
	for _, db := range dashboards {
		t.Run(db.file, func(t *testing.T) {
			d := dashboard(t, db.file)
			if uid, _ := d["uid"].(string); uids[uid] != "" {
				t.Errorf("uid %q is also %s's", uid, uids[uid])
			} else {
				uids[uid] = db.file
			}
			checkDashboardShape(t, d)
		})
	}
}

func checkDashboardShape(t *testing.T, d map[string]any) {
	t.Helper()
	if v, _ := d["schemaVersion"].(float64); v < 36 {
		t.Errorf("schemaVersion = %v, want 36 or later", d["schemaVersion"])
	}
	if uid, _ := d["uid"].(string); uid == "" {
		t.Error("the dashboard has no uid")
	}
	hasDS := false
	templ, _ := d["templating"].(map[string]any)
	list, _ := templ["list"].([]any)
	for _, v := range list {
		v, _ := v.(map[string]any)
		if v["type"] == "datasource" && v["query"] == "prometheus" && v["name"] == "datasource" {
			hasDS = true
		}
	}
	if !hasDS {
		t.Error(`templating lacks a datasource variable named "datasource" of type prometheus`)
	}
	panels, _ := d["panels"].([]any)
	ids := map[float64]bool{}
	for i, p := range panels {
		p, _ := p.(map[string]any)
		title, _ := p["title"].(string)
		id, _ := p["id"].(float64)
		if ids[id] {
			t.Errorf("panel %d (%s): duplicate id %v", i, title, id)
		}
		ids[id] = true
		if _, ok := p["gridPos"].(map[string]any); !ok {
			t.Errorf("panel %d (%s): no gridPos", i, title)
		}
		if p["type"] == "row" {
			continue
		}
		ds, _ := p["datasource"].(map[string]any)
		if ds["uid"] != "${datasource}" {
			t.Errorf("panel %d (%s): datasource %v, want the ${datasource} variable", i, title, p["datasource"])
		}
		targets, _ := p["targets"].([]any)
		if len(targets) == 0 {
			t.Errorf("panel %d (%s): no queries", i, title)
		}
	}
}

// TestDocMetrics checks every metric named in README.md and docs/*.md
// (queries included), each line against sluiceprom's families or else
// against sluiceotel's as the OpenTelemetry Prometheus exporter names
// them, and that docs/production.md documents every family sluiceprom
// exports.
func TestDocMetrics(t *testing.T) {
	t.Parallel()
	fams, otel := exported(t), otelExported(t)
	for _, f := range docFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			where := fmt.Sprintf("%s:%d", rel(f), i+1)
			// A line names sluiceprom's metrics, or else sluiceotel's as
			// the OpenTelemetry Prometheus exporter names them.
			problems := checkQuery(where, line, fams, false)
			if len(problems) > 0 && len(checkQuery(where, line, otel, false)) == 0 {
				problems = nil
			}
			for _, p := range problems {
				t.Error(p)
			}
		}
		if filepath.Base(f) == "production.md" {
			for name := range fams {
				if !strings.Contains(string(data), name) {
					t.Errorf("%s does not document %s", rel(f), name)
				}
			}
		}
	}
}

// ---------------------------------------------------------------------------
// Links

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

// anchors returns the GitHub anchors of a Markdown file's headings.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	inCode := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inCode = !inCode
			continue
		}
		m := headingRE.FindStringSubmatch(line)
		if inCode || m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127 && unicode.IsLetter(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		for i := 1; out[a]; i++ {
			a = fmt.Sprintf("%s-%d", b.String(), i)
		}
		out[a] = true
	}
	return out
}

// TestDocLinks checks the relative links of README.md and docs/*.md: the
// anchors they name must be headings of the target. A link to a Markdown
// file that does not exist yet is only logged.
func TestDocLinks(t *testing.T) {
	t.Parallel()
	for _, f := range docFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		inCode := false
		for i, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inCode = !inCode
			}
			if inCode {
				continue
			}
			for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				where := fmt.Sprintf("%s:%d", rel(f), i+1)
				path, anchor, _ := strings.Cut(target, "#")
				file := f
				if path != "" {
					file = filepath.Join(filepath.Dir(f), filepath.FromSlash(path))
				}
				body, err := os.ReadFile(file)
				if errors.Is(err, os.ErrNotExist) && strings.HasSuffix(path, ".md") {
					t.Logf("%s: link to %s, which does not exist yet", where, path)
					continue
				}
				if err != nil {
					t.Errorf("%s: link to %s: %v", where, target, err)
					continue
				}
				if anchor != "" && strings.HasSuffix(file, ".md") && !anchors(string(body))[anchor] {
					t.Errorf("%s: link to %s: no heading with the anchor #%s", where, target, anchor)
				}
			}
		}
	}
}
