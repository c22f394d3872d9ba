package main

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"sort"
	"strings"
)

// readmePackages are the packages the README's first example may use
// without importing them, by name.
var readmePackages = map[string]string{
	"context":      "context",
	"log":          "log",
	"http":         "net/http",
	"time":         "time",
	"redis":        "github.com/redis/go-redis/v9",
	"core":         "github.com/sluicehq/sluice/core",
	"keyfunc":      "github.com/sluicehq/sluice/keyfunc",
	"policy":       "github.com/sluicehq/sluice/policy",
	"httplimit":    "github.com/sluicehq/sluice/httplimit",
	"ginlimit":     "github.com/sluicehq/sluice/ginlimit",
	"echolimit":    "github.com/sluicehq/sluice/echolimit",
	"echov5limit":  "github.com/sluicehq/sluice/echov5limit",
	"fiberlimit":   "github.com/sluicehq/sluice/fiberlimit",
	"fiberv3limit": "github.com/sluicehq/sluice/fiberv3limit",
	"grpclimit":    "github.com/sluicehq/sluice/grpclimit",
	"gin":          "github.com/gin-gonic/gin",
	"echo":         "github.com/labstack/echo/v4",
	"fiber":        "github.com/gofiber/fiber/v2",
	"grpc":         "google.golang.org/grpc",
}

// readmeEnv are the variables it may use without declaring them, with
// their types: what the code around it would have set up.
var readmeEnv = map[string]string{
	"ctx":    "context.Context",
	"rdb":    "*redis.Client",
	"mux":    "*http.ServeMux",
	"search": "gin.HandlerFunc",
}

// readmeProgram returns a main package built from the first ```go block of
// a README: the block itself if it is a whole file, else its statements as
// the body of main, with the imports and variables they use.
func readmeProgram(readme []byte) (string, error) {
	code, err := firstGoBlock(readme)
	if err != nil {
		return "", err
	}
	fset := token.NewFileSet()
	if _, err := parser.ParseFile(fset, "", code, parser.PackageClauseOnly); err == nil {
		return code, nil
	}
	const pre = "package main\nfunc main() {\n"
	f, err := parser.ParseFile(fset, "", pre+code+"\n}\n", 0)
	if err != nil {
		return "", fmt.Errorf("the first ```go block is neither a Go file nor statements: %v", err)
	}
	body := f.Decls[0].(*ast.FuncDecl).Body
	var declared []string // by := at the top level of the block
	for _, s := range body.List {
		if a, ok := s.(*ast.AssignStmt); ok && a.Tok == token.DEFINE {
			for _, e := range a.Lhs {
				if id, ok := e.(*ast.Ident); ok && id.Name != "_" {
					declared = append(declared, id.Name)
				}
			}
		}
	}
	used := map[string]bool{}
	ast.Inspect(body, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok {
			used[id.Name] = true
		}
		return true
	})
	imports := map[string]bool{}
	var vars []string
	for name := range used {
		if p, ok := readmePackages[name]; ok {
			imports[p] = true
		}
	}
	for name, typ := range readmeEnv {
		if used[name] && !contains(declared, name) {
			vars = append(vars, "\t"+name+" "+typ+"\n")
			pkg, _, _ := strings.Cut(strings.TrimLeft(typ, "*"), ".")
			imports[readmePackages[pkg]] = true
		}
	}
	var b strings.Builder
	b.WriteString("// The first Go example of README.md, as a program.\npackage main\n\nimport (\n")
	paths := make([]string, 0, len(imports))
	for p := range imports {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		fmt.Fprintf(&b, "\t%q\n", p)
	}
	b.WriteString(")\n\n")
	if len(vars) > 0 {
		sort.Strings(vars)
		b.WriteString("var (\n" + strings.Join(vars, "") + ")\n\n")
	}
	b.WriteString("func main() {\n" + code)
	for _, name := range declared {
		b.WriteString("\t_ = " + name + "\n")
	}
	b.WriteString("}\n")
	return b.String(), nil
}

// firstGoBlock returns the code of the first ```go block of a Markdown
// text.
func firstGoBlock(md []byte) (string, error) {
	sc := bufio.NewScanner(bytes.NewReader(md))
	sc.Buffer(make([]byte, 0, 1<<16), 1<<20)
	var code strings.Builder
	in := false
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case !in && trimmed == "```go":
			in = true
		case in && strings.HasPrefix(trimmed, "```"):
			return code.String(), nil
		case in:
			code.WriteString(line + "\n")
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("no ```go block")
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
