package redisstore

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/internal/batch"
	"github.com/sluicehq/sluice/internal/storeops"
)

// node is one failure domain of the store: a Redis server, a Cluster
// master or a Ring shard, with the breaker that judges it and the batchers
// that coalesce its decisions and its settlements. An error is charged only
// to the node whose I/O produced it, and a batch never spans nodes.
type node struct {
	brk    *breaker
	batch  *batch.Batcher[*Query, decision]       // nil: one script call per decision
	settle *batch.Batcher[*SettleQuery, bool]     // nil: one script call per settlement (see Reservation.settle)
	ops    *batch.Batcher[*op, []int64]           // nil: one script call per op (see runOp)
	paths  *batch.Batcher[*PathQuery, PathAnswer] // nil: one script call per path (see submitPath)
	client *redis.Client                          // the node's own connection pool, for WAIT; nil if unknown
	short  atomic.Bool                            // the last WAIT on this node fell short (see replicaAck)
	probed atomic.Int64                           // unix nanoseconds of the last WAIT sent while short
	policy atomic.Bool                            // its eviction policy was read, or is being read (see readPolicy)
	warm   warmState                              // background warm-ups of client's pools (see rewarm)
	lane   *lane                                  // the store's own connections to it (WithOwnConnections); nil for none
}

// Store decides in Redis through the bucket script. On a single
// server (or a Sentinel-managed one) it is one node. On a Cluster each
// master is a node with its own breaker and batcher, found from go-redis's
// cached slot map; on a Ring each shard has its own batcher and they share
// one breaker.
type Store struct {
	rdb       redis.Scripter
	proc      processor                                                     // rdb's, found once; nil if it has none (see runInts)
	timerless bool                                                          // the client bounds every wait by the budget (see boundsWaits)
	detached  bool                                                          // the client ignores the budget: calls run apart (see submitDetached)
	lean      bool                                                          // a lone plain decision takes Decide's own line: timerless, batching, with a processor, a budget and no WAIT (on a node with a batcher)
	whole     node                                                          // the whole store; on a Cluster, keys whose master is unknown
	nodeOf    func(ctx context.Context, rkey string) (*redis.Client, error) // nil: the store is one node
	nodes     sync.Map                                                      // *redis.Client -> *node
	mkNode    func(c *redis.Client) *node
	reload    func()       // asks the client to reload its slot map; nil when it has none
	reloaded  atomic.Int64 // unix nanoseconds of the last reload asked for
	ack       *replicaAck  // WAIT after every script call; nil for none (see WithReplicaAck)
	cfg       Config       // names, budget and batching, as the limiter was given them
	names     naming       // cfg.Prefix and cfg.SlotKey (see RKey)
	up        Up           // what the engine hears; the store calls nothing else above it

	openNodes     atomic.Int32 // nodes whose breaker is open
	lastSweep     atomic.Int64 // microsecond of the last look for nodes to retire (see maybeSweep)
	keyLog                     // keys whose own failures were logged (see keyFailed)
	seen          serversSeen  // what the scripts and INFO told of each node's server (see serverSeen)
	quota         quotaBook    // what this store admitted in each stepped key, to re-assert after a loss (see quota.go)
	bg            background   // the store's background tasks (warm-ups, policy reads), stopped by close
	persistWarned sync.Map     // node name -> true: Ready said it keeps no append-only file (see notePersistence)
}

// Config is what the Redis store is given of the limiter's options.
type Config struct {
	Prefix   string        // WithPrefix: the start of every stored name
	SlotKey  []byte        // WithSlotKey; nil for the unkeyed hash tag
	Budget   time.Duration // WithTimeout: each call's I/O budget
	Inflight int           // WithBatching: batches in flight per node; 0: no batching
	Now      func() int64  // the limiter's clock, microseconds
	Ack      AckConfig     // core.WithReplicaAck
	Breaker  Breaker       // core.WithBreaker
	OwnConns bool          // core.WithOwnConnections: decisions sent alone, and a single server's batches, on connections of the store's own (see lane)
}

// Breaker sets each node's circuit breaker (core.WithBreaker): it opens
// after Failures failures in a row, lets a probe through every Probe while
// open, and closes after Successes answers in a row.
type Breaker struct {
	Failures, Successes int
	Probe               time.Duration
}

// Observer is the part of core.Observer the store tells: its calls,
// and each node's outages.
type Observer interface {
	ObserveStore(call Call)
	ObserveDegraded(outage Outage)
	ObserveRecovered(outage Outage)
}

// Up is all the Redis store tells the engine above it, handed down
// when the limiter is built: calls go down, and only these come up.
type Up struct {
	Obs  Observer            // nil: none
	Log  func() *slog.Logger // the limiter's logger
	Note func() []any        // the engine's words for an outage's log line (its failure policy, its fleet); may be nil
}

// callerGone is storeops.CallerGone: the caller's context error, also
// when its deadline has passed but its timer has not fired yet.
func callerGone(ctx context.Context) error { return storeops.CallerGone(ctx) }

// Close stops the store's background tasks and waits for them, and
// closes its own connections (see lane).
func (s *Store) Close() {
	s.bg.Stop()
	s.whole.lane.close()
	s.nodes.Range(func(_, v any) bool {
		v.(*node).lane.close()
		return true
	})
}

// laneOf returns the lane of the node whose client is c; nil for none.
func (s *Store) laneOf(c *redis.Client) *lane {
	if s.nodeOf == nil {
		return s.whole.lane
	}
	if n, ok := s.nodes.Load(c); ok {
		return n.(*node).lane
	}
	n, _ := s.nodes.LoadOrStore(c, s.mkNode(c))
	return n.(*node).lane
}

// newLane returns the lane of the node whose client is c when the
// limiter was asked for its own connections (see lane): as many as the
// node has round trips in flight (WithBatching), at least 4.
func (s *Store) newLane(c *redis.Client) *lane {
	if !s.cfg.OwnConns {
		return nil
	}
	return newLane(c, max(s.cfg.Inflight, 4))
}

// ownerOf returns the master that owns rkey now, as the key of s.nodes,
// and its address; ok is false when the client cannot say.
func (s *Store) ownerOf(ctx context.Context, rkey string) (owner any, addr string, ok bool) {
	c, err := s.nodeOf(ctx, rkey)
	if err != nil || c == nil {
		return nil, "", false
	}
	return c, c.Options().Addr, true
}

// visible reports whether the limiter can see into nd's client (see
// readPolicy); nodes of other redis.Scripter types it cannot.
func (nd *node) visible() bool { return nd.client != nil }

// info reads nd's INFO, default sections (see readPolicy).
func (nd *node) info(ctx context.Context) (string, error) {
	return nd.client.Info(ctx).Result()
}

// reloadEvery bounds how often a failing node makes the store ask for a
// fresh slot map. go-redis reloads in the background and coalesces.
const reloadEvery = 100 * time.Millisecond

// failed is told of every store failure on a node. On a Cluster it asks
// go-redis to reload its slot map (at most every reloadEvery): a failed
// master's slots move to a replica, and with go-redis's default reload
// interval (60 s) the client would keep sending them to the dead address.
// Its breaker's probes keep failing until the map moves on, so the map is
// fresh within about reloadEvery of the failover.
func (s *Store) failed() {
	if s.reload == nil {
		return
	}
	now := time.Now().UnixNano()
	last := s.reloaded.Load()
	if now-last < int64(reloadEvery) || !s.reloaded.CompareAndSwap(last, now) {
		return
	}
	s.reload()
}

// New returns the store of the limiter on rdb: one breaker for rdb's
// node, or per master or shard of a Cluster or Ring, set by cfg.Breaker.
func New(rdb redis.Scripter, cfg Config, up Up) *Store {
	probe := ceilMicros(cfg.Breaker.Probe)
	brk := &breaker{
		threshold:  int32(cfg.Breaker.Failures),
		closeAfter: int32(cfg.Breaker.Successes),
		cooldown:   probe,
		stale:      probe + 2*max(ceilMicros(cfg.Budget), 1_000_000),
		node:       nodeName(rdb),
	}
	return newRedisStore(rdb, brk, cfg, up)
}

// ceilMicros is d in whole microseconds, rounded up; 0 for d <= 0.
func ceilMicros(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// newRedisStore builds the store for rdb; brk is the template of its
// breakers (one per Cluster master), which the store keeps for its
// whole or its one node.
func newRedisStore(rdb redis.Scripter, brk *breaker, cfg Config, up Up) *Store {
	budget := cfg.Budget
	if cfg.Now == nil {
		epoch := time.Now()
		cfg.Now = func() int64 { return epoch.UnixMicro() + int64(time.Since(epoch)/time.Microsecond) }
	}
	if up.Log == nil {
		up.Log = slog.Default
	}
	s := &Store{rdb: rdb, timerless: boundsWaits(rdb, budget), detached: ignoresBudget(rdb, budget), cfg: cfg, up: up}
	s.names = naming{prefix: cfg.Prefix, slotKey: cfg.SlotKey}
	s.proc, _ = rdb.(processor)
	s.whole.brk = brk
	s.ack = newReplicaAck(cfg.Ack, up.Log)
	s.lean = s.timerless && !s.detached && cfg.Inflight > 0 && s.proc != nil && s.ack == nil && budget > 0
	switch c := rdb.(type) {
	case *redis.Client:
		s.whole.client = c
		s.whole.lane = s.newLane(c)
		s.equip(&s.whole, false, c.Pipeline)
	case *redis.ClusterClient:
		// A batch is one node's: it goes through the Cluster client
		// (which follows MOVED and ASK) in a pipeline of its own.
		s.nodeOf = c.MasterForKey
		s.reload = func() { c.ReloadState(context.Background()) }
		s.mkNode = func(m *redis.Client) *node {
			n := &node{brk: brk.clone(m.Options().Addr), client: m, lane: s.newLane(m)}
			s.equip(n, true, c.Pipeline)
			return n
		}
	case *redis.Ring:
		s.nodeOf = func(_ context.Context, rkey string) (*redis.Client, error) { return c.GetShardClientForKey(rkey) }
		s.mkNode = func(m *redis.Client) *node {
			n := &node{brk: brk, client: m, lane: s.newLane(m)} // a Ring's shards share one breaker
			s.equip(n, true, c.Pipeline)
			return n
		}
	}
	return s
}

// equip gives node n its batchers, which send through pipeline; with
// split (a Cluster master or Ring shard) one script call per hash tag.
// Without batching (WithBatching(0), or a client that ignores deadlines)
// it gives none: each call is sent alone.
func (s *Store) equip(n *node, split bool, pipeline func() redis.Pipeliner) {
	if s.cfg.Inflight <= 0 || s.detached {
		return
	}
	// Every batch is timed: the road judges a call by its I/O time (see
	// onNode).
	cfg := batch.Config{Budget: s.cfg.Budget, MaxInflight: s.cfg.Inflight, MaxBatch: maxBatch, Timerless: s.timerless, Timed: true}
	n.batch = batch.New(s.sendDecisions(n, split, pipeline), cfg)
	// Settlements have batchers of their own, with the same limits: they
	// neither take the decisions' slots nor wait behind them. So have
	// paths of keys (see PathRule): path.lua decides many in one call.
	// Every other kind of operation (acquisitions, releases, resets,
	// ...) shares a fourth: its batches are pipelines.
	n.settle = batch.New(s.sendSettles(split, pipeline), cfg)
	n.paths = batch.New(s.sendPaths(split, pipeline), cfg)
	n.ops = batch.New(s.sendOps(pipeline), cfg)
}

// maxBatch bounds the decisions in one script call or pipeline.
const maxBatch = 256

// node returns the node that decides rkey. It is inlined: a client of
// one node (not a Cluster's) finds it without a call.
func (s *Store) node(ctx context.Context, rkey string) *node {
	if s.nodeOf == nil {
		return &s.whole
	}
	return s.nodeFor(ctx, rkey)
}

// nodeFor is node on a Cluster client: the node that owns rkey's slot.
func (s *Store) nodeFor(ctx context.Context, rkey string) *node {
	c, err := s.nodeOf(ctx, rkey)
	if err != nil || c == nil {
		return &s.whole
	}
	if n, ok := s.nodes.Load(c); ok {
		return n.(*node)
	}
	n, _ := s.nodes.LoadOrStore(c, s.mkNode(c))
	return n.(*node)
}

// batched decides c in n's batcher into d. (Not inlined: in Decide,
// its copy of the answer sat between the steps of a lone decision.)
//
//go:noinline
func batched(ctx context.Context, n *node, c *Query, d *decision) (took time.Duration, err error) {
	*d, took, err = n.batch.Do(ctx, c)
	return took, err
}

// submit decides c on n and reports how long the store I/O took: batched,
// sent alone (under a budget as a deadline or a timer, or under the
// caller's context), or apart from its caller on a client that ignores
// deadlines. A lone decision runs under ctx bounded by budget; a batched
// one under its batch's own budget, while its caller may leave when ctx
// ends. (A lean store's lone plain decision is sent by Decide itself.)
func (s *Store) submit(ctx context.Context, n *node, c *Query, budget time.Duration, d *decision) (took time.Duration, err error) {
	fits := enough(ctx, budget)
	if n.batch != nil && !s.sentAlone(budget) {
		if s.ack != nil || !fits || !n.batch.Alone() {
			return batched(ctx, n, c, d)
		}
		// A lone decision on an idle node, whose caller has the budget
		// left, is sent here, in the caller's goroutine, holding one of
		// the node's slots as a batch would (see batch.Alone): what the
		// batcher would do with it, without its layers. A defer: a
		// go-redis hook of the user's that panics (and a server that
		// recovers) must not keep the slot for ever.
		defer n.batch.Done()
	} else if s.detached {
		*d, took, err = s.submitDetached(ctx, n, c, budget)
		return took, err
	}
	// The I/O time is counted from before the deadline is set, so a call
	// that fails at its deadline has run for the whole budget however late
	// this goroutine ran after setting it.
	start := time.Now()
	rctx := ctx
	var cancel context.CancelFunc
	switch {
	case budget <= 0 || !fits:
		// No budget, or the caller's own deadline comes first: the I/O
		// runs under the caller's context.
	case s.timerless:
		// The client bounds every wait by the deadline itself: no
		// timer (see boundsWaits), and a context kept in the query,
		// which a send again overwrites only once this send is over:
		// neither an allocation nor a sync.Pool (whose code cost a
		// cold decision 16 code lines).
		c.bctx = budgetCtx{Context: ctx, dl: start.Add(budget)}
		rctx = &c.bctx
	default:
		rctx, cancel = context.WithTimeout(ctx, budget)
	}
	if s.ack != nil || s.proc == nil || !c.plain() {
		err = s.sendOther(rctx, n, c, d)
	} else {
		err = s.sendPlain(rctx, n, c, d)
	}
	took = time.Since(start)
	if cancel != nil {
		cancel()
	}
	return took, err
}

// sendPlain sends c, a plain decision, alone under rctx and sets d to
// the answer: on n's lane if it has one (see lane), else as one literal,
// straight to processList and parseDebt, without runInts's loops, the
// form's layers (see EvalOne) or decode's call.
func (s *Store) sendPlain(rctx context.Context, n *node, c *Query, d *decision) error {
	a := c.Plan.Args[1:4:4]
	var vals []int64
	var buf [DebtWidth + ReplyTime]int64
	err := errOffLane
	if n.lane != nil {
		vals, err = onLane(rctx, n.lane, c.keys[:], a, buf[:0])
	}
	if err == errOffLane {
		argv := []any{"evalsha", bucketHash, smallInts[1], c.RKey, a[0], a[1], a[2]}
		vals, err = processList(rctx, s.proc, argv, true)
	}
	if err != nil && noScript(err) {
		vals, err = evalScript(rctx, s.rdb, BucketScript, c.keys[:], a, false)
	}
	switch {
	case err != nil:
	case len(vals) != DebtWidth+ReplyTime:
		err = c.decode(slices.Clone(vals), d) // which says what is wrong (a copy: vals may be buf, which passing it to decode would move to the heap)
	default: // decode's, inline
		if err = c.parseDebt(vals, d); err == nil {
			d.At = vals[DebtWidth]
		}
	}
	return err
}

// onLane sends the bucket script with keys and args on ln under rctx's
// deadline, its reply appended to dst; errOffLane when it must go
// through the client instead: ln is busy, rctx has no deadline, or the
// node answered with a Cluster redirection, which the client follows.
func onLane(rctx context.Context, ln *lane, keys []string, args []any, dst []int64) ([]int64, error) {
	dl, ok := rctx.Deadline()
	if !ok {
		return nil, errOffLane
	}
	if err := rctx.Err(); err != nil {
		return nil, err
	}
	vals, err := ln.eval(rctx, dl, bucketSHA, keys, args, dst)
	if err != nil && (redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")) {
		return nil, errOffLane
	}
	return vals, err
}

// bucketSHA is BucketScript's SHA1.
var bucketSHA = BucketScript.Hash()

// sendOther sends c, a decision that is not plain or on a store that
// waits for replicas, alone under rctx, and sets d to the answer: out of
// submit's line, where a plain decision's code is.
func (s *Store) sendOther(rctx context.Context, n *node, c *Query, d *decision) error {
	if s.ack != nil {
		var err error
		*d, err = s.evalAcked(rctx, n, c)
		return err
	}
	keys, args := c.lone()
	var ints []int64
	err := errOffLane
	if n.lane != nil {
		ints, err = onLane(rctx, n.lane, keys, args, nil)
		if err != nil && noScript(err) {
			ints, err = evalScript(rctx, s.rdb, BucketScript, keys, args, false)
		}
	}
	if err == errOffLane {
		ints, err = runInts(rctx, s.proc, s.rdb, BucketScript, keys, args, false)
	}
	if err != nil {
		return err
	}
	return c.decode(ints, d)
}

// enough reports whether ctx leaves at least budget (or has no deadline).
func enough(ctx context.Context, budget time.Duration) bool {
	dl, ok := ctx.Deadline()
	return !ok || budget <= 0 || time.Until(dl) >= budget
}

// budgetCtx carries a call's budget as a deadline without a timer: Done is
// the caller's, and Err reports context.DeadlineExceeded once the deadline
// has passed. Only for a client that bounds its waits by the deadline
// itself (see boundsWaits).
type budgetCtx struct {
	context.Context
	dl time.Time
}

func (c *budgetCtx) Deadline() (time.Time, bool) { return c.dl, true }

func (c *budgetCtx) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// submitDetached decides c for a client that ignores context deadlines
// (see ignoresBudget), apart from the caller (see runApart).
func (s *Store) submitDetached(ctx context.Context, n *node, c *Query, budget time.Duration) (decision, time.Duration, error) {
	start := time.Now()
	d, err := runApart(ctx, budget, func(rctx context.Context) (decision, error) {
		if s.ack != nil {
			return s.evalAcked(rctx, n, c)
		}
		return EvalOne(rctx, s.rdb, c)
	})
	return d, time.Since(start), err
}

// runApart runs f in a goroutine of its own under the budget as a context
// (go-redis honours it while it waits for a pooled connection, even when it
// ignores it on the socket), and waits for it until the budget has passed
// or ctx ends. A call left behind ends by the client's own read and write
// timeouts; its answer is dropped, which for a rate limiter errs toward
// denying (the bucket may have been charged), never toward admitting.
func runApart[T any](ctx context.Context, budget time.Duration, f func(context.Context) (T, error)) (T, error) {
	type answer struct {
		v   T
		err error
	}
	done := make(chan answer, 1)
	go func() {
		rctx, cancel := context.WithTimeout(context.Background(), budget)
		defer cancel()
		v, err := f(rctx)
		done <- answer{v, err}
	}()
	timer := time.NewTimer(budget)
	defer timer.Stop()
	var zero T
	select {
	case a := <-done:
		return a.v, a.err
	case <-timer.C:
		return zero, fmt.Errorf("core: no answer within the %v budget: %w", budget, context.DeadlineExceeded)
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// decisionForm is how decisions travel: bucket.lua's lone form for one,
// its batch form for several keys in one call (see form).
var decisionForm = &form[*Query, decision]{
	script: func([]*batch.Member[*Query, decision]) *redis.Script { return BucketScript },
	tag:    func(c *Query) string { return c.RKey },
	lone:   (*Query).lone,
	many:   batchArgs,
	decode: deliver,
}

// sendDecisions returns the sender of node n's decisions: with split (a
// Cluster master or Ring shard) one script call per hash tag, pipelined;
// else one call. Under [WithReplicaAck], each call is followed by its WAIT
// (see sendAcked).
func (s *Store) sendDecisions(n *node, split bool, pipeline func() redis.Pipeliner) batch.Sender[*Query, decision] {
	send := decisionForm.sender(s.rdb, split, pipeline)
	return func(ctx context.Context, members []*batch.Member[*Query, decision]) {
		switch {
		case s.ack != nil:
			s.sendAcked(ctx, n, decisionForm.groups(members, split))
		case n.lane != nil && !split && onLaneBatch(ctx, n.lane, members):
		default:
			send(ctx, members)
		}
	}
}

// onLaneBatch sends members, a batch of decisions on a node of one call
// per batch (a single server or a Sentinel failover client's), on the
// node's lane (see lane) and delivers the answer; false, having delivered
// nothing, when the batch must go through the client instead (see
// onLane), or Redis answered NOSCRIPT (the client sends the script).
func onLaneBatch(ctx context.Context, ln *lane, members []*batch.Member[*Query, decision]) bool {
	keys, args := decisionForm.args(members)
	vals, err := onLane(ctx, ln, keys, args, nil)
	if err == errOffLane || (err != nil && noScript(err)) {
		return false
	}
	deliver(members, vals, err)
	return true
}

// groupByTag splits members by the hash tag of each request's stored name
// (rkey gives it), in the order of each tag's first member.
func groupByTag[Req, Res any](members []*batch.Member[Req, Res], rkey func(Req) string) [][]*batch.Member[Req, Res] {
	if len(members) == 1 {
		return [][]*batch.Member[Req, Res]{members}
	}
	var groups [][]*batch.Member[Req, Res]
	index := map[string]int{}
	for _, m := range members {
		t := hashTag(rkey(m.Req))
		i, ok := index[t]
		if !ok {
			i = len(groups)
			index[t] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], m)
	}
	return groups
}

// batchArgs lists the keys and script arguments of members, in order.
func batchArgs(members []*batch.Member[*Query, decision]) ([]string, []any) {
	calls := make([]*Query, len(members))
	for i, m := range members {
		calls[i] = m.Req
	}
	return ScriptArgs(calls)
}

// deliver decodes one script reply for members, or gives them its error.
// Each key's reply is checked on its own: one bad reply fails only its
// member. The reply's length tells its form: DebtWidth integers a key in
// the lone form (see sharedLimit), ReplyWidth in the batch form, whose
// replies are longer for as many keys.
func deliver(members []*batch.Member[*Query, decision], vals []int64, err error) {
	quotas, width := 0, 0 // the epochs of the call's quota section follow the keys' replies
	for _, m := range members {
		if m.Req.quota != nil {
			quotas++
		}
		width += m.Req.width()
	}
	stride := ReplyWidth
	if err == nil && quotas == 0 && width == len(members) && len(vals) == DebtWidth*width+ReplyTime {
		stride = DebtWidth
	} else if err == nil && len(vals) != ReplyWidth*width+quotas+ReplyTime {
		err = fmt.Errorf("%w of %d values for %d keys", errBadReply, len(vals), width)
	}
	at, q := 0, stride*width
	for _, m := range members {
		if err != nil {
			m.Err = err
			continue
		}
		if stride == DebtWidth {
			if m.Req.continuous() {
				m.Err = m.Req.parseDebt(vals[at:], &m.Res)
			} else {
				m.Err = badReply(vals[at : at+DebtWidth])
			}
		} else {
			m.Err = m.Req.parse(vals[at:], &m.Res)
		}
		at += stride * m.Req.width()
		if m.Req.quota != nil {
			m.Res.Epoch = vals[q]
			q++
		}
		if m.Err == nil {
			m.Res.At = vals[len(vals)-1]
		}
	}
}

// hashTag returns the {tag} section of a stored key name.
func hashTag(rkey string) string {
	if i := strings.IndexByte(rkey, '{'); i >= 0 {
		if j := strings.IndexByte(rkey[i:], '}'); j > 0 {
			return rkey[i+1 : i+j]
		}
	}
	return rkey
}

// EvalOne runs one call alone, in its own script call.
func EvalOne(ctx context.Context, rdb redis.Scripter, c *Query) (decision, error) {
	return decisionForm.one(ctx, rdb, c)
}

// op is one script call of any kind but the bucket's decisions and
// settlements, which have batch forms of their own: its script, keys and
// arguments. Every script an op runs replies with a list of integers.
type op struct {
	script *redis.Script
	keys   []string
	args   []any
}

// runOp sends o to node n and reports how long the store I/O took, under
// the same rules as a decision (see submit): batched with the node's other
// ops when the node has a batcher, where time queued is not the store's;
// otherwise under ctx bounded by budget, or apart from the caller for a
// client that ignores deadlines.
func (s *Store) runOp(ctx context.Context, n *node, o *op, budget time.Duration) ([]int64, time.Duration, error) {
	if n.ops != nil && !s.sentAlone(budget) {
		return n.ops.Do(ctx, o)
	}
	return s.runOpAlone(ctx, o, budget)
}

// runOpAlone sends o alone, not batched, under ctx bounded by budget, or
// apart from the caller for a client that ignores deadlines; it reports
// how long the store I/O took.
func (s *Store) runOpAlone(ctx context.Context, o *op, budget time.Duration) ([]int64, time.Duration, error) {
	cmd, took, err := s.runScript(ctx, o.script, o.keys, o.args, budget)
	if err != nil {
		return nil, took, err
	}
	v, err := cmd.Int64Slice()
	return v, took, err
}

// runScript sends one call of sc alone (EVALSHA, and EVAL after
// NOSCRIPT), under ctx bounded by budget, or apart from the caller for a
// client that ignores deadlines; it returns the reply for the caller to
// decode, and how long the store I/O took. Every call sent alone takes it.
func (s *Store) runScript(ctx context.Context, sc *redis.Script, keys []string, args []any, budget time.Duration) (*redis.Cmd, time.Duration, error) {
	start := time.Now()
	run := func(rctx context.Context) (*redis.Cmd, error) {
		cmd := sc.Run(rctx, s.rdb, keys, args...)
		return cmd, cmd.Err()
	}
	if s.detached {
		cmd, err := runApart(ctx, budget, run)
		return cmd, time.Since(start), err
	}
	rctx, cancel := ctx, context.CancelFunc(nil)
	if budget > 0 {
		if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > budget {
			rctx, cancel = context.WithTimeout(ctx, budget)
		}
	}
	cmd, err := run(rctx)
	took := time.Since(start)
	if cancel != nil {
		cancel()
	}
	return cmd, took, err
}

// opForm is how every other operation travels: each op its own script
// call (see form), several pipelined.
var opForm = &form[*op, []int64]{
	script: func(g []*batch.Member[*op, []int64]) *redis.Script { return g[0].Req.script },
	lone:   func(o *op) ([]string, []any) { return o.keys, o.args },
	decode: func(g []*batch.Member[*op, []int64], vals []int64, err error) {
		g[0].Res, g[0].Err = vals, err
	},
}

// sendOps returns the sender of a node's ops: one op alone, several in one
// pipeline of EVALSHA (a Cluster client splits it by slot, all on the
// node's master), and those Redis answered NOSCRIPT (after a restart)
// again in one pipeline of EVAL.
func (s *Store) sendOps(pipeline func() redis.Pipeliner) batch.Sender[*op, []int64] {
	return opForm.sender(s.rdb, true, pipeline)
}

// runOps sends ops, all of node n, together under ctx: in one pipeline
// when the client has pipelines and honours deadlines (see sendOps),
// otherwise one at a time. Each op's reply or
// error is in its member. It is how a background round (the lease
// keeper's renewals) travels the same road as a caller's op.
func (s *Store) runOps(ctx context.Context, n *node, ops []*op) []*batch.Member[*op, []int64] {
	members := make([]*batch.Member[*op, []int64], len(ops))
	for i, o := range ops {
		members[i] = &batch.Member[*op, []int64]{Req: o}
	}
	if p, ok := s.rdb.(interface{ Pipeline() redis.Pipeliner }); ok && !s.detached {
		s.sendOps(p.Pipeline)(ctx, members)
		return members
	}
	for _, m := range members {
		m.Res, _, m.Err = s.runOp(ctx, n, m.Req, 0)
	}
	return members
}

// sendScriptInt is sendScript for a script whose reply is one integer.
func (s *Store) sendScriptInt(ctx context.Context, kind string, sc *redis.Script, keys []string, args ...any) (int64, error) {
	cmd, err := s.sendScript(ctx, kind, sc, keys, args...)
	if err != nil {
		return 0, err
	}
	return cmd.Int64()
}

// sendScriptInts is sendScript for a script whose reply is a list of
// integers (see sendOp).
func (s *Store) sendScriptInts(ctx context.Context, kind string, sc *redis.Script, keys []string, args ...any) ([]int64, error) {
	cmd, err := s.sendScript(ctx, kind, sc, keys, args...)
	if err != nil {
		return nil, err
	}
	return cmd.Int64Slice()
}

// sendScriptSlice is sendScript for a script whose reply is a list of
// values of several types (the overrides' load), which the caller decodes.
func (s *Store) sendScriptSlice(ctx context.Context, kind string, sc *redis.Script, keys []string, args ...any) ([]any, error) {
	cmd, err := s.sendScript(ctx, kind, sc, keys, args...)
	if err != nil {
		return nil, err
	}
	return cmd.Slice()
}

// sendScript sends a script alone to the node of its first key, under
// ctx's deadline as its budget (or the limiter's), through the store's
// one runner of lone calls, and reports it to the observer; it feeds no
// breaker (see sendOp). The callers above decode its reply.
func (s *Store) sendScript(ctx context.Context, kind string, sc *redis.Script, keys []string, args ...any) (*redis.Cmd, error) {
	nd := s.node(ctx, keys[0])
	budget := s.cfg.Budget
	if dl, ok := ctx.Deadline(); ok {
		budget = max(time.Until(dl), time.Millisecond)
	}
	cmd, took, err := s.runScript(ctx, sc, keys, args, budget)
	if s.up.Obs != nil && (err == nil || callerGone(ctx) == nil) {
		s.up.Obs.ObserveStore(Call{Node: nd.brk.node, Op: kind, Latency: took, Err: err})
	}
	return cmd, err
}

// Node names the node of the store's whole client (see [Outage.Node]).
func (s *Store) Node() string { return s.whole.brk.node }
