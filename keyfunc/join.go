package keyfunc

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Join returns a Func that keys requests by several dimensions at once, for
// example a tenant on one route. It calls every fn in order and joins their
// keys with "|", as in "tenant:acme|route:GET /search".
//
// Join fails as soon as one fn fails and returns that fn's error unchanged,
// so a missing part still matches [ErrNoKey]. It fails closed: to fall back
// to another key instead, use [First].
//
// The extractors in this package escape '|' and '\' inside their values, so
// two requests with different parts never produce the same joined key. A
// custom Func used with Join should do the same: put a backslash before
// every '|' and '\' in what it returns.
//
// Join panics if it is given no Funcs or a nil one. The returned Func is
// safe for concurrent use if every fn is.
func Join(fns ...Func) Func {
	checkFuncs("Join", fns)
	if len(fns) == 1 {
		return fns[0]
	}
	fns = slices.Clone(fns)
	return func(r Request) (string, error) {
		var buf [4]string
		parts := buf[:0]
		for _, fn := range fns {
			k, err := fn(r)
			if err != nil {
				return "", err
			}
			parts = append(parts, k)
		}
		return strings.Join(parts, string(sep)), nil
	}
}

// First returns a Func that tries each fn in order and returns the first
// key found. It moves on to the next fn only when one fails with an error
// matching [ErrNoKey]; any other error is returned at once. When every fn
// reports no key, First returns the last fn's error, which matches
// [ErrNoKey].
//
// A typical use keys authenticated requests by user and the rest by client
// address:
//
//	keyfunc.First(keyfunc.User(userKey), keyfunc.IP())
//
// First panics if it is given no Funcs or a nil one. The returned Func is
// safe for concurrent use if every fn is.
func First(fns ...Func) Func {
	checkFuncs("First", fns)
	if len(fns) == 1 {
		return fns[0]
	}
	fns = slices.Clone(fns)
	return func(r Request) (string, error) {
		var err error
		for _, fn := range fns {
			k, e := fn(r)
			if e == nil {
				return k, nil
			}
			if !errors.Is(e, ErrNoKey) {
				return "", e
			}
			err = e
		}
		return "", err
	}
}

func checkFuncs(name string, fns []Func) {
	if len(fns) == 0 {
		panic("keyfunc: " + name + ": no Funcs given")
	}
	for i, fn := range fns {
		if fn == nil {
			panic(fmt.Sprintf("keyfunc: %s: Func %d is nil", name, i))
		}
	}
}
