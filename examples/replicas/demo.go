package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
)

// demo runs the phases.
type demo struct {
	cfg    *config
	proxy  *redistest.Proxy // in front of Redis; every replica talks to Redis through it
	runID  string           // keeps this run's Redis keys apart from earlier runs'
	con    *console
	client *http.Client
	logger *slog.Logger // sluice's own log of outages, on the console
}

// phase is one approach under one load: what its replicas decided and what
// the load generator saw.
type phase struct {
	name      string
	rec       *recorder
	load      *loadStats
	length    time.Duration   // from the first request to the last
	steadyEnd time.Duration   // end of the steady part; bursts follow
	bursts    []time.Duration // the second boundaries the bursts straddle
}

// runMain runs approach a under the main traffic: steady load, then bursts
// across second boundaries.
func (d *demo) runMain(ctx context.Context, a approach) (*phase, error) {
	offsets, bursts, length := d.mainTraffic()
	rec := newRecorder()
	c, err := d.startCluster(ctx, a, d.prefix(a.name), rec)
	if err != nil {
		return nil, err
	}
	defer c.close()
	start := nextSecond()
	rec.begin(start)
	p := &phase{name: a.name, rec: rec, load: new(loadStats), length: length, steadyEnd: d.cfg.steady, bursts: bursts}
	stop := d.con.track(a.name, start, length, p.load)
	defer stop()
	d.drive(ctx, start, offsets, c.pool, p.load)
	return p, ctx.Err()
}

// mainTraffic returns the send times of the main traffic, relative to its
// start: the offered rate, evenly spaced, for the steady part; then, in each
// 2-second cycle, the same rate for 0.8 s centred on the cycle's middle
// second boundary, and nothing else. A fixed window whose quota was not
// touched in the first 0.6 s of one second admits a full quota at its end
// and another at the start of the next: two quotas within 0.8 s. It also
// returns the boundaries the bursts straddle, and the traffic's length.
func (d *demo) mainTraffic() (offsets, bursts []time.Duration, length time.Duration) {
	offsets = evenly(nil, 0, d.cfg.steady, d.cfg.rate)
	for c := range d.cfg.bursts {
		mid := d.cfg.steady + time.Duration(2*c+1)*time.Second
		offsets = evenly(offsets, mid-burstLen/2, burstLen, d.cfg.rate)
		bursts = append(bursts, mid)
	}
	return offsets, bursts, d.cfg.steady + time.Duration(2*d.cfg.bursts)*time.Second
}

// burstLen is how long each burst lasts.
const burstLen = 800 * time.Millisecond

// evenly appends the send times of rate requests per second from 'from' for
// length.
func evenly(offsets []time.Duration, from, length time.Duration, rate int) []time.Duration {
	n := int(int64(rate) * int64(length) / int64(time.Second))
	for i := range n {
		offsets = append(offsets, from+time.Duration(int64(i)*int64(time.Second)/int64(rate)))
	}
	return offsets
}

// nextSecond returns the next whole second of the wall clock, which is also
// where the fixed window's windows begin.
func nextSecond() time.Time {
	return time.Now().Truncate(time.Second).Add(time.Second)
}

// prefix returns a Redis key prefix for one approach in one phase of this
// run.
func (d *demo) prefix(name string) string {
	return "sluice-demo:" + d.runID + ":" + strings.ReplaceAll(name, " ", "-") + ":"
}

// outagePhase is the outage scenario, run once per approach under the
// same load: the replicas start as configured, twice as many run from
// scaleAt, and Redis goes away and comes back.
type outagePhase struct {
	fixed, fleet, static *outageRun
	scaleAt              time.Duration // when the new replicas start, from each run's start
	weights              []int         // the balancer's weights after the scale-out
}

// outageRun is one approach's run through the scale-out and the outage.
type outageRun struct {
	*phase
	cut, restored time.Duration // when Redis went away and came back, from the start
	counted       time.Duration // when every limiter counted every replica, from the start; 0 without a fleet or if they did not by the cut
	sizes         []int         // the fleet sizes the limiters counted at the cut; nil without a fleet
}

// scaledWeights returns the balancer's weights after the scale-out: each
// replica's weight twice, so that every new replica takes half of its
// twin's traffic and 60/25/15 becomes 30/12.5/7.5/30/12.5/7.5 (in percent).
func scaledWeights(w []int) []int {
	return append(slices.Clone(w), w...)
}

// runOutage runs the fixed window, sluice (its fleet sized by heartbeats),
// and sluice sized by a static WithFallbackReplicas of the replica count it
// was deployed with, through the same scale-out and outage. The runs do not
// overlap, so that none slows the others' Redis.
func (d *demo) runOutage(ctx context.Context) (*outagePhase, error) {
	out := &outagePhase{scaleAt: d.outageLead() / 2, weights: scaledWeights(d.cfg.weights)}
	for _, r := range []struct {
		a   approach
		run **outageRun
	}{
		{d.fixedWindow(), &out.fixed},
		{d.sluice(), &out.fleet},
		{d.sluiceStatic(d.cfg.replicas()), &out.static},
	} {
		var err error
		if *r.run, err = d.runOutageOf(ctx, r.a, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// outageLead is how long each outage run goes before Redis is cut off: at
// least 2 s, so that the fleet has a second or more after the scale-out to
// count the new replicas.
func (d *demo) outageLead() time.Duration { return max(2*time.Second, wholeSeconds(d.cfg.outage/2)) }

// runOutageOf runs approach a under the offered rate: at out.scaleAt the
// replicas double and the balancer spreads over all of them; once every
// limiter counts them all (if a has a fleet) and not before the lead is
// over, Redis is cut off for the outage, then restored.
func (d *demo) runOutageOf(ctx context.Context, a approach, out *outagePhase) (*outageRun, error) {
	lead := d.outageLead()
	tail := max(time.Second, wholeSeconds(d.cfg.outage*3/4))
	length := lead + d.cfg.outage + tail
	rec := newRecorder()
	prefix := d.prefix("outage " + a.name)
	c, err := d.startCluster(ctx, a, prefix, rec)
	if err != nil {
		return nil, err
	}
	defer c.close()
	start := nextSecond()
	rec.begin(start)
	r := &outageRun{phase: &phase{name: a.name, rec: rec, load: new(loadStats), length: length, steadyEnd: length}}
	stop := d.con.track(fmt.Sprintf("%s, %d replicas, %d from %v, Redis cut off from %v for %v", a.name,
		d.cfg.replicas(), len(out.weights), out.scaleAt, lead, d.cfg.outage), start, length, r.load)
	defer stop()

	var runErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		if !sleepUntil(ctx, start.Add(out.scaleAt)) {
			return
		}
		if runErr = c.scale(a, prefix, rec, out.weights); runErr != nil {
			return
		}
		// Cut Redis once every limiter counts every replica, but never
		// before the lead is over, nor so late that the outage would
		// outlast the load.
		ok, sizes := c.waitFleet(ctx, start.Add(lead+tail/2))
		if ok && sizes != nil {
			r.counted = time.Since(start)
		}
		if !sleepUntil(ctx, start.Add(lead)) {
			return
		}
		r.sizes = c.fleetSizes()
		// As a crash would: open connections reset, new ones refused.
		if runErr = d.proxy.SetDown(true); runErr != nil {
			return
		}
		r.cut = time.Since(start)
		if !sleepUntil(ctx, start.Add(r.cut+d.cfg.outage)) {
			return
		}
		runErr = d.proxy.SetDown(false)
		r.restored = time.Since(start)
	}()
	d.drive(ctx, start, evenly(nil, 0, length, d.cfg.rate), c.pool, r.load)
	<-done
	if err := errors.Join(ctx.Err(), runErr); err != nil {
		return nil, err
	}
	return r, nil
}

// sleepUntil waits until t and reports true, or reports false if ctx ends
// first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// cluster is one approach's replicas: an HTTP server each, on loopback,
// and the balancer's pool of them.
type cluster struct {
	pool     *pool
	replicas []replica
	servers  []*httptest.Server
}

// startCluster starts the configured replicas of approach a behind the
// configured weights and, if they form a fleet, waits until each counts
// them all, so that the load starts on a fleet that knows its size.
func (d *demo) startCluster(ctx context.Context, a approach, prefix string, rec *recorder) (*cluster, error) {
	c := &cluster{pool: &pool{}}
	if err := c.scale(a, prefix, rec, d.cfg.weights); err != nil {
		c.close()
		return nil, err
	}
	if ok, sizes := c.waitFleet(ctx, time.Now().Add(fleetDeadline)); !ok {
		c.close()
		return nil, errors.Join(ctx.Err(), fmt.Errorf("%s: the replicas counted %v instances after %v, want %d each",
			a.name, sizes, fleetDeadline, len(c.replicas)))
	}
	return c, nil
}

// fleetDeadline bounds the wait for a new fleet to count itself: a few
// heartbeats, unless Redis is far too slow for the demo to mean anything.
const fleetDeadline = 10 * time.Second

// scale starts replicas until there is one per weight, then has the
// balancer spread the load over all of them by weights.
func (c *cluster) scale(a approach, prefix string, rec *recorder, weights []int) error {
	for i := len(c.replicas); i < len(weights); i++ {
		r, err := a.newReplica(i, prefix, rec)
		if err != nil {
			return err
		}
		c.replicas = append(c.replicas, r)
		c.servers = append(c.servers, httptest.NewServer(rec.measure(i, r.handler)))
	}
	var urls []string
	for _, s := range c.servers {
		urls = append(urls, s.URL+"/")
	}
	c.pool.set(urls, weights)
	return nil
}

// fleetSizes returns the instances each replica's limiter counts, or nil
// if they form no fleet.
func (c *cluster) fleetSizes() []int {
	var sizes []int
	for _, r := range c.replicas {
		if r.fleetSize != nil {
			sizes = append(sizes, r.fleetSize())
		}
	}
	return sizes
}

// waitFleet waits until every replica's limiter counts every replica, and
// reports whether they do, with the sizes they count (nil without a
// fleet); it gives up at deadline or when ctx ends.
func (c *cluster) waitFleet(ctx context.Context, deadline time.Time) (ok bool, sizes []int) {
	for {
		sizes = c.fleetSizes()
		ok = true
		for _, n := range sizes {
			ok = ok && n == len(c.replicas)
		}
		if ok || time.Now().After(deadline) || !sleepUntil(ctx, time.Now().Add(10*time.Millisecond)) {
			return ok, sizes
		}
	}
}

// close stops the servers, then releases what the replicas hold: a
// limiter's Close comes after its last request.
func (c *cluster) close() {
	for _, s := range c.servers {
		s.Close()
	}
	for _, r := range c.replicas {
		r.close()
	}
}

// pool is the replicas the load balancer spreads requests over. A
// scale-out replaces it while the load runs; it is safe for concurrent use.
type pool struct {
	mu   sync.Mutex
	urls []string
	bal  *balancer
}

func (p *pool) set(urls []string, weights []int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.urls, p.bal = urls, newBalancer(weights)
}

// pick returns the URL of the replica the balancer picks next.
func (p *pool) pick() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.urls[p.bal.next()]
}

// loadStats is what the load generator saw.
type loadStats struct {
	sent, ok, limited, failed atomic.Int64
	maxLag                    atomic.Int64 // most a request left after its time, in ns
}

// drive sends a request at start+offsets[i] for every i, to the replica the
// balancer picks, without waiting for earlier answers (an open-loop load, as
// real clients are), and returns when all have been answered or ctx ends.
func (d *demo) drive(ctx context.Context, start time.Time, offsets []time.Duration, replicas *pool, st *loadStats) {
	inflight := make(chan struct{}, 512)
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, off := range offsets {
		if !sleepUntil(ctx, start.Add(off)) {
			return
		}
		select {
		case inflight <- struct{}{}:
		case <-ctx.Done():
			return
		}
		if lag := int64(time.Since(start.Add(off))); lag > st.maxLag.Load() {
			st.maxLag.Store(lag) // drive is the only writer
		}
		url := replicas.pick()
		st.sent.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-inflight }()
			switch d.send(ctx, url) {
			case http.StatusOK:
				st.ok.Add(1)
			case http.StatusTooManyRequests:
				st.limited.Add(1)
			default:
				st.failed.Add(1)
			}
		}()
	}
}

// send makes one request and returns its status, or 0 if it failed.
func (d *demo) send(ctx context.Context, url string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0
	}
	req.Header.Set(tenantHeader, "acme")
	res, err := d.client.Do(req)
	if err != nil {
		return 0
	}
	defer res.Body.Close()
	if _, err := io.Copy(io.Discard, res.Body); err != nil {
		return 0
	}
	return res.StatusCode
}

// balancer spreads requests over replicas in proportion to their weights,
// in a smooth weighted round robin (as nginx does): with 60/25/15 the
// replicas see their shares at every scale, not in runs.
type balancer struct {
	weights, current []int
	total            int
}

func newBalancer(weights []int) *balancer {
	b := &balancer{weights: weights, current: make([]int, len(weights))}
	for _, w := range weights {
		b.total += w
	}
	return b
}

func (b *balancer) next() int {
	best := 0
	for i, w := range b.weights {
		b.current[i] += w
		if b.current[i] > b.current[best] {
			best = i
		}
	}
	b.current[best] -= b.total
	return best
}

// recorder collects what one approach's replicas decide during a phase, as
// the replicas see it. It is also a core.Observer, for sluice's own account
// of where each decision came from. It is safe for concurrent use.
type recorder struct {
	mu        sync.Mutex
	start     time.Time
	decisions []decision
	degraded  []time.Duration // decisions made without Redis (sluice) or despite it (fixed window)
	recovered []recovery      // a replica went back to Redis
	storeLat  []time.Duration // sluice's Redis calls that succeeded
	storeErrs []time.Duration // when sluice's Redis calls failed

	sources    [5]atomic.Int64 // sluice's decisions by core.Source
	storeCalls atomic.Int64    // sluice's Redis calls
}

// decision is one request as its replica saw it.
type decision struct {
	at      time.Duration // when it arrived, from the phase's start
	latency time.Duration // time spent limiting it (and writing "ok" or 429)
	allowed bool
	replica int // which replica decided it
}

func newRecorder() *recorder { return &recorder{} }

// begin sets the phase's start, from which the recorder counts time, before
// the load starts.
func (r *recorder) begin(start time.Time) {
	r.mu.Lock()
	r.start = start
	r.mu.Unlock()
}

// measure wraps replica's limited handler, timing each request through it.
func (r *recorder) measure(replica int, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		t := time.Now()
		h.ServeHTTP(sw, req)
		lat := time.Since(t)
		r.mu.Lock()
		r.decisions = append(r.decisions, decision{at: t.Sub(r.start), latency: lat, allowed: sw.status == http.StatusOK, replica: replica})
		r.mu.Unlock()
	})
}

func (r *recorder) degradedAt(t time.Time) {
	r.mu.Lock()
	r.degraded = append(r.degraded, t.Sub(r.start))
	r.mu.Unlock()
}

// ObserveDecision implements core.Observer.
func (r *recorder) ObserveDecision(res core.Result, src core.Source) {
	if int(src) < len(r.sources) {
		r.sources[src].Add(1)
	}
	if res.Degraded {
		r.degradedAt(time.Now())
	}
}

// ObserveStore implements core.Observer.
func (r *recorder) ObserveStore(c core.StoreCall) {
	r.storeCalls.Add(1)
	r.mu.Lock()
	if c.Err == nil {
		r.storeLat = append(r.storeLat, c.Latency)
	} else {
		r.storeErrs = append(r.storeErrs, time.Since(r.start))
	}
	r.mu.Unlock()
}

// ObserveDegraded implements core.Observer.
func (r *recorder) ObserveDegraded(core.StoreOutage) {}

// ObserveRecovered implements core.Observer.
func (r *recorder) ObserveRecovered(core.StoreOutage) { r.recoveredBy(-1) }

func (r *recorder) recoveredBy(replica int) {
	r.mu.Lock()
	r.recovered = append(r.recovered, recovery{at: time.Since(r.start), replica: replica})
	r.mu.Unlock()
}

// recovery is a replica going back to Redis after an outage.
type recovery struct {
	at      time.Duration
	replica int
}

// replicaObserver is the recorder as one replica's observer, so that
// recoveries say whose they are.
type replicaObserver struct {
	*recorder
	replica int
}

// ObserveRecovered implements core.Observer.
func (o replicaObserver) ObserveRecovered(core.StoreOutage) { o.recoveredBy(o.replica) }

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}
