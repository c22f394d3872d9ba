package core

import (
	"reflect"
	"testing"
	"time"
)

// TestResultSetEveryField: Result.set writes its fields one by one, so a
// field it forgets would keep what the Result held before. Every field of
// a Result filled with non-zero values must come out as the decision
// says, the others zero: as a fresh Result would.
func TestResultSetEveryField(t *testing.T) {
	p, err := newPlan([]Limit{{Name: "a", Rate: 10, Period: time.Second, Burst: 20}, {Name: "b", Rate: 100, Period: time.Minute, Burst: 5}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []decision{
		{Allowed: true, Remaining: 4, Reset: 1500, Next: 7, Index: 1, At: 1_800_000_000_000_123},
		{Locked: true, Retry: 2_000_000, Reset: 99, Index: 0},
	} {
		var dirty Result
		v := reflect.ValueOf(&dirty).Elem()
		for i := range v.NumField() {
			fill(t, v.Field(i), v.Type().Field(i).Name)
		}
		dirty.set(&d, p)
		want := Result{
			Allowed:    d.Allowed,
			Remaining:  int(d.Remaining),
			RetryAfter: time.Duration(d.Retry) * time.Microsecond,
			Wait:       time.Duration(d.Wait) * time.Microsecond,
			ResetAfter: time.Duration(d.Reset) * time.Microsecond,
			Limit:      p.limits[d.Index],
			Locked:     d.Locked,
			Time:       instant(d.At),
		}
		if !reflect.DeepEqual(dirty, want) {
			t.Errorf("set(%+v) over a filled Result = %+v, want %+v", d, dirty, want)
		}
	}
}

// fill sets v, the Result field name, to a value other than its zero.
func fill(t *testing.T, v reflect.Value, name string) {
	t.Helper()
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(12345)
	case reflect.String:
		v.SetString("stale")
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
	case reflect.Struct:
		switch x := v.Addr().Interface().(type) {
		case *time.Time:
			*x = time.Unix(1, 0)
		case *Shadows:
			*x = Shadows{denied: 1}
		case *Limit:
			*x = Limit{Name: "stale", Rate: 1, Period: time.Hour, Burst: 1}
		default:
			t.Fatalf("field %s: fill knows no %v", name, v.Type())
		}
	default:
		t.Fatalf("field %s: fill knows no %v", name, v.Type())
	}
}
