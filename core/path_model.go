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
	return stepPathShare(bs, now, levels, cost, maxWait, penalty, nil, nil, nil)
}

// stepPathShare is stepPath with a shared level (see path_share_model.go):
// with g, the child is counted as asking in the records p and c first;
// the shared level's bucket, when it admits, is then judged by the gate
// too, whose denial is a denial of that level that never locks (the
// penalty is for a bucket's own denials); when every level admits, the
// child's cost is counted. The decision's Reason is the gate's, if it
// decided.
func stepPathShare(bs []*bucket, now int64, levels [][]tickLimit, cost, maxWait, penalty int64, g *shareGate, p *fairParent, c *fairChild) (decision, int, []bool) {
	n := len(levels)
	if g != nil && g.Fair {
		shareRoll(p, c, now, g)
	}
	trial := make([]bucket, n)
	ds := make([]decision, n)
	allAdmit := true
	deciding := -1
	var maxWaitUS, maxNext int64
	for i := range levels {
		var d decision
		trial[i], d = judgeLevel(bs[i], now, levels[i], cost, maxWait)
		if g != nil && i == g.Level {
			d = gateShare(bs[i], d, levels[i][0], now, cost, g, p, c)
		}
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
		if g != nil && g.Fair && cost > 0 {
			shareCharge(p, c, cost)
		}
		d := ds[deciding]
		d.Wait, d.Next = maxWaitUS, maxNext
		return d, deciding, wrote
	}
	d := ds[deciding]
	if penalty > 0 && !d.Locked && d.Reason == reasonBucket {
		// Judged again on the real bucket, with the penalty: the same
		// denial, which now locks the key.
		d, wrote[deciding] = stepBucket(bs[deciding], now, levels[deciding], cost, maxWait, penalty)
	}
	return d, deciding, wrote
}

// judgeLevel judges one level of a path alone, as stepBucket would, on a
// copy of its bucket b: the copy, charged if admitted, and the decision.
func judgeLevel(b *bucket, now int64, ticks []tickLimit, cost, maxWait int64) (bucket, decision) {
	trial := *b
	trial.tats = append([]tat(nil), b.tats...)
	d, _ := stepBucket(&trial, now, ticks, cost, maxWait, 0)
	return trial, d
}
