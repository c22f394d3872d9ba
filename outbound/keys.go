package outbound

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
)

// KeyFunc returns the upstream key of a request: the calls of one key
// share one budget. It must be safe for concurrent use.
type KeyFunc func(*http.Request) (string, error)

// ErrNoKey is wrapped by the error of a key function that found nothing
// to name the request's upstream by: the request is not sent.
var ErrNoKey = errors.New("outbound: no upstream key")

// Host keys a request by the host (and port, if the URL names one) it is
// sent to, lower-cased: "host:api.example.com".
func Host() KeyFunc {
	return func(r *http.Request) (string, error) {
		if r.URL == nil || r.URL.Host == "" {
			return "", ErrNoKey
		}
		return "host:" + strings.ToLower(r.URL.Host), nil
	}
}

// Header keys a request by the value of its header name, such as the API
// key it sends: "header:" and a digest of the value (128 bits of its
// SHA-256), so that the secret is never written to Redis. A request
// without the header fails with an error wrapping [ErrNoKey].
func Header(name string) KeyFunc {
	return func(r *http.Request) (string, error) {
		v := r.Header.Get(name)
		if v == "" {
			return "", ErrNoKey
		}
		sum := sha256.Sum256([]byte(v))
		return "header:" + hex.EncodeToString(sum[:16]), nil
	}
}

// Join keys a request by several key functions at once, such as host and
// API key: their keys joined by "|". The first error fails it.
func Join(fs ...KeyFunc) KeyFunc {
	return func(r *http.Request) (string, error) {
		var b strings.Builder
		for i, f := range fs {
			k, err := f(r)
			if err != nil {
				return "", err
			}
			if i > 0 {
				b.WriteByte('|')
			}
			b.WriteString(k)
		}
		return b.String(), nil
	}
}
