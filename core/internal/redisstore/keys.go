package redisstore

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
)

// Redis key layout
//
//	<prefix>{<tag>}<fingerprint>:<key>
//
// tag is four hex digits of a hash of the user's key (keyed, with
// WithSlotKey), so the library, never the user's bytes, decides the Redis
// Cluster slot, and every piece of one
// bucket's state lives in one slot. fingerprint names the set of limits.
// key is the user's key verbatim when it is at most maxVerbatimKey bytes
// and does not start with "#", otherwise "#" and a SHA-256 digest of it,
// so stored names stay bounded whatever the caller passes, and no key
// stored verbatim can take the name of another key's digest. Braces after the tag do not affect the slot:
// Redis hashes only the first {...} section.

// MaxVerbatimKey is the longest user key stored as is.
const MaxVerbatimKey = 128

// maxPrefix bounds the configurable key prefix.
const maxPrefix = 64

// ValidatePrefix checks p, a key prefix (core.WithPrefix): an error names
// what is wrong with it.
func ValidatePrefix(p string) error {
	if len(p) > maxPrefix {
		return fmt.Errorf("core: key prefix is %d bytes, at most %d", len(p), maxPrefix)
	}
	if strings.ContainsAny(p, "{}") {
		return fmt.Errorf("core: key prefix %q contains a brace; the library owns the hash tag", p)
	}
	return nil
}

// RedisKey builds the stored name of key's bucket under plan fp, with the
// unkeyed tag.
func RedisKey(prefix, fp, key string) string { return redisKeyTagged(prefix, fp, key, nil) }

// redisKeyTagged builds the stored name of key's bucket under plan fp;
// with slotKey, its tag is a keyed hash (see WithSlotKey).
func redisKeyTagged(prefix, fp, key string, slotKey []byte) string {
	return RedisKeyFrom(prefix, fp, key, key, slotKey)
}

// RedisKeyFrom is redisKeyTagged with the tag taken from tagKey rather
// than key: a path's levels all take their root's (see pathKeys), so they
// share one Cluster slot.
func RedisKeyFrom(prefix, fp, tagKey, key string, slotKey []byte) string {
	nm := naming{prefix: prefix, slotKey: slotKey}
	return nm.name(fp, tagKey, key)
}

// naming is what a store's names start with and how their tags are
// hashed: WithPrefix and WithSlotKey (nil for the unkeyed tag). A store
// keeps its own (Store.names), so that RKey passes a pointer, not the
// five words of the two: its call cost a lone decision code lines from
// cold (clientcost -cold).
type naming struct {
	prefix  string
	slotKey []byte
}

// name is RedisKeyFrom under nm.
func (nm *naming) name(fp, tagKey, key string) string {
	var sum uint32
	if nm.slotKey != nil {
		sum = keyedTag(nm.slotKey, tagKey)
	} else {
		sum = 2166136261 // FNV-1a, inline so it stays off the heap
		for i := 0; i < len(tagKey); i++ {
			sum ^= uint32(tagKey[i])
			sum *= 16777619
		}
	}
	if len(key) > MaxVerbatimKey || len(key) > 0 && key[0] == '#' {
		return digestedName(nm.prefix, fp, sum, key)
	}
	// The runtime's concatenation, one call: the same code every Go
	// program runs hot, where a buffer built here was 13 code lines of
	// the limiter's own that a lone decision missed from cold
	// (clientcost -cold).
	tag := tagOf(sum)
	return nm.prefix + "{" + string(tag[:]) + "}" + fp + ":" + key
}

const hexDigits = "0123456789abcdef"

// tagOf is sum as the four hex digits of a key's hash tag.
func tagOf(sum uint32) [4]byte {
	var tag [4]byte
	for i := range tag {
		tag[3-i] = hexDigits[sum&0xf]
		sum >>= 4
	}
	return tag
}

// keyedTag is the tag's hash of tagKey under WithSlotKey's key: out of
// redisKeyFrom's line, as it is rare.
func keyedTag(slotKey []byte, tagKey string) uint32 {
	m := hmac.New(sha256.New, slotKey)
	m.Write([]byte(tagKey))
	return binary.BigEndian.Uint32(m.Sum(nil))
}

// digestedName is redisKeyFrom for a key stored as its digest (longer than
// maxVerbatimKey, or starting with '#'): out of line, as it is rare.
func digestedName(prefix, fp string, sum uint32, key string) string {
	tag := tagOf(sum) // here, not in the caller: a lone decision's code
	d := sha256.Sum256([]byte(key))
	var b strings.Builder
	b.Grow(len(prefix) + 6 + len(fp) + 2 + 32)
	b.WriteString(prefix)
	b.WriteByte('{')
	b.Write(tag[:])
	b.WriteByte('}')
	b.WriteString(fp)
	b.WriteString(":#")
	b.WriteString(hex.EncodeToString(d[:16]))
	return b.String()
}

// MarkerKey builds the name of the marker that records reservation id of
// the bucket rkey (built by redisKey with prefix and fp) as settled:
//
//	<prefix>{<tag>}<fingerprint>~<id>
//
// It shares the bucket's hash tag, so the settle script's two keys are in
// one Cluster slot, and it cannot name a bucket: a bucket's name has ':'
// right after the fixed-length fingerprint.
func MarkerKey(rkey, prefix, fp, id string) string {
	return rkey[:len(prefix)+6+len(fp)] + "~" + id
}

// overridesKeys returns the Redis keys of the overrides set named set: its
// hash, <prefix>{ovr:<set>}; its version counter, bumped by every change
// in the same script call; its epoch, new with each history of the set;
// and its last write's id (see overrides_load.lua). One hash tag: one
// Cluster slot. No expiry: no volatile-* policy evicts them.
func (s *Store) overridesKeys(set string) []string {
	base := s.cfg.Prefix + "{ovr:" + set + "}"
	return []string{base, base + "v", base + "e", base + "w"}
}

// fleetKey returns the name of the sorted set of members of the fleet
// called name (see WithFleet): <prefix>{fleet:<name>}. No expiry, so no
// volatile-* policy evicts it; a member silent for three heartbeats is
// dropped by the next.
func (s *Store) fleetKey(name string) string {
	return s.cfg.Prefix + "{fleet:" + name + "}"
}

// RKey builds the stored name of key's bucket under plan fp, with the
// store's tag (keyed, with WithSlotKey).
func (s *Store) RKey(fp, key string) string {
	return s.names.name(fp, key, key)
}

// HoldsKey builds the name of the hash of rkey's lease holds and their
// sums (see lease.lua):
//
//	<prefix>{<tag>}<fingerprint>~h2:<key>
//
// In the bucket's hash tag, and never a bucket's name (a bucket has ':'
// right after the fixed-length fingerprint) nor a marker's (see markerKey).
// The "2" is the layout's: releases before it kept a hash of holds alone
// under "~h:", which this layout's script does not read.
func HoldsKey(rkey, prefix, fp string) string {
	at := len(prefix) + 6 + len(fp)
	return rkey[:at] + "~h2" + rkey[at:]
}

// EndsKey builds the name of the sorted set of the ends of rkey's lease
// holds (see lease.lua):
//
//	<prefix>{<tag>}<fingerprint>~e:<key>
//
// In the bucket's hash tag, and never a bucket's, a marker's or a holds'
// name.
func EndsKey(rkey, prefix, fp string) string {
	at := len(prefix) + 6 + len(fp)
	return rkey[:at] + "~e" + rkey[at:]
}

// epochKey builds the name of the epoch of rkey's hash tag (see epoch in
// leases.lua), which the concurrency scripts read when the server will
// not tell them of a restart:
//
//	<prefix>{<tag>}~epoch
//
// In the lease set's slot, and never a bucket's, a marker's or a holds'
// name: those have the fixed-length fingerprint right after the tag. No
// expiry, so no volatile-* policy evicts it; it goes with the server's
// data, which is what it is there to tell.
func epochKey(rkey, prefix string) string {
	return rkey[:len(prefix)+6] + "~epoch"
}
