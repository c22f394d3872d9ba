package policy

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// adapters are the packages built on this one, beside it in the
// repository.
var adapters = []string{"httplimit", "ginlimit", "echolimit", "fiberlimit", "echov5limit", "fiberv3limit", "grpclimit"}

// without are the shared options an adapter leaves out, and why: gRPC has
// no HTTP bodies for problem details, and no response header a final cost
// could be read from before it is sent. (gRPC's WithChargeIf, a predicate
// on the call's status code, is written by hand over WithChargeIf: the
// generator skips it, and this test counts it as shared.)
var without = map[string][]string{"grpclimit": {"WithProblemJSON", "WithFinalCost"}}

// ownOptions are the options an adapter defines itself: their function
// types involve the framework's response.
var ownOptions = []string{"WithDenyHandler", "WithErrorHandler"}

// TestAdaptersShareOptions fails when an adapter's options drift from this
// package's: each adapter must offer every shared option, as a function of
// its own (generated: see internal/adaptergen) that returns this package's
// generic function of the same name and whose documentation is that
// function's and names it, and no option of its own but the deny and error
// handlers. Every option must document its default with a Default line.
func TestAdaptersShareOptions(t *testing.T) {
	shared := sharedOptions(t)
	if len(shared) < 8 {
		t.Fatalf("found %d shared options in package policy: %v", len(shared), shared)
	}
	for _, name := range adapters {
		t.Run(name, func(t *testing.T) {
			pkg := parseDir(t, filepath.Join("..", name))
			var got, own []string
			funcs := pkg.Funcs
			for _, ty := range pkg.Types {
				funcs = append(funcs, ty.Funcs...)
			}
			for _, f := range funcs {
				if !strings.HasPrefix(f.Name, "With") {
					continue
				}
				if !strings.Contains(f.Doc, "\nDefault: ") {
					t.Errorf("%s.%s's doc comment has no Default line", name, f.Name)
				}
				if returned(f.Decl) != "policy."+f.Name+"[...]" {
					own = append(own, f.Name)
					continue
				}
				got = append(got, f.Name)
				if !strings.Contains(f.Doc, "[policy."+f.Name+"]") {
					t.Errorf("%s.%s's doc comment does not name [policy.%s]", name, f.Name, f.Name)
				}
			}
			for _, v := range pkg.Vars {
				for _, spec := range v.Decl.Specs {
					for _, id := range spec.(*ast.ValueSpec).Names {
						if strings.HasPrefix(id.Name, "With") {
							t.Errorf("%s.%s is a variable: options are functions (go generate ./policy)", name, id.Name)
						}
					}
				}
			}
			slices.Sort(got)
			slices.Sort(own)
			want := slices.DeleteFunc(slices.Clone(shared), func(o string) bool { return slices.Contains(without[name], o) })
			if !slices.Equal(got, want) {
				t.Errorf("%s's shared options are %v, want %v: run go generate ./policy", name, got, want)
			}
			if !slices.Equal(own, ownOptions) {
				t.Errorf("%s's own options are %v, want %v", name, own, ownOptions)
			}
			opt := pkg.Types
			i := slices.IndexFunc(opt, func(t *doc.Type) bool { return t.Name == "Option" })
			if i < 0 || !strings.HasPrefix(exprString(opt[i].Decl.Specs[0].(*ast.TypeSpec).Type), "policy.Option[") {
				t.Errorf("%s.Option is not an alias of policy.Option", name)
			}
		})
	}
}

// returned names the function that f's body calls in its one return
// statement ("policy.WithSkip[...]"), or "".
func returned(f *ast.FuncDecl) string {
	if f.Body == nil || len(f.Body.List) != 1 {
		return ""
	}
	ret, ok := f.Body.List[0].(*ast.ReturnStmt)
	if !ok || len(ret.Results) != 1 {
		return ""
	}
	call, ok := ret.Results[0].(*ast.CallExpr)
	if !ok {
		return ""
	}
	return exprString(call.Fun)
}

// sharedOptions lists this package's exported With functions.
func sharedOptions(t *testing.T) []string {
	t.Helper()
	var names []string
	pkg := parseDir(t, ".")
	for _, f := range pkg.Funcs {
		if strings.HasPrefix(f.Name, "With") {
			names = append(names, f.Name)
		}
	}
	for _, ty := range pkg.Types {
		for _, f := range ty.Funcs {
			if strings.HasPrefix(f.Name, "With") {
				names = append(names, f.Name)
			}
		}
	}
	slices.Sort(names)
	return names
}

func parseDir(t *testing.T, dir string) *doc.Package {
	t.Helper()
	fset := token.NewFileSet()
	matches, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, m := range matches {
		if strings.HasSuffix(m, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, m, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	pkg, err := doc.NewFromFiles(fset, files, "example.com/"+filepath.Base(dir), doc.PreserveAST)
	if err != nil {
		t.Fatal(err)
	}
	return pkg
}

func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	case *ast.IndexListExpr:
		return exprString(e.X) + "[...]"
	case *ast.IndexExpr:
		return exprString(e.X) + "[...]"
	}
	return ""
}
