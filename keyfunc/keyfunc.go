package keyfunc

import (
	"errors"
	"fmt"
	"net/textproto"
	"reflect"
	"strconv"
	"strings"
)

// Request is the framework-neutral view of an HTTP request that a [Func]
// reads. The adapter packages implement it over their framework's native
// request, usually with a struct that holds a single pointer.
//
// A Request is used by one goroutine for the duration of one call. The
// extractors in this package never keep it, and the keys they return never
// share memory with the strings it hands out, so a key stays valid after
// the request's buffers are reused (as fiber does). There is no useful zero
// value: the extractors expect a non-nil Request.
type Request interface {
	// Header returns the value of the named header field, matching the name
	// case-insensitively. When the field appears on several lines, the
	// values are joined with ", " in the order received (RFC 9110, section
	// 5.3). It returns "" when the field is absent.
	Header(name string) string

	// RemoteAddr returns the address of the connection's peer, either
	// "host:port" or a bare "host". IPv6 hosts may come with or without
	// brackets: "[::1]:8080", "[::1]" and "::1" are all accepted.
	RemoteAddr() string

	// Method returns the request method, such as "GET".
	Method() string

	// Route returns the pattern of the matched route, such as "/users/:id",
	// "/users/{id}" or "GET /users/{id}", and "" when no route matched or
	// the framework does not report it.
	Route() string

	// Value returns the request-scoped value stored under key by earlier
	// middleware (a context value), or nil if there is none.
	Value(key any) any
}

// Func extracts a rate-limit key from a request. It returns [ErrNoKey],
// possibly wrapped, when the request carries no key; callers should test
// for it with [errors.Is].
//
// The zero value is nil and cannot be called. The Funcs returned by this
// package are safe for concurrent use, and no request content makes them
// panic: bad input ends in an error.
type Func func(Request) (string, error)

// ErrNoKey reports that a request carries no usable key: a header is
// missing or empty, a context value is absent or of an unsupported type,
// the route is unknown, or the peer address is not an IP address. The
// extractors wrap it with %w to say which part was missing, so match it with
// [errors.Is]. Adapters answer it with 400 Bad Request by default.
var ErrNoKey = errors.New("keyfunc: no key")

// Key prefixes, one per dimension. Join puts keys side by side, and the
// prefixes keep values of different dimensions apart.
const (
	prefixHeader = "header:"
	prefixTenant = "tenant:"
	prefixUser   = "user:"
	prefixRoute  = "route:"
	prefixStatic = "static:"
	prefixIP     = "ip:"
)

// sep separates the parts of a joined key, and esc escapes sep and itself
// inside a part.
const (
	sep = '|'
	esc = '\\'
)

// ErrNoRoute is the [ErrNoKey] that [Route] returns when the request's
// route pattern is not known where the key is extracted: the middleware
// runs before the router has matched the request (gin's, echo's or fiber's
// r.Use, or around a whole http.ServeMux), or the request matched no
// route. The first is a misconfiguration that fails every request, which
// the request policy logs once with the fix.
var ErrNoRoute = fmt.Errorf("%w: route pattern is unknown", ErrNoKey)

// Header returns a Func that keys requests by the value of the named header
// field: "header:<lowercased name>:<value>".
//
// The value is chosen by the client, which can send a new value with every
// request and so obtain a fresh bucket each time. Use Header only for values
// that something in front of the service checks or overwrites, or combine it
// with a key the client cannot choose. A missing or empty field yields
// [ErrNoKey].
//
// Header panics if name is not a valid header field name. The returned Func
// is safe for concurrent use.
func Header(name string) Func {
	checkHeaderName("Header", name)
	f := &headerFunc{
		name:   textproto.CanonicalMIMEHeaderKey(name),
		prefix: prefixHeader + escape(strings.ToLower(name)) + ":",
	}
	f.errEmpty = fmt.Errorf("%w: header %s is missing or empty", ErrNoKey, name)
	return f.key
}

// Tenant returns a Func that keys requests by the tenant named in a header
// field: "tenant:<value>".
//
// The header is chosen by the client, so Tenant is only safe behind a
// gateway that sets the field itself and overwrites any value the client
// sent. When an authentication middleware has already identified the
// tenant, prefer [TenantValue]. A missing or empty field yields [ErrNoKey].
//
// Tenant panics if header is not a valid header field name. The returned
// Func is safe for concurrent use.
func Tenant(header string) Func {
	checkHeaderName("Tenant", header)
	f := &headerFunc{
		name:   textproto.CanonicalMIMEHeaderKey(header),
		prefix: prefixTenant,
	}
	f.errEmpty = fmt.Errorf("%w: tenant header %s is missing or empty", ErrNoKey, header)
	return f.key
}

type headerFunc struct {
	name     string // canonical form, which net/http looks up without allocating
	prefix   string
	errEmpty error
}

func (f *headerFunc) key(r Request) (string, error) {
	v := r.Header(f.name)
	if v == "" {
		return "", f.errEmpty
	}
	return escaped(f.prefix, v), nil
}

// TenantValue returns a Func that keys requests by the tenant that earlier
// middleware, typically authentication, stored as a request-scoped value
// under key: "tenant:<value>". Unlike [Tenant], the client cannot choose it.
//
// The value may be a string, a []byte, an integer of any size, a
// [fmt.Stringer], or a type whose underlying type is a string or an integer.
// A missing value, an empty one, or one of any other type yields [ErrNoKey]
// with a message that names the type.
//
// TenantValue panics if key is nil or not comparable, as
// [context.WithValue] does. The returned Func is safe for concurrent use.
func TenantValue(key any) Func {
	return newValueFunc("TenantValue", "tenant", prefixTenant, key)
}

// User returns a Func that keys requests by the user that earlier
// middleware, typically authentication, stored as a request-scoped value
// under key: "user:<value>". It accepts the same value types as
// [TenantValue] and fails the same way.
//
// User panics if key is nil or not comparable. The returned Func is safe for
// concurrent use.
func User(key any) Func {
	return newValueFunc("User", "user", prefixUser, key)
}

type valueFunc struct {
	key        any
	what       string // "user" or "tenant", for error messages
	prefix     string
	errMissing error
	errEmpty   error
}

func newValueFunc(fn, what, prefix string, key any) Func {
	if key == nil || !reflect.TypeOf(key).Comparable() {
		panic(fmt.Sprintf("keyfunc: %s: key must be non-nil and comparable, got %T", fn, key))
	}
	f := &valueFunc{
		key:        key,
		what:       what,
		prefix:     prefix,
		errMissing: fmt.Errorf("%w: no %s value in the request", ErrNoKey, what),
		errEmpty:   fmt.Errorf("%w: %s value is empty", ErrNoKey, what),
	}
	return f.extract
}

func (f *valueFunc) extract(r Request) (string, error) {
	switch v := r.Value(f.key).(type) {
	case nil:
		return "", f.errMissing
	case string:
		return f.str(v)
	case []byte:
		return f.str(string(v))
	case int:
		return intKey(f.prefix, int64(v)), nil
	case int64:
		return intKey(f.prefix, v), nil
	case int32:
		return intKey(f.prefix, int64(v)), nil
	case uint:
		return uintKey(f.prefix, uint64(v)), nil
	case uint64:
		return uintKey(f.prefix, v), nil
	case uint32:
		return uintKey(f.prefix, uint64(v)), nil
	case fmt.Stringer:
		s, ok := callString(v)
		if !ok {
			return "", fmt.Errorf("%w: %s value of type %T cannot be formatted", ErrNoKey, f.what, v)
		}
		return f.str(s)
	default:
		// Named types (type UserID int64) and the rarer integer sizes.
		rv := reflect.ValueOf(v)
		switch rv.Kind() {
		case reflect.String:
			return f.str(rv.String())
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			return intKey(f.prefix, rv.Int()), nil
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
			return uintKey(f.prefix, rv.Uint()), nil
		case reflect.Slice:
			if rv.Type().Elem().Kind() == reflect.Uint8 {
				return f.str(string(rv.Bytes()))
			}
		}
		return "", fmt.Errorf("%w: %s value has type %T", ErrNoKey, f.what, v)
	}
}

func (f *valueFunc) str(s string) (string, error) {
	if s == "" {
		return "", f.errEmpty
	}
	return escaped(f.prefix, s), nil
}

// callString calls s.String, reporting false instead of panicking when s is
// a nil pointer or its method panics.
func callString(s fmt.Stringer) (str string, ok bool) {
	if rv := reflect.ValueOf(s); rv.Kind() == reflect.Pointer && rv.IsNil() {
		return "", false
	}
	defer func() {
		if recover() != nil {
			str, ok = "", false
		}
	}()
	return s.String(), true
}

func intKey(prefix string, n int64) string {
	var buf [32]byte
	return string(strconv.AppendInt(append(buf[:0], prefix...), n, 10))
}

func uintKey(prefix string, n uint64) string {
	var buf [32]byte
	return string(strconv.AppendUint(append(buf[:0], prefix...), n, 10))
}

// Route returns a Func that keys requests by their method and matched route
// pattern: "route:<METHOD> <pattern>", for example "route:GET /users/{id}".
// When the pattern already begins with the request's method and a space, as
// net/http patterns such as "GET /users/{id}" do, the method is not repeated.
//
// HEAD counts as GET: "route:GET /users/{id}" for a HEAD request too, as
// net/http and fiber answer HEAD with the GET route's handler, and a route
// registered for HEAD alone counts with its GET twin. A client cannot double
// a route's limit by asking for headers only.
//
// Methods other than the standard ones (GET, HEAD, POST, PUT, PATCH, DELETE,
// CONNECT, OPTIONS and TRACE) are keyed as "OTHER", unless the pattern names
// the method itself. Clients can invent methods, and a route registered for
// any method would otherwise give each invented method a bucket of its own.
//
// An unknown pattern yields [ErrNoKey]; Route never falls back to the raw
// path, whose values the client chooses without limit. The returned Func is
// safe for concurrent use.
func Route() Func {
	return routeKey
}

func routeKey(r Request) (string, error) {
	p := r.Route()
	if p == "" {
		return "", ErrNoRoute
	}
	m := r.Method()
	if m == "HEAD" {
		// HEAD runs the GET route's handler (net/http and fiber route it
		// there) and counts as a GET, also on a route of its own.
		if rest, ok := strings.CutPrefix(p, "HEAD "); ok {
			return escaped(prefixRoute+"GET ", rest), nil
		}
		m = "GET"
	}
	if m != "" && len(p) > len(m) && p[len(m)] == ' ' && p[:len(m)] == m {
		return escaped(prefixRoute, p), nil
	}
	m = standardMethod(m)
	if !needsEscape(p) {
		return prefixRoute + m + " " + p, nil
	}
	return escaped(prefixRoute+m+" ", p), nil
}

// standardMethod returns m if it is one of the methods of RFC 9110 or RFC
// 5789 and "OTHER" otherwise. The result is always a constant, so it never
// keeps the request's memory alive.
func standardMethod(m string) string {
	switch m {
	case "GET":
		return "GET"
	case "HEAD":
		return "HEAD"
	case "POST":
		return "POST"
	case "PUT":
		return "PUT"
	case "PATCH":
		return "PATCH"
	case "DELETE":
		return "DELETE"
	case "CONNECT":
		return "CONNECT"
	case "OPTIONS":
		return "OPTIONS"
	case "TRACE":
		return "TRACE"
	}
	return "OTHER"
}

// Static returns a Func that gives every request the same key,
// "static:<name>", so that they all share one bucket: a global limit, or a
// limit for everything behind one middleware. The returned Func never fails
// and is safe for concurrent use.
func Static(name string) Func {
	k := escaped(prefixStatic, name)
	return func(Request) (string, error) { return k, nil }
}

// needsEscape reports whether s contains the separator or the escape byte.
func needsEscape(s string) bool {
	return strings.IndexByte(s, sep) >= 0 || strings.IndexByte(s, esc) >= 0
}

// escape returns s with the separator and the escape byte escaped. It
// returns s itself, without allocating, when there is nothing to escape.
func escape(s string) string {
	if !needsEscape(s) {
		return s
	}
	return escaped("", s)
}

// escaped returns prefix followed by the escaped form of v, allocating the
// result once.
func escaped(prefix, v string) string {
	n := strings.Count(v, string(sep)) + strings.Count(v, string(esc))
	if n == 0 {
		return prefix + v
	}
	var b strings.Builder
	b.Grow(len(prefix) + len(v) + n)
	b.WriteString(prefix)
	for i := 0; i < len(v); i++ {
		if c := v[i]; c == sep || c == esc {
			b.WriteByte(esc)
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// checkHeaderName panics unless name is a non-empty token (RFC 9110,
// section 5.1).
func checkHeaderName(fn, name string) {
	if name == "" {
		panic("keyfunc: " + fn + ": empty header name")
	}
	for i := 0; i < len(name); i++ {
		if !isTokenByte(name[i]) {
			panic(fmt.Sprintf("keyfunc: %s: invalid header name %q", fn, name))
		}
	}
}

func isTokenByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
