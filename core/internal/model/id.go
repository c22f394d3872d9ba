package model

import (
	"crypto/rand"
	"encoding/hex"
)

// NewID returns 32 random hex digits (128 bits), the one kind of id the
// library writes: a concurrency lease's member, a reservation's marker,
// a token lease's hold, a fleet member, an overrides write. Two live ids
// never meet.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}
