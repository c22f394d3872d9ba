// Package replay replays recorded traffic through sluice's own
// arithmetic, to see what a limit would have done before it ships: how
// many requests it admits and denies, which keys it denies most, and the
// smallest limit that would have denied at most a given share. The
// command `sluice simulate` is its front end; docs/replay.md walks
// through it.
//
// # The engine it replays through
//
// [Replay] decides events on a [core.NewMemory] limiter whose clock reads
// each event's time: the Go model of the Redis scripts, which the
// differential tests hold equal to them step by step, with paths of keys
// ([core.PathRule]), calendar and interval refills, penalty locks and
// charging by status. No arithmetic of its own, so what it says is what
// the engine does. A recording replayed under the limits that were in
// force decides every event as it was decided, when the events carry the
// instant the engine decided at ([core.Result.Time], Redis's clock for a
// decision of Redis) and are in the order [Sort] puts them in.
//
// # The log format
//
// One JSON object a line (JSON Lines); blank lines and lines starting
// with # are skipped:
//
//	{"time":"2026-11-28T22:00:00.000001Z","key":"tenant:acme","cost":1,"status":200,"allowed":true}
//	{"time":"2026-11-28T22:00:00.250000Z","path":["acme","alice"],"allowed":false,"status":429}
//
// time (required) is the decision's instant in RFC 3339, to the
// microsecond (finer digits are dropped); key, or path (a path's keys,
// root first), names what was decided; cost defaults to 1; status, the
// response's HTTP status, may be left out when not known; allowed, the
// decision the request got, may be left out too (a replay then has
// nothing to compare with). Other fields are ignored. [ParseLine] reads
// one line, [AppendLine] writes one, [Read] reads a log and reports each
// bad line with its number, skipping it.
//
// # Recording
//
// A [Recorder] writes the format from a middleware (policy.WithRecord, in
// every adapter), for a sample of keys chosen by a hash of the key: a
// key's requests are recorded all or none, since a bucket replayed from
// part of its requests would admit what the whole traffic denied.
//
// # The limits file
//
// [ParseRules] reads the rules to replay under, one a line: a name, key
// or path, the limits as [core.ParseLimit] reads them (several separated
// by ";"; a path's levels as name=limits, root first, separated by ">"),
// then options after "|": penalty <duration>, charge-if <statuses>,
// match <key prefix>.
package replay
