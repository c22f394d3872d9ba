package policy

import (
	"fmt"

	"github.com/sluicehq/sluice/keyfunc"
)

// Native is implemented by the request views of adapters: Native returns
// the framework's own request (an *http.Request, a *gin.Context, ...)
// behind the view.
type Native[C any] interface {
	Native() C
}

// NativeKey returns a key function over the framework's own request, for
// keys that keyfunc's neutral extractors cannot express (a path parameter,
// a value the framework's own middleware stored). Each adapter offers it
// as Key, bound to its request type. The key is used as f returns it: give
// it a prefix of its own ("org:") so that joined keys cannot collide. An
// empty key fails the request like [keyfunc.ErrNoKey].
//
// The returned function fails, without calling f, on a request view of
// another framework: a key function built for gin used in a net/http
// middleware, say.
func NativeKey[C any](f func(C) (string, error)) keyfunc.Func {
	return func(r keyfunc.Request) (string, error) {
		n, ok := r.(Native[C])
		if !ok {
			var zero C
			return "", fmt.Errorf("policy: a key function over %T was given a request of another framework (%T)", zero, r)
		}
		return f(n.Native())
	}
}
