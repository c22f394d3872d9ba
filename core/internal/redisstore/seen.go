package redisstore

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// serversSeen is what the Redis store knows of the server behind each of
// its nodes, from the lease scripts' replies and from INFO: the lease
// scripts compare it with what they read, to notice a restart or a
// failover (see acquire.lua).
type serversSeen struct {
	mu      sync.Mutex
	servers map[*node]serverSeen
	epochs  map[string]int64 // a tag's epoch key -> its epoch, when the scripts are blind (see epoch in leases.lua)

	foreignLogged atomic.Bool // a lease set of another type was logged (see foreignLease)
}

// serverSeen is what a limiter knows of the server process behind a node:
// its LASTSAVE when last read (the second it started, or its last save),
// which process it is (from its run_id), its replication history (from
// master_replid: see history() in leases.lua), on a Cluster its node id,
// and, if the limiter saw it
// replace another, since when (ms on its clock): its start after a
// restart, or, for a server that had run longer than a lease (a failover
// to a replica, a restart that loaded a file), the moment the change was
// noticed. A key's lease set within a lease of then may lack holders the
// server never heard of (see acquire.lua).
type serverSeen struct{ lastsave, run, restart, replid, myid int64 }

// server returns what the keeper knows of nd's server.
func (k *serversSeen) server(nd *node) serverSeen {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.servers[nd]
}

// histories appends to args the replication histories of the servers the
// keeper knows on nodes other than nd: a server on nd whose previous
// history is one of them was promoted from that node's replica (a Cluster
// failover; see acquire.lua).
func (k *serversSeen) histories(nd *node, args []any) []any {
	k.mu.Lock()
	defer k.mu.Unlock()
	for other, s := range k.servers {
		if other != nd && s.replid != 0 {
			args = append(args, s.replid)
		}
	}
	return args
}

// saw records what a lease script or an INFO reply read of nd's server
// (zero fields: not read). With replaced, the server replaced one the
// limiter knew, since got.restart; a new process behind a known one
// replaced it since its start (the acquire script's verdict, which knows
// the lease, comes with replaced).
func (k *serversSeen) saw(nd *node, got serverSeen, replaced bool) {
	if got.lastsave == 0 && got.run == 0 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.servers == nil {
		k.servers = make(map[*node]serverSeen)
	}
	s := k.servers[nd]
	if got.lastsave != 0 {
		s.lastsave = got.lastsave
	}
	if replaced || (got.run != 0 && s.run != 0 && got.run != s.run) {
		s.restart = got.restart
	}
	if got.run != 0 {
		s.run = got.run
	}
	if got.replid != 0 {
		s.replid = got.replid
	}
	if got.myid != 0 {
		s.myid = got.myid
	}
	k.servers[nd] = s
}

// seed records what an INFO reply of nd's server says of it, as the
// acquire script would have (see saw): its LASTSAVE (rdb_last_save_time),
// which process it is (run_id), and its replication history
// (master_replid).
func (k *serversSeen) seed(nd *node, info string) {
	save, _ := strconv.ParseInt(InfoField(info, "rdb_last_save_time"), 10, 64)
	run := hexPrefix(InfoField(info, "run_id"))
	up, _ := strconv.ParseInt(InfoField(info, "uptime_in_seconds"), 10, 64)
	if run == 0 {
		return
	}
	k.saw(nd, serverSeen{lastsave: save, run: run, restart: time.Now().UnixMilli() - up*1000, replid: hexPrefix(InfoField(info, "master_replid"))}, false)
}

// hexPrefix is the number of id's first 13 hex digits, as the lease
// scripts read run_id and master_replid (0 for none).
func hexPrefix(id string) int64 {
	n, _ := strconv.ParseInt(id[:min(13, len(id))], 16, 64)
	return n
}

// maxEpochs bounds the tags whose epoch a store remembers. Past it, a
// tag met for the first time is not remembered: the scripts take it as
// first contact, as for a server never met, and cannot tell a loss of its
// data. (The tags number 65,536: four hex digits.)
const maxEpochs = 1 << 16

// epoch returns the epoch known for the tag of epoch key ekey; 0 for none.
func (k *serversSeen) epoch(ekey string) int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.epochs[ekey]
}

// sawEpoch records the epoch a blind script read for ekey's tag.
func (k *serversSeen) sawEpoch(ekey string, e int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.epochs == nil {
		k.epochs = make(map[string]int64)
	}
	if _, ok := k.epochs[ekey]; ok || len(k.epochs) < maxEpochs {
		k.epochs[ekey] = e
	}
}
