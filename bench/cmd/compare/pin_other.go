//go:build !linux

package main

// pinning describes how Redis and this process were placed on CPUs.
type pinning struct {
	RedisCPUs string
	GoCPUs    string
	Note      string
}

func pin(bool) pinning { return pinning{Note: "not pinned: pinning is implemented for Linux only"} }

// affinity is not read on this platform.
func affinity() string { return "" }
