package main

import (
	"archive/zip"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// zipFiles returns, for the module in directory dir, the files of its zip
// as a map from the name inside the module to the file's path relative to
// the repository root. Like the go command's own zips (and those
// proxy.golang.org serves) it holds every file under dir except those in a
// directory that holds another go.mod (a nested module, testdata included)
// or in a vendor directory, and a module without a LICENSE gets the
// repository's.
func zipFiles(dir string, all []string) map[string]string {
	under := func(f, d string) bool { return d == "." || strings.HasPrefix(f, d+"/") }
	var nested []string // directories below dir that hold a go.mod
	for _, f := range all {
		if d := path.Dir(f); path.Base(f) == "go.mod" && d != dir && under(d, dir) {
			nested = append(nested, d)
		}
	}
	out := map[string]string{}
next:
	for _, f := range all {
		if !under(f, dir) {
			continue
		}
		for _, n := range nested {
			if under(f, n) {
				continue next
			}
		}
		name := f
		if dir != "." {
			name = strings.TrimPrefix(f, dir+"/")
		}
		if name == "vendor" || strings.HasPrefix(name, "vendor/") || strings.Contains(name, "/vendor/") {
			continue
		}
		out[name] = f
	}
	if _, ok := out["LICENSE"]; !ok && dir != "." {
		for _, f := range all {
			if f == "LICENSE" {
				out["LICENSE"] = f
			}
		}
	}
	return out
}

// writeProxy writes into dir the file-based module proxy that serves every
// published module of mods at version v, from the files of the work tree
// at root: for each module, <path>/@v/list, v.info, v.mod and v.zip, the
// layout GOPROXY=file://dir reads. It returns the modules it wrote.
func writeProxy(dir, root string, all []string, mods []module, v string) ([]module, error) {
	stamp := time.Now().UTC().Truncate(time.Second)
	var wrote []module
	for _, m := range mods {
		if !m.published() {
			continue
		}
		vdir := filepath.Join(dir, filepath.FromSlash(escapePath(m.Path)), "@v")
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return nil, err
		}
		gomod, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(m.Dir), "go.mod"))
		if err != nil {
			return nil, err
		}
		info, err := json.Marshal(struct {
			Version string
			Time    time.Time
		}{v, stamp})
		if err != nil {
			return nil, err
		}
		for name, data := range map[string][]byte{"list": []byte(v + "\n"), v + ".info": info, v + ".mod": gomod} {
			if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
				return nil, err
			}
		}
		if err := writeZip(filepath.Join(vdir, v+".zip"), root, m.Path+"@"+v, zipFiles(m.Dir, all)); err != nil {
			return nil, fmt.Errorf("%s: %v", m.Path, err)
		}
		wrote = append(wrote, m)
	}
	return wrote, nil
}

// writeZip writes the module zip at name: each file of files under
// prefix/, its content read from root.
func writeZip(name, root, prefix string, files map[string]string) (err error) {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	zw := zip.NewWriter(f)
	lower := map[string]string{}
	for _, n := range sortedKeys(files) {
		if prev, ok := lower[strings.ToLower(n)]; ok {
			return fmt.Errorf("%s and %s differ only in case, which a module zip refuses", prev, n)
		}
		lower[strings.ToLower(n)] = n
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(files[n])))
		if err != nil {
			return err
		}
		w, err := zw.CreateHeader(&zip.FileHeader{Name: prefix + "/" + n, Method: zip.Deflate})
		if err != nil {
			return err
		}
		if _, err := w.Write(data); err != nil {
			return err
		}
	}
	return zw.Close()
}

// escapePath is a module path as the module cache and proxies spell it:
// each upper-case letter becomes '!' and its lower case.
func escapePath(p string) string {
	var b strings.Builder
	for _, r := range p {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
