package core

import (
	_ "embed"
	"strings"
)

// Lua that several scripts share lives in files of its own and is spliced
// into each script where it names it, on a line of its own:
//
//	--#include arith.lua
//
// Most scripts include at their top; bucket.lua includes inside its branch
// for several limits, so that its lone form makes no closure it does not
// use (each script call makes its closures anew). The expanded source is
// what Redis runs and what the scripts' hashes are of.
var (
	//go:embed arith.lua
	arithLua string
	//go:embed waits.lua
	waitsLua string
)

// expandLua returns src, the script named name, with each include line
// replaced by the file it names. An unknown name is a bug of this
// package, found by any test that loads the package.
func expandLua(name, src string) string {
	parts := map[string]string{"arith.lua": arithLua, "waits.lua": waitsLua}
	var b strings.Builder
	for line := range strings.Lines(src) {
		inc, ok := strings.CutPrefix(strings.TrimSpace(line), "--#include ")
		if !ok {
			b.WriteString(line)
			continue
		}
		part, known := parts[inc]
		if !known {
			panic("core: " + name + " includes " + inc + ", which is not a shared Lua file")
		}
		b.WriteString(part)
	}
	return b.String()
}
