package replay

import (
	"reflect"
	"testing"
)

// FuzzParseFast checks that the fast path reads every line it accepts
// exactly as encoding/json does.
func FuzzParseFast(f *testing.F) {
	f.Add([]byte(`{"time":"2026-11-28T22:00:00.000001Z","key":"tenant:acme","cost":3,"status":200,"allowed":true}`))
	f.Add([]byte(`{"time":"2026-11-28T22:00:00.000001Z","path":["a","b"],"allowed":false}`))
	f.Add([]byte(`{"time":"2026-11-28T22:00:00.000001Z","path":[],"cost":01}`))
	f.Add([]byte(`{"time":"2026-11-28T22:00:00.000001Z","key":"k","status":0}`))
	f.Add([]byte(`{"time":"x","key":"k"} `))
	f.Fuzz(func(t *testing.T, b []byte) {
		fast, ok := parseFast(b)
		if !ok {
			return
		}
		var slow line
		if err := decodeLine(b, &slow); err != nil {
			t.Fatalf("%q: the fast path read %+v, encoding/json refuses it: %v", b, fast, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: the fast path read %+v, encoding/json %+v", b, fast, slow)
		}
	})
}
