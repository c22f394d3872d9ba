package core

// This file is a path's arithmetic in Go: the model core/internal/redisstore/path.lua is
// tested against, and what the in-memory store and the local fallback run
// for a path (see localStore.takePath).

// stepPath decides one request of cost at now on a path whose level i has
// bucket bs[i] under limits levels[i], all or nothing: each level is
// judged as stepBucket would judge it alone; when every level admits,
// every bucket is charged; when any denies (or is locked), none is, and a
// penalty locks only the deciding level. It returns the decision (that of
// the deciding level, with an admission's wait and next the longest of the
// levels'), the deciding level and which buckets changed.
//
// The deciding level is, of the levels that deny, the one with the
// longest retry (the first of equals), and when all admit, the one with
// the fewest requests left (the first of equals), as core/internal/redisstore/path.lua's
// reply says.
func stepPath(bs []*bucket, now int64, levels [][]tickLimit, cost, maxWait, penalty int64) (decision, int, []bool) {
	n := len(levels)
	trial := make([]bucket, n)
	ds := make([]decision, n)
	allAdmit := true
	deciding := -1
	var maxWaitUS, maxNext int64
	for i := range levels {
		b := *bs[i]
		b.tats = append([]tat(nil), bs[i].tats...)
		trial[i] = b
		d, _ := stepBucket(&trial[i], now, levels[i], cost, maxWait, 0)
		ds[i] = d
		take := false
		if d.Allowed {
			maxWaitUS, maxNext = max(maxWaitUS, d.Wait), max(maxNext, d.Next)
			take = allAdmit && (deciding < 0 || d.Remaining < ds[deciding].Remaining)
		} else {
			take = allAdmit || d.Retry > ds[deciding].Retry
			allAdmit = false
		}
		if take {
			deciding = i
		}
	}
	wrote := make([]bool, n)
	if allAdmit {
		for i := range levels {
			if cost > 0 {
				*bs[i] = trial[i]
				wrote[i] = true
			}
		}
		d := ds[deciding]
		d.Wait, d.Next = maxWaitUS, maxNext
		return d, deciding, wrote
	}
	d := ds[deciding]
	if penalty > 0 && !d.Locked {
		// Judged again on the real bucket, with the penalty: the same
		// denial, which now locks the key.
		d, wrote[deciding] = stepBucket(bs[deciding], now, levels[deciding], cost, maxWait, penalty)
	}
	return d, deciding, wrote
}
