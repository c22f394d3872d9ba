package policy

import (
	"runtime"
	"strconv"
	"strings"
	"sync"
	"weak"

	"github.com/sluicehq/sluice/core"
)

// sites counts the middlewares made at each call site on each limiter, to
// warn once when a second one shares the first one's buckets. Limiters are
// held weakly: a test that makes a limiter per case leaves no limiter
// behind, and its middlewares, made at one line on different limiters,
// share nothing.
var sites struct {
	sync.Mutex
	made map[siteKey]int
}

type siteKey struct {
	lim  weak.Pointer[core.Limiter]
	site string
}

// callSite returns the default scope of a middleware being made: the
// function and line that called the adapter's New or Build (or this
// package's New), such as "main.routes:42". Function names do not depend
// on where the program was built, so replicas of one build agree. The
// second middleware made at one site is warned about on lim's logger, once
// per site and limiter: it shares the first one's buckets.
func callSite(lim *core.Limiter) string {
	var pcs [8]uintptr
	n := runtime.Callers(3, pcs[:]) // callSite's caller, New, is skipped below
	frames := runtime.CallersFrames(pcs[:n])
	site := "unknown"
	for {
		f, more := frames.Next()
		if !isConstructor(f.Function) {
			site = f.Function + ":" + strconv.Itoa(f.Line)
			break
		}
		if !more {
			break
		}
	}
	k := siteKey{weak.Make(lim), site}
	sites.Lock()
	if sites.made == nil {
		sites.made = make(map[siteKey]int)
	}
	if len(sites.made) >= 1024 {
		for k := range sites.made {
			if k.lim.Value() == nil {
				delete(sites.made, k)
			}
		}
	}
	sites.made[k]++
	second := sites.made[k] == 2
	sites.Unlock()
	if second {
		lim.Logger().Warn("sluice: a second middleware is made at one line and shares the first one's buckets (the default scope is where a middleware is made); if they guard different routes, give each its own WithScope",
			"site", site)
	}
	return site
}

// isConstructor reports whether fn, a function name as the runtime gives
// it, is one of the constructors between a user's call and callSite: this
// package's New, or an adapter's New or Build (an adapter is a package of
// this repository whose name ends in "limit").
func isConstructor(fn string) bool {
	rest, ok := strings.CutPrefix(fn, "github.com/sluicehq/sluice/")
	if !ok {
		return false
	}
	pkg, name, ok := strings.Cut(rest, ".")
	if !ok {
		return false
	}
	name, _, _ = strings.Cut(name, "[") // a generic function's type arguments
	switch {
	case pkg == "policy":
		return name == "New"
	case strings.HasSuffix(pkg, "limit") && !strings.Contains(pkg, "/"):
		return name == "New" || name == "Build"
	}
	return false
}
