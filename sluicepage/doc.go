// Package sluicepage is a page an operator opens to see a limiter at
// work: the limits, the heaviest keys of each (top talkers), the keys
// that crossed a warning threshold, the store's health, the fleet's size
// and the overrides in force, refreshing live.
//
// It is a handler, mounted as net/http/pprof is mounted, and like pprof
// it checks no credentials: mount it behind your own authentication. It
// shows keys (tenants, users, addresses), limit names and store errors to
// whoever reaches it, and refuses no one the handler in front of it lets
// through:
//
//	src, err := sluicepage.ForLimiter(lim,
//		sluicepage.ShowLimits("api", core.PerMinute(600)),
//		sluicepage.ShowOverrides(plans))
//	page, err := sluicepage.New(src)
//	mux.Handle("/debug/sluice", requireOperator(page))
//
// The page is one HTML document with its style and script inline; it
// loads nothing from the network (no scripts, fonts or images from
// elsewhere), and its Content-Security-Policy forbids it to. Its script
// polls the same address with the query format=json (the refresh
// interval is [WithRefresh]) and writes what it reads into the page as
// text, never as HTML, so a key such as "<script>" shows as itself.
//
// What the page shows comes from a [Source]. [LimiterSource] reads a
// [core.Limiter] (see [ForLimiter]): top talkers if the limiter keeps
// them ([core.WithTopTalkers]), and the threshold events a [Warnings]
// recorded on this replica ([ShowWarnings]). A section it cannot fill,
// such as top talkers on a limiter that keeps none, shows "not enabled"
// ([ErrNotEnabled]).
package sluicepage
