// Package redistest gives tests a real Redis to talk to, and ways to break it.
//
// It is a test kit for sluice and for programs that use sluice. Nothing in it
// belongs on a request path. Benchmark harnesses and demo programs, which
// have no testing.TB, use its TB-free forms [Launch] and [ListenProxy].
//
// # Real Redis
//
// [Start] runs a private redis-server (or valkey-server: see "Which server")
// as a child process on a free
// loopback port, with its own temporary directory and no persistence, and
// stops it when the test ends. The returned [Server] can be killed with
// SIGKILL ([Server.Kill]), stopped gracefully ([Server.Stop]) and started
// again on the same address ([Server.Restart]), so a test can watch its code
// survive a Redis outage.
//
// When no server binary is found, [Start] skips the test on a developer's
// machine and fails it under CI (the environment variable CI is "true" or
// "1"):
//
//	redistest: redis-server or valkey-server not found on PATH (executable file not found in $PATH); CI requires a real Redis
//
// [Launch] is Start without a testing.TB: it takes the arguments in
// [ServerOptions], along with a command to run redis-server under (such as
// taskset -c 0, or valgrind) and timeouts; it returns an error instead of
// skipping or failing, also under CI; and the caller must call
// [Server.Close], which also removes the server's directory.
// [Server.Relaunch] is Restart returning an error.
//
// [Addr] prefers a caller-managed Redis named by the environment variable
// REDIS_ADDR, and starts a private server only when it is unset. Tests that
// use [Addr] must treat that Redis as shared: no FLUSHALL, no SHUTDOWN, no
// CONFIG SET, and keys that cannot collide with other users.
//
// # Which server
//
// Without configuration the kit runs redis-server from PATH, or
// valkey-server when there is no redis-server, and the client that goes
// with it (redis-cli or valkey-cli) for [StartCluster]. Two environment
// variables choose instead, to run the same tests on another server:
//
//	SLUICE_REDIS_SERVER  the server: a path, or a name looked up on PATH
//	                     (valkey-server, /opt/redis-8/bin/redis-server)
//	SLUICE_REDIS_CLI     its client; by default the server's name with
//	                     -server replaced by -cli, beside the server when
//	                     SLUICE_REDIS_SERVER is a path, else on PATH
//
// For example:
//
//	SLUICE_REDIS_SERVER=valkey-server go test ./core ./redistest
//
// A binary named by either variable that is not there fails the test even
// outside CI: a run meant for one server must not pass on another, or skip
// unseen. [Launch] finds its binary the same way. [Addr] with REDIS_ADDR
// set uses no binary at all.
//
// # Cluster and Sentinel
//
// [StartCluster] runs a Redis Cluster of three masters with one replica each
// (six redis-server processes, created with redis-cli --cluster create), and
// [StartSentinel] runs a master, its replica and three sentinels. Both need
// the server (and the cluster its client, redis-cli or valkey-cli), with the
// same skipping and failing rules as [Start]. Both return once the topology is ready, and
// offer go-redis clients configured for sluice ([Cluster.Client],
// [Sentinel.Client]) and the faults that matter: [Cluster.KillMaster] and
// [Cluster.WaitHealthy] for a failover, [Cluster.MoveSlots] for resharding
// under traffic, and [Sentinel.Failover] for a sentinel-driven failover.
// [Slot] computes a key's hash slot.
//
// # A Redis that fails
//
// [Failing] starts an in-process server that answers every command with one
// error reply of the test's choosing, such as LOADING or READONLY: a Redis
// that is up but cannot serve, for tests and examples that need no
// redis-server binary. It speaks just enough RESP for that, and stores
// nothing.
//
// # Faults
//
// A [Proxy] sits between a client and any Redis address and can add latency
// to replies ([Proxy.SetDelay]), swallow all traffic like a hung server
// ([Proxy.SetBlackhole]), reset every connection ([Proxy.SetRefuse]), or
// vanish like a crashed server, resetting connections and refusing new ones
// ([Proxy.SetDown]). [NewProxy] starts one for a test, [ListenProxy] for
// any other program, which must close it.
//
// # Measuring
//
// [NewClient] returns a go-redis client with short timeouts and no retries,
// so failures show up at once. [CommandCalls] reads the per-command call
// counts from INFO commandstats, to count the commands one decision costs.
//
// # Goroutines and processes
//
// Every helper that takes a testing.TB registers its own cleanup with
// testing.TB.Cleanup; a Server from [Launch] and a Proxy from
// [ListenProxy] are the caller's to close. The
// cleanup of a client from [Cluster.Client] or [Sentinel.Client] waits up
// to a few seconds for go-redis's background goroutines to end. A [Proxy]
// owns goroutines only until [Proxy.Close] returns, and a server from
// [Failing] only until its cleanup has run. A [Server] owns one
// goroutine per running redis-server process, which waits for the process
// and exits with it; the process is always reaped, so no zombies remain.
// On Linux, a redis-server child is also killed if the test binary (or
// the program that called Launch) dies without running its cleanups, for
// example after a -timeout panic.
package redistest
