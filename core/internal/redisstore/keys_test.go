package redisstore

import (
	"strings"
	"testing"
)

// TestRedisKeyFrom: a verbatim key's name is <prefix>{<tag>}<fp>:<key>,
// the tag taken from tagKey, and building it allocates the name alone.
func TestRedisKeyFrom(t *testing.T) {
	for _, tc := range []struct{ prefix, fp, tagKey, key, want string }{
		{"sluice:", "abc123", "acme", "acme", "sluice:{" + string(tagFor("acme")) + "}abc123:acme"},
		{"", "f", "root", "root/child", "{" + string(tagFor("root")) + "}f:root/child"},
		{"p:", "fp", "", "", "p:{" + string(tagFor("")) + "}fp:"},
	} {
		got := RedisKeyFrom(tc.prefix, tc.fp, tc.tagKey, tc.key, nil)
		if got != tc.want {
			t.Errorf("RedisKeyFrom(%q, %q, %q, %q) = %q, want %q", tc.prefix, tc.fp, tc.tagKey, tc.key, got, tc.want)
		}
		if a := testing.AllocsPerRun(100, func() { _ = RedisKeyFrom(tc.prefix, tc.fp, tc.tagKey, tc.key, nil) }); a != 1 {
			t.Errorf("RedisKeyFrom(%q, ...) allocates %v times, want 1 (the name)", tc.key, a)
		}
	}
	// A key too long to store verbatim, or starting with '#', is stored
	// as its digest, under the same tag.
	for _, key := range []string{strings.Repeat("k", MaxVerbatimKey+1), "#x"} {
		got := RedisKeyFrom("p:", "fp", "t", key, nil)
		if want := "p:{" + string(tagFor("t")) + "}fp:#"; !strings.HasPrefix(got, want) || len(got) != len(want)+32 {
			t.Errorf("RedisKeyFrom of a %d-byte key = %q, want %q and 32 hex digits", len(key), got, want)
		}
	}
}

// tagFor is the unkeyed tag of tagKey, computed apart from RedisKeyFrom:
// FNV-1a, its low 16 bits as four hex digits.
func tagFor(tagKey string) []byte {
	sum := uint32(2166136261)
	for i := 0; i < len(tagKey); i++ {
		sum ^= uint32(tagKey[i])
		sum *= 16777619
	}
	t := tagOf(sum)
	return t[:]
}
