package redistest

import (
	"bytes"
	"runtime"
	"time"
)

// drainTimeout bounds how long a closed client's cleanup waits for
// go-redis's background goroutines.
const drainTimeout = 3 * time.Second

// goRedisBackground names the go-redis goroutines that outlive a client's
// Close for a while: a pool re-dialing a dead node sleeps a second between
// attempts and notices the Close only then, and a cluster client's slot-map
// reload pauses 200ms before it ends.
var goRedisBackground = [][]byte{
	[]byte("go-redis/v9/internal/pool.(*ConnPool).tryDial"),
	[]byte("go-redis/v9.(*clusterStateHolder).LazyReload"),
}

// Drain waits, up to 3 seconds, until the background goroutines of closed
// go-redis clients have ended: a pool that was re-dialing a dead server
// notices its Close only after its next one-second sleep. Call it after
// closing the clients of a test that killed their server, so that a
// goroutine leak check does not trip over them.
func Drain() { drainGoRedis() }

// drainGoRedis waits until no goroutine runs one of goRedisBackground, or
// until drainTimeout has passed, so that a goroutine leak check at the end of
// the tests does not trip over a client that has been closed but whose
// helpers have not noticed yet. It cannot tell whose goroutines they are, so
// with clients of other tests still open it may wait the full timeout.
func drainGoRedis() {
	deadline := time.Now().Add(drainTimeout)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		busy := false
		for _, f := range goRedisBackground {
			if bytes.Contains(buf[:n], f) {
				busy = true
				break
			}
		}
		if !busy || time.Now().After(deadline) {
			return
		}
		<-tick.C
	}
}
