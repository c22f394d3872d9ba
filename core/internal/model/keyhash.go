package model

// KeyHash is the 64-bit hash a key is known by where only its hash is
// kept: the top-talkers sketches count keys under it (replicas' sketches
// merge by it), and a recorder samples keys by it (core/replay), the same
// key in or out on every replica and after restarts. It is FNV-1a, its
// bits then spread by SplitMix64's finalizer, so that every bit depends
// on every byte (keys differing in one byte do not show as hashes
// differing in one digit). It is the same in every process and not
// secret: it names a key without showing it, and anyone can hash a key
// they suspect to find it.
func KeyHash(key string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	return h ^ h>>31
}
