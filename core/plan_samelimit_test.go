package core

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// TestSameLimit: the plan cache's hit compares Limits word for word
// (sameLimit), so Limit must be whole words with no padding, two Limits
// that differ in any one field must not be the same, and a Limit whose
// strings are equal but built anew must still find its plan (through
// getSlow), deciding on the same bucket.
func TestSameLimit(t *testing.T) {
	var words uintptr
	lt := reflect.TypeOf(Limit{})
	for i := range lt.NumField() {
		f := lt.Field(i)
		if f.Type.Size()%unsafe.Sizeof(uintptr(0)) != 0 {
			t.Errorf("Limit.%s is %d bytes, not whole words: sameLimit would compare padding", f.Name, f.Type.Size())
		}
		words += f.Type.Size()
	}
	if words != unsafe.Sizeof(Limit{}) {
		t.Errorf("Limit's fields are %d bytes of its %d: sameLimit would compare padding", words, unsafe.Sizeof(Limit{}))
	}

	base := Limit{Name: "n", Rate: 10, Period: time.Second, Burst: 20, Refill: RefillContinuous, Zone: "UTC"}
	if b := base; !sameLimit(&base, &b) {
		t.Fatalf("sameLimit(%+v, a copy) = false", base)
	}
	for i := range lt.NumField() {
		other := base
		f := reflect.ValueOf(&other).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(f.String() + "x")
		case reflect.Int, reflect.Int64:
			f.SetInt(f.Int() + 1)
		default:
			t.Fatalf("Limit.%s is a %s: teach this test about it", lt.Field(i).Name, f.Kind())
		}
		if sameLimit(&base, &other) {
			t.Errorf("sameLimit says Limits differing in %s are the same", lt.Field(i).Name)
		}
	}

	// The same limit with its name built anew on every call: equal, not
	// identical. It misses hit and must decide on the same bucket.
	lim, err := NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	ctx := context.Background()
	for i := range 3 {
		l := Limit{Name: strings.Clone(base.Name), Rate: 1, Period: time.Hour, Burst: 2}
		res, err := lim.AllowN(ctx, "k", 1, l)
		if err != nil {
			t.Fatal(err)
		}
		if want := i < 2; res.Allowed != want {
			t.Fatalf("call %d with an equal limit built anew: Allowed %v, want %v (one bucket of 2)", i, res.Allowed, want)
		}
	}
}
