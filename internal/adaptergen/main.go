// Command adaptergen writes, for every adapter, the options it shares with
// the others: one documented function of the adapter's own per generic
// option of package policy (each exported WithX[C, H any] returning
// Option[C, H]), with the adapter's request type in place of C. The
// documentation is policy's, so the adapters never drift from it nor from
// each other, and go doc on an adapter shows every option in full.
//
// Run it after adding or changing an option in policy:
//
//	go generate ./policy
//
// It writes <adapter>/options_gen.go; the adapter's options.go keeps what
// is its own (Option, the deny and error handlers, Key, SetCost).
package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// adapter is one adapter package and its request type.
type adapter struct {
	dir        string   // relative to the repository root; also the package name
	native     string   // the type that stands for C, as the adapter spells it
	importPath string   // the package native comes from
	framework  string   // for the documentation
	skip       []string // policy options this adapter does not offer
}

var adapters = []adapter{
	{dir: "httplimit", native: "*http.Request", importPath: "net/http", framework: "net/http"},
	{dir: "ginlimit", native: "*gin.Context", importPath: "github.com/gin-gonic/gin", framework: "gin"},
	{dir: "echolimit", native: "echo.Context", importPath: "github.com/labstack/echo/v4", framework: "echo v4"},
	{dir: "echov5limit", native: "*echo.Context", importPath: "github.com/labstack/echo/v5", framework: "echo v5"},
	{dir: "fiberlimit", native: "*fiber.Ctx", importPath: "github.com/gofiber/fiber/v2", framework: "fiber v2"},
	{dir: "fiberv3limit", native: "fiber.Ctx", importPath: "github.com/gofiber/fiber/v3", framework: "fiber v3"},
	// A gRPC answer has no body, and no header to read a final cost from
	// before it is sent; grpclimit's WithChargeIf, a predicate on the
	// call's status code, is written by hand (grpclimit/options.go).
	{dir: "grpclimit", native: "context.Context", importPath: "context", framework: "gRPC",
		skip: []string{"WithProblemJSON", "WithChargeIf", "WithFinalCost"}},
}

const policyPath = "github.com/sluicehq/sluice/policy"

// option is one generic option of package policy.
type option struct {
	name    string
	doc     string
	params  *ast.FieldList
	imports map[string]string // the qualifiers its parameters use -> import path
}

func main() {
	root, err := findRoot()
	if err != nil {
		fail(err)
	}
	opts, exported, err := options(filepath.Join(root, "policy"))
	if err != nil {
		fail(err)
	}
	for _, a := range adapters {
		src, err := generate(a, opts, exported)
		if err != nil {
			fail(fmt.Errorf("%s: %v", a.dir, err))
		}
		if err := os.WriteFile(filepath.Join(root, a.dir, "options_gen.go"), src, 0o644); err != nil {
			fail(err)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "adaptergen:", err)
	os.Exit(1)
}

// findRoot returns the directory holding the root go.mod, from the
// current directory up.
func findRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(data, []byte("module github.com/sluicehq/sluice\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no github.com/sluicehq/sluice go.mod above the current directory")
		}
		dir = parent
	}
}

// options parses package policy in dir and returns its generic options,
// by name, and the names it declares at package level.
func options(dir string) ([]option, map[string]bool, error) {
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, nil, err
	}
	var opts []option
	exported := map[string]bool{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			return nil, nil, err
		}
		imports := map[string]string{}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			q := p[strings.LastIndex(p, "/")+1:]
			if imp.Name != nil {
				q = imp.Name.Name
			}
			imports[q] = p
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						exported[s.Name.Name] = s.Name.IsExported()
					case *ast.ValueSpec:
						for _, n := range s.Names {
							exported[n.Name] = n.IsExported()
						}
					}
				}
			case *ast.FuncDecl:
				if d.Recv != nil {
					continue
				}
				exported[d.Name.Name] = d.Name.IsExported()
				if o, ok := genericOption(d); ok {
					o.imports = map[string]string{}
					ast.Inspect(d.Type.Params, func(n ast.Node) bool {
						if sel, ok := n.(*ast.SelectorExpr); ok {
							if x, ok := sel.X.(*ast.Ident); ok {
								o.imports[x.Name] = imports[x.Name]
							}
						}
						return true
					})
					opts = append(opts, o)
				}
			}
		}
	}
	sort.Slice(opts, func(i, j int) bool { return opts[i].name < opts[j].name })
	return opts, exported, nil
}

// genericOption reports whether d is func WithX[C, H any](...) Option[C, H].
func genericOption(d *ast.FuncDecl) (option, bool) {
	if !d.Name.IsExported() || !strings.HasPrefix(d.Name.Name, "With") || d.Type.TypeParams == nil || d.Doc == nil {
		return option{}, false
	}
	tp := d.Type.TypeParams.List
	if len(tp) != 1 || len(tp[0].Names) != 2 || tp[0].Names[0].Name != "C" || tp[0].Names[1].Name != "H" {
		return option{}, false
	}
	res := d.Type.Results
	if res == nil || len(res.List) != 1 {
		return option{}, false
	}
	idx, ok := res.List[0].Type.(*ast.IndexListExpr)
	if !ok {
		return option{}, false
	}
	if id, ok := idx.X.(*ast.Ident); !ok || id.Name != "Option" {
		return option{}, false
	}
	return option{name: d.Name.Name, doc: d.Doc.Text(), params: d.Type.Params}, true
}

// docLink matches a doc link to an identifier of package policy, or to one
// of its methods or fields: [Name] or [Name.Member].
var docLink = regexp.MustCompile(`\[([A-Z][A-Za-z0-9_]*)((?:\.[A-Za-z0-9_]+)?)\]`)

// generate returns the source of a.dir/options_gen.go.
func generate(a adapter, opts []option, exported map[string]bool) ([]byte, error) {
	imports := map[string]bool{a.importPath: true, policyPath: true}
	var body bytes.Buffer
	for _, o := range opts {
		if contains(a.skip, o.name) {
			continue
		}
		for q, p := range o.imports {
			if p == "" {
				return nil, fmt.Errorf("%s: a parameter uses %s, which its file does not import", o.name, q)
			}
			imports[p] = true
		}
		params, args, err := signature(o.params, a.native, exported)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", o.name, err)
		}
		doc := docLink.ReplaceAllStringFunc(o.doc, func(m string) string {
			s := docLink.FindStringSubmatch(m)
			if s[1] == "Option" || !exported[s[1]] {
				return m
			}
			return "[policy." + s[1] + s[2] + "]"
		})
		doc = strings.TrimRight(doc, "\n") + fmt.Sprintf("\n\nThe same option as every adapter's: [policy.%s], for %s.", o.name, a.framework)
		for _, line := range strings.Split(doc, "\n") {
			switch {
			case line == "":
				body.WriteString("//\n")
			case strings.HasPrefix(line, "\t"):
				body.WriteString("//" + line + "\n")
			default:
				body.WriteString("// " + line + "\n")
			}
		}
		fmt.Fprintf(&body, "func %s(%s) Option {\n\treturn policy.%s[%s, Handlers](%s)\n}\n\n", o.name, params, o.name, a.native, args)
	}
	var src bytes.Buffer
	src.WriteString("// Code generated by internal/adaptergen from package policy's options; DO NOT EDIT.\n\n")
	fmt.Fprintf(&src, "package %s\n\nimport (\n", a.dir)
	var std, other []string // the standard library's first, as goimports groups them
	for p := range imports {
		if strings.Contains(strings.SplitN(p, "/", 2)[0], ".") {
			other = append(other, p)
		} else {
			std = append(std, p)
		}
	}
	sort.Strings(std)
	sort.Strings(other)
	for i, group := range [][]string{std, other} {
		if i > 0 && len(std) > 0 && len(other) > 0 {
			src.WriteString("\n")
		}
		for _, p := range group {
			fmt.Fprintf(&src, "\t%q\n", p)
		}
	}
	src.WriteString(")\n\n")
	src.Write(body.Bytes())
	out, err := format.Source(src.Bytes())
	if err != nil {
		return nil, fmt.Errorf("%v\n%s", err, src.Bytes())
	}
	return out, nil
}

// signature returns an option's parameters with the adapter's request type
// for C and policy's own types qualified, and the arguments that pass them
// on.
func signature(params *ast.FieldList, native string, exported map[string]bool) (string, string, error) {
	var ps, as []string
	for _, f := range params.List {
		typ, err := rewrite(f.Type, native, exported)
		if err != nil {
			return "", "", err
		}
		var names []string
		for _, n := range f.Names {
			names = append(names, n.Name)
			arg := n.Name
			if _, ok := f.Type.(*ast.Ellipsis); ok {
				arg += "..."
			}
			as = append(as, arg)
		}
		if len(names) == 0 {
			return "", "", fmt.Errorf("an unnamed parameter")
		}
		ps = append(ps, strings.Join(names, ", ")+" "+typ)
	}
	return strings.Join(ps, ", "), strings.Join(as, ", "), nil
}

// rewrite prints type expression e with native for C and policy's
// exported identifiers qualified. H must not appear: it is the adapter's
// own.
func rewrite(e ast.Expr, native string, exported map[string]bool) (string, error) {
	var bad error
	e = rewriteExpr(e, func(id *ast.Ident) ast.Expr {
		switch {
		case id.Name == "C":
			return ast.NewIdent(native)
		case id.Name == "H":
			bad = fmt.Errorf("a parameter's type uses H, the adapter's own settings")
		case exported[id.Name]:
			return &ast.SelectorExpr{X: ast.NewIdent("policy"), Sel: ast.NewIdent(id.Name)}
		case isPolicyName(id.Name, exported):
			bad = fmt.Errorf("a parameter's type uses policy's unexported %s", id.Name)
		}
		return id
	})
	if bad != nil {
		return "", bad
	}
	var b bytes.Buffer
	if err := printer.Fprint(&b, token.NewFileSet(), e); err != nil {
		return "", err
	}
	return b.String(), nil
}

func isPolicyName(name string, exported map[string]bool) bool {
	_, ok := exported[name]
	return ok
}

// rewriteExpr returns a copy of e, shallow where nothing changes, with
// each identifier that names a type (not a selector's field) replaced by
// f's result.
func rewriteExpr(e ast.Expr, f func(*ast.Ident) ast.Expr) ast.Expr {
	switch e := e.(type) {
	case *ast.Ident:
		return f(e)
	case *ast.SelectorExpr:
		return e // a qualified name: another package's
	case *ast.StarExpr:
		return &ast.StarExpr{X: rewriteExpr(e.X, f)}
	case *ast.ArrayType:
		return &ast.ArrayType{Len: e.Len, Elt: rewriteExpr(e.Elt, f)}
	case *ast.MapType:
		return &ast.MapType{Key: rewriteExpr(e.Key, f), Value: rewriteExpr(e.Value, f)}
	case *ast.ChanType:
		return &ast.ChanType{Dir: e.Dir, Value: rewriteExpr(e.Value, f)}
	case *ast.Ellipsis:
		return &ast.Ellipsis{Elt: rewriteExpr(e.Elt, f)}
	case *ast.FuncType:
		return &ast.FuncType{Params: rewriteFields(e.Params, f), Results: rewriteFields(e.Results, f)}
	case *ast.IndexExpr:
		return &ast.IndexExpr{X: rewriteExpr(e.X, f), Index: rewriteExpr(e.Index, f)}
	case *ast.IndexListExpr:
		var idx []ast.Expr
		for _, x := range e.Indices {
			idx = append(idx, rewriteExpr(x, f))
		}
		return &ast.IndexListExpr{X: rewriteExpr(e.X, f), Indices: idx}
	case *ast.ParenExpr:
		return &ast.ParenExpr{X: rewriteExpr(e.X, f)}
	}
	return e
}

func rewriteFields(fl *ast.FieldList, f func(*ast.Ident) ast.Expr) *ast.FieldList {
	if fl == nil {
		return nil
	}
	out := &ast.FieldList{}
	for _, fld := range fl.List {
		out.List = append(out.List, &ast.Field{Names: fld.Names, Type: rewriteExpr(fld.Type, f)})
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
