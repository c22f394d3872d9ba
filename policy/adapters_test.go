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
// no HTTP bodies for problem details, and no HTTP status for charging by
// the response (its codes would need a predicate of their own).
var without = map[string][]string{"grpclimit": {"WithProblemJSON", "WithChargeIf", "WithFinalCost"}}

// ownOptions are the options an adapter defines itself: their function
// types involve the framework's response.
var ownOptions = []string{"WithDenyHandler", "WithErrorHandler"}

// TestAdaptersShareOptions fails when an adapter's options drift from this
// package's: each adapter must offer every shared option, as a variable
// bound to this package's generic function of the same name and documented
// as that function, and no option of its own but the deny and error
// handlers, which every adapter must document with a Default line.
func TestAdaptersShareOptions(t *testing.T) {
	shared := sharedOptions(t)
	if len(shared) < 8 {
		t.Fatalf("found %d shared options in package policy: %v", len(shared), shared)
	}
	for _, name := range adapters {
		t.Run(name, func(t *testing.T) {
			pkg := parseDir(t, filepath.Join("..", name))
			var got []string
			for _, v := range pkg.Vars {
				for _, spec := range v.Decl.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, id := range vs.Names {
						if !strings.HasPrefix(id.Name, "With") {
							continue
						}
						got = append(got, id.Name)
						if want := "policy." + id.Name; i >= len(vs.Values) || !strings.HasPrefix(exprString(vs.Values[i]), want+"[") {
							t.Errorf("%s.%s is not bound to %s", name, id.Name, want)
						}
						if want := id.Name + " is [policy." + id.Name + "]."; strings.TrimSpace(vs.Doc.Text()) != want {
							t.Errorf("%s.%s's doc comment is %q, want %q", name, id.Name, vs.Doc.Text(), want)
						}
					}
				}
			}
			var own []string
			funcs := pkg.Funcs
			for _, ty := range pkg.Types {
				funcs = append(funcs, ty.Funcs...)
			}
			for _, f := range funcs {
				if strings.HasPrefix(f.Name, "With") {
					own = append(own, f.Name)
					if !strings.Contains(f.Doc, "\nDefault: ") {
						t.Errorf("%s.%s's doc comment has no Default line", name, f.Name)
					}
				}
			}
			slices.Sort(got)
			slices.Sort(own)
			want := slices.DeleteFunc(slices.Clone(shared), func(o string) bool { return slices.Contains(without[name], o) })
			if !slices.Equal(got, want) {
				t.Errorf("%s's shared options are %v, want %v", name, got, want)
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
	pkg, err := doc.NewFromFiles(fset, files, "example.com/"+filepath.Base(dir))
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
