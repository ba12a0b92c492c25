package placement

import "hash/fnv"

// Owner picks the owner of a policy key among candidate agents by
// rendezvous (highest random weight) hashing [Thaler & Ravishankar, "Using
// name-based mappings to increase hit rates", IEEE/ACM ToN 1998]: every
// candidate gets a weight hash(key, candidate) and the highest wins (ties,
// which need a 64-bit collision, go to the smaller name). Every agent that
// sees the same candidates picks the same owner, with no coordination, and
// when a candidate joins or leaves only the keys it wins or held move.
// It returns "" for no candidates. The hash is FNV-1a finished with the
// SplitMix64 mixer: stable across processes, versions and platforms.
func Owner(key string, candidates []string) string {
	best, bestW := -1, uint64(0)
	for i, c := range candidates {
		w := OwnerWeight(key, c)
		if best < 0 || w > bestW || (w == bestW && c < candidates[best]) {
			best, bestW = i, w
		}
	}
	if best < 0 {
		return ""
	}
	return candidates[best]
}

// OwnerWeight is the rendezvous weight of candidate for key.
func OwnerWeight(key, candidate string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	h.Write([]byte{0})
	h.Write([]byte(candidate))
	return mix64(h.Sum64())
}

// mix64 is the SplitMix64 finaliser (Steele, Lea & Flood, "Fast splittable
// pseudorandom number generators", OOPSLA 2014).
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// tieBreak is a node's seeded tie-break rank.
func tieBreak(seed uint64, id string) uint64 { return tieBreakHash(seed, fnv64(id)) }

func tieBreakHash(seed, idHash uint64) uint64 {
	return mix64(idHash ^ mix64(seed+0x9e3779b97f4a7c15))
}

func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}
