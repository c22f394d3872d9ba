package keyfunc_test

import (
	"fmt"

	"github.com/sluicehq/sluice/keyfunc"
)

func ExampleParseListEntry() {
	for _, e := range []string{"203.0.113.0/24", "2001:db8::1", "tenant:acme", "10.0.0.0/33", "300.1.2.3"} {
		p, isAddr, err := keyfunc.ParseListEntry(e)
		switch {
		case err != nil:
			fmt.Println("refused:", err)
		case isAddr:
			fmt.Println("address:", p)
		default:
			fmt.Println("key:", e)
		}
	}
	// Output:
	// address: 203.0.113.0/24
	// address: 2001:db8::1/128
	// key: tenant:acme
	// refused: keyfunc: list entry "10.0.0.0/33" is not a valid CIDR prefix: the length "33" is not a number from 0 to 32
	// refused: keyfunc: list entry "300.1.2.3" is not a valid IP address: IPv4 field has value >255
}
