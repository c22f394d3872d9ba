package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The defaults the docs state are held to the code's values here. Each fact
// has one home, the page that tells it in full; other pages link there,
// and where they still state it, they must agree. A fact is read from the
// code itself: the engine's defaults from core's defaultOptions (core
// exports no accessor for them), its documented fallback sizing from
// WithFallbackReplicas's Default line, and the middleware options from
// package policy's option functions.

// unchecked are pages these checks skip, each with why; remove an entry
// once the page is brought in line.
var unchecked = map[string]string{}

// checkedDocs returns the doc files these checks read, by relative name,
// with their text.
func checkedDocs(t *testing.T) map[string]string {
	t.Helper()
	docs := map[string]string{}
	for _, f := range docFiles(t) {
		if _, skip := unchecked[rel(f)]; skip {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs[rel(f)] = string(b)
	}
	return docs
}

// coreDefaults reads the literal that core's defaultOptions returns: each
// field's expression, as source text.
func coreDefaults(t *testing.T) map[string]ast.Expr {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "core", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Name.Name != "defaultOptions" || fn.Body == nil {
				continue
			}
			for _, st := range fn.Body.List {
				ret, ok := st.(*ast.ReturnStmt)
				if !ok || len(ret.Results) != 1 {
					continue
				}
				lit, ok := ret.Results[0].(*ast.CompositeLit)
				if !ok {
					continue
				}
				fields := map[string]ast.Expr{}
				for _, e := range lit.Elts {
					if kv, ok := e.(*ast.KeyValueExpr); ok {
						if id, ok := kv.Key.(*ast.Ident); ok {
							fields[id.Name] = kv.Value
						}
					}
				}
				return fields
			}
		}
	}
	t.Fatal("core: no func defaultOptions returning an options literal; update this test to read the defaults where they now live (an exported accessor would be better)")
	return nil
}

// constValue evaluates an integer literal or a product of one and a
// time unit (100 * time.Millisecond) as an int64 (durations in ns).
func constValue(t *testing.T, e ast.Expr) int64 {
	t.Helper()
	switch e := e.(type) {
	case *ast.BasicLit:
		n, err := strconv.ParseInt(strings.ReplaceAll(e.Value, "_", ""), 0, 64)
		if err != nil {
			t.Fatalf("literal %s: %v", e.Value, err)
		}
		return n
	case *ast.SelectorExpr:
		units := map[string]time.Duration{"Nanosecond": time.Nanosecond, "Microsecond": time.Microsecond,
			"Millisecond": time.Millisecond, "Second": time.Second, "Minute": time.Minute, "Hour": time.Hour}
		if u, ok := units[e.Sel.Name]; ok {
			return int64(u)
		}
	case *ast.BinaryExpr:
		if e.Op == token.MUL {
			return constValue(t, e.X) * constValue(t, e.Y)
		}
	case *ast.ParenExpr:
		return constValue(t, e.X)
	}
	t.Fatalf("cannot evaluate %T in core's defaults", e)
	return 0
}

// field returns a field of a composite literal.
func field(t *testing.T, e ast.Expr, name string) ast.Expr {
	t.Helper()
	lit, ok := e.(*ast.CompositeLit)
	if ok {
		for _, el := range lit.Elts {
			if kv, ok := el.(*ast.KeyValueExpr); ok {
				if id, ok := kv.Key.(*ast.Ident); ok && id.Name == name {
					return kv.Value
				}
			}
		}
	}
	t.Fatalf("core's defaults: no field %s", name)
	return nil
}

// counts reads a count written as digits or as a word.
func count(s string) int {
	if n, err := strconv.Atoi(s); err == nil {
		return n
	}
	return slices.Index([]string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"}, strings.ToLower(s))
}

// section returns the text of the page's section under heading (up to the
// next heading of the same or a higher level).
func section(t *testing.T, page, heading string) string {
	t.Helper()
	i := strings.Index(page, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("no heading %q", heading)
	}
	rest := page[i+len(heading)+2:]
	level := strings.Count(strings.Fields(heading)[0], "#")
	for j := 0; j < len(rest); {
		k := strings.Index(rest[j:], "\n#")
		if k < 0 {
			break
		}
		j += k + 1
		h := strings.Fields(rest[j:])[0]
		if strings.Trim(h, "#") == "" && len(h) <= level {
			return rest[:j]
		}
		j++
	}
	return rest
}

// stated returns every match of re's first group in the checked docs, with
// where it is.
func stated(docs map[string]string, re *regexp.Regexp) map[string]string {
	got := map[string]string{}
	for name, text := range docs {
		for _, m := range re.FindAllStringSubmatchIndex(text, -1) {
			line := strings.Count(text[:m[0]], "\n") + 1
			got[name+":"+strconv.Itoa(line)] = text[m[2]:m[3]]
		}
	}
	return got
}

// TestDocDefaults: the defaults the docs state are the code's.
func TestDocDefaults(t *testing.T) {
	docs := checkedDocs(t)
	def := coreDefaults(t)
	breaker := def["breaker"]
	failures := constValue(t, field(t, breaker, "Failures"))
	probe := time.Duration(constValue(t, field(t, breaker, "Probe")))
	successes := constValue(t, field(t, breaker, "Successes"))
	budget := time.Duration(constValue(t, def["timeout"]))
	engine := section(t, docs["docs/engine.md"], "## When Redis is slow or gone")

	t.Run("breaker", func(t *testing.T) {
		// The home: engine.md, When Redis is slow or gone.
		for _, c := range []struct {
			re   string
			want int64
		}{
			{`After (\d+) consecutive failures it opens`, failures},
			{`At most every (\d+) ms, one real request probes`, probe.Milliseconds()},
			{`(\d+) good\s+probes in a row close the breaker`, successes},
		} {
			m := regexp.MustCompile(c.re).FindStringSubmatch(engine)
			if m == nil {
				t.Errorf("engine.md, When Redis is slow or gone: no %q", c.re)
				continue
			}
			if got := int64(count(m[1])); got != c.want {
				t.Errorf("engine.md states %q, the code %d", m[0], c.want)
			}
		}
		// Elsewhere, any count of probes that close it agrees, and none
		// says the first probe does.
		for where, n := range stated(docs, regexp.MustCompile(`(?i)(\w+) good\s+probes(?: in a row)?,? (?:\S+ apart\)?,? )?close`)) {
			if int64(count(n)) != successes {
				t.Errorf("%s: %s good probes close the breaker; the code: %d", where, n, successes)
			}
		}
		for where, n := range stated(docs, regexp.MustCompile(`(?i)closes? after (\w+) good\s+probes`)) {
			if int64(count(n)) != successes {
				t.Errorf("%s: the breaker closes after %s good probes; the code: %d", where, n, successes)
			}
		}
		for where, s := range stated(docs, regexp.MustCompile(`(?i)(first (?:successful |good )?(?:probe|success)[^.]{0,40}closes? the breaker)`)) {
			t.Errorf("%s: %q; the breaker closes after %d good probes", where, s, successes)
		}
	})

	t.Run("budget", func(t *testing.T) {
		// The home: engine.md's options table; production.md's checklist
		// repeats it.
		ms := strconv.FormatInt(budget.Milliseconds(), 10)
		home := regexp.MustCompile("\\| `core.WithTimeout\\(d\\)` \\| `(\\d+)ms` \\|").FindStringSubmatch(docs["docs/engine.md"])
		if home == nil {
			t.Fatal("engine.md: no core.WithTimeout row in the options table")
		}
		if home[1] != ms {
			t.Errorf("engine.md: WithTimeout's default %s ms; the code: %s", home[1], budget)
		}
		for where, n := range stated(docs, regexp.MustCompile(`budget\s+\((\d+)\s?ms(?:\s+by\s+default)?\)`)) {
			if n != ms {
				t.Errorf("%s: a budget of %s ms; the code's default: %s", where, n, budget)
			}
		}
	})

	t.Run("fallback sizing", func(t *testing.T) {
		// The code: WithFallbackReplicas's Default line says the implicit
		// fleet; the home, engine.md's Sizing the fallback, says so too,
		// and no page says a replica enforces the whole limit by default.
		src, err := os.ReadFile(filepath.Join("..", "core", "options.go"))
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`// Default: the fallback follows the implicit fleet`).Match(src) {
			t.Fatal("core/options.go: WithFallbackReplicas's Default line no longer says the implicit fleet; bring the docs and this test in line with the code")
		}
		home := section(t, docs["docs/engine.md"], "### Sizing the fallback")
		if !strings.Contains(home, "**Left at the default (the implicit fleet):**") {
			t.Error("engine.md, Sizing the fallback: the default is not the implicit fleet")
		}
		for where, s := range stated(docs, regexp.MustCompile(`(?i)(left at the default \(1\)|by default[^.]{0,60}(?:the whole|the full|every) limit (?:on|per) (?:every|each) replica)`)) {
			t.Errorf("%s: %q; by default each replica enforces 1/n, n the fleet it counts", where, s)
		}
		for where, s := range stated(docs, regexp.MustCompile(`(?i)(denied every time)`)) {
			t.Errorf("%s: %q; a cost above a replica's share takes the whole share during an outage (engine.md)", where, s)
		}
		for where, s := range stated(docs, regexp.MustCompile(`(?i)(there is no batching|breaker is one per limiter)`)) {
			t.Errorf("%s: %q; decisions are batched, and breakers kept, per node", where, s)
		}
	})

	t.Run("dial advice", func(t *testing.T) {
		// The home: production.md's table of client settings.
		m := regexp.MustCompile("\\| `DialTimeout` \\| `(\\d+)ms` \\|").FindStringSubmatch(docs["docs/production.md"])
		if m == nil {
			t.Fatal("production.md: no DialTimeout row in the client table")
		}
		for where, v := range stated(docs, regexp.MustCompile(`DialTimeout:\s+(\d+) \* time\.Millisecond`)) {
			if v != m[1] {
				t.Errorf("%s: DialTimeout %s ms; production.md advises %s ms", where, v, m[1])
			}
		}
	})

	t.Run("hot-key speed-up", func(t *testing.T) {
		// The home: hotkeys.md, Measured; elsewhere a link, not a number.
		for where, v := range stated(docs, regexp.MustCompile(`(\d+)× the decisions/s of\s+sluice without\s+leases`)) {
			if !strings.HasPrefix(where, "docs/hotkeys.md:") {
				t.Errorf("%s: %s× the decisions/s: state it in docs/hotkeys.md#measured and link there", where, v)
			}
		}
	})
}

// TestDocOptions: docs/middleware.md's options table lists every option
// of package policy and the adapters' own handlers, and nothing else.
func TestDocOptions(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := filepath.Glob(filepath.Join("..", "policy", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	code := map[string]bool{"WithDenyHandler": true, "WithErrorHandler": true} // each adapter's own
	for _, name := range pkgs {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "With") || fn.Type.TypeParams == nil {
				continue
			}
			code[fn.Name.Name] = true
		}
	}
	b, err := os.ReadFile(filepath.Join("..", "docs", "middleware.md"))
	if err != nil {
		t.Fatal(err)
	}
	table := section(t, string(b), "## Options")
	doc := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(With\\w+)\\(").FindAllStringSubmatch(table, -1) {
		doc[m[1]] = true
	}
	for name := range code {
		if !doc[name] {
			t.Errorf("docs/middleware.md's options table lacks %s", name)
		}
	}
	for name := range doc {
		if !code[name] {
			t.Errorf("docs/middleware.md's options table lists %s, which is no option", name)
		}
	}
}
