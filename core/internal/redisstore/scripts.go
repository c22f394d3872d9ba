package redisstore

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The scripts other than the bucket's (bucket.lua, settle.lua), one .lua
// file per operation, each described at its top. Those that keep leases
// and heartbeats start with the shared prelude clock.lua, which reads the
// server's clock; the lease scripts then with leases.lua, which tidies a
// lease set. Each runs by EVALSHA, and by EVAL after NOSCRIPT (see
// store.go's runOp and sendOps).
var (
	//go:embed clock.lua
	clockLua string
	//go:embed leases.lua
	leasesLua string
	//go:embed acquire.lua
	acquireLua string
	//go:embed renew.lua
	renewLua string
	//go:embed release.lua
	releaseLua string
	//go:embed fleet.lua
	fleetLua string
	//go:embed fleet_leave.lua
	fleetLeaveLua string
	//go:embed reset.lua
	resetLua string
	//go:embed lock.lua
	lockLua string
	//go:embed ready.lua
	readyLua string
	//go:embed overrides_set.lua
	overridesSetLua string
	//go:embed overrides_remove.lua
	overridesRemoveLua string
	//go:embed overrides_load.lua
	overridesLoadLua string
)

var (
	acquireScript        = redis.NewScript(clockLua + leasesLua + acquireLua)
	renewScript          = redis.NewScript(clockLua + leasesLua + renewLua)
	releaseScript        = redis.NewScript(clockLua + leasesLua + releaseLua)
	fleetScript          = redis.NewScript(clockLua + fleetLua)
	fleetLeaveScript     = redis.NewScript(fleetLeaveLua)
	ResetScript          = redis.NewScript(resetLua)
	lockScript           = redis.NewScript(lockLua)
	readyScript          = redis.NewScript(readyLua)
	overrideSetScript    = redis.NewScript(overridesSetLua)
	overrideRemoveScript = redis.NewScript(overridesRemoveLua)
	overrideLoadScript   = redis.NewScript(overridesLoadLua)
)

// scriptSources are the sources of every script the limiter runs, which
// Ready loads on each node (SCRIPT LOAD) so that no decision after it pays
// EVAL's second round trip. (Not redis.Script.Load: on a pipeline it would
// record the empty reply of a command not yet sent as the script's hash.)
func scriptSources() []string {
	return []string{BucketLua, SettleLua, clockLua + leasesLua + acquireLua, clockLua + leasesLua + renewLua, clockLua + leasesLua + releaseLua,
		clockLua + fleetLua, fleetLeaveLua, resetLua, lockLua, overridesSetLua, overridesRemoveLua, overridesLoadLua, foreignLua, leaseLua, PathLua, clockLua + inflightLua, topFlushLua, topReadLua, warnLua}
}

//go:embed foreign.lua
var foreignLua string

// foreignScript deletes a value of another type where a bucket belongs
// (see replaceForeign).
var foreignScript = redis.NewScript(foreignLua)

//go:embed lease.lua
var leaseSrc string

// leaseLua is lease.lua as Redis runs it (see expandLua).
var leaseLua = expandLua("lease.lua", leaseSrc)

// LeaseScript takes and gives back token leases (see the layout table at
// the top of core/internal/redisstore/lease.lua).
var LeaseScript = redis.NewScript(leaseLua)
