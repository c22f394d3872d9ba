package adaptertest_test

import (
	"fmt"

	"github.com/sluicehq/sluice/adaptertest"
)

func ExampleRoute_ColonPattern() {
	rt := adaptertest.Route{Method: "GET", Pattern: "/shops/{shop}/items/{id}"}
	fmt.Println(rt.ColonPattern())
	// Output: /shops/:shop/items/:id
}
