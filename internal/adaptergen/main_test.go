package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestUpToDate: every adapter's options_gen.go is what adaptergen writes
// from package policy today, so an option added to policy without running
// go generate ./policy fails here.
func TestUpToDate(t *testing.T) {
	root, err := findRoot()
	if err != nil {
		t.Fatal(err)
	}
	opts, exported, err := options(filepath.Join(root, "policy"))
	if err != nil {
		t.Fatal(err)
	}
	if len(opts) < 10 {
		t.Fatalf("found %d options in policy, want many more: is the parser missing them?", len(opts))
	}
	for _, a := range adapters {
		want, err := generate(a, opts, exported)
		if err != nil {
			t.Fatalf("%s: %v", a.dir, err)
		}
		got, err := os.ReadFile(filepath.Join(root, a.dir, "options_gen.go"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s/options_gen.go is out of date: run go generate ./policy", a.dir)
		}
	}
}

// TestSkip: an adapter leaves out the options it skips.
func TestSkip(t *testing.T) {
	root, err := findRoot()
	if err != nil {
		t.Fatal(err)
	}
	opts, exported, err := options(filepath.Join(root, "policy"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := generate(adapter{dir: "x", native: "*http.Request", importPath: "net/http", framework: "net/http", skip: []string{"WithSkip"}}, opts, exported)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(src, []byte("func WithSkip(")) {
		t.Errorf("generate kept WithSkip, which the adapter skips:\n%s", src)
	}
	if !bytes.Contains(src, []byte("func WithCost(f func(*http.Request) int) Option {\n\treturn policy.WithCost[*http.Request, Handlers](f)\n}")) {
		t.Errorf("generate wrote no WithCost over *http.Request:\n%s", src)
	}
}
