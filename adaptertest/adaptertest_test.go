package adaptertest

import "testing"

// TestScenarios checks the table itself: every scenario can run, and every
// step says what status it wants.
func TestScenarios(t *testing.T) {
	seen := map[string]bool{}
	for _, sc := range Scenarios() {
		if seen[sc.Name] {
			t.Errorf("scenario %q appears twice", sc.Name)
		}
		seen[sc.Name] = true
		if sc.Limiter == nil || len(sc.Steps) == 0 || len(sc.Routes) == 0 {
			t.Errorf("scenario %q: no limiter, steps or routes", sc.Name)
		}
		for i, st := range sc.Steps {
			if st.Want.Status == 0 {
				t.Errorf("scenario %q, step %d: no status wanted", sc.Name, i+1)
			}
		}
		for _, rt := range sc.Routes {
			if m := rt.Middleware; m != nil && m.Key == nil && m.Param == "" {
				t.Errorf("scenario %q, route %s %s: middleware without a key", sc.Name, rt.Method, rt.Pattern)
			}
		}
	}
}

func TestColonPattern(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/", "/"},
		{"/items", "/items"},
		{"/items/{id}", "/items/:id"},
		{"/a/{x}/b/{y}", "/a/:x/b/:y"},
		{"/broken/{x", "/broken/{x"},
	} {
		if got := (Route{Pattern: tc.in}).ColonPattern(); got != tc.want {
			t.Errorf("Route{Pattern: %q}.ColonPattern() = %q, want %q", tc.in, got, tc.want)
		}
	}
}
