package redisstore

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
// for several limits, and path.lua includes limits.lua where its first
// level of several limits needs it, so that no call makes a closure it
// does not use (each script call makes its closures anew, at about a
// thousand instructions each); quota.lua, a stepped key's re-assertion
// after Redis lost its data, likewise only in a call that carries a quota
// section. limits.lua, what a key under several limits
// is judged and written by, is shared that way by bucket.lua's batch form
// and path.lua. The expanded source is what Redis runs and what the
// scripts' hashes are of.
var (
	//go:embed arith.lua
	arithLua string
	//go:embed waits.lua
	waitsLua string
	//go:embed limits.lua
	limitsLua string
	//go:embed quota.lua
	quotaLua string
)

// expandLua returns src, the script named name, with each include line
// replaced by the file it names. An unknown name is a bug of this
// package, found by any test that loads the package.
func expandLua(name, src string) string {
	parts := map[string]string{"arith.lua": arithLua, "waits.lua": waitsLua, "limits.lua": limitsLua, "quota.lua": quotaLua}
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
