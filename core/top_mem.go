package core

import (
	"context"
	"sync"

	"github.com/sluicehq/sluice/core/internal/model"
)

// memTop is the windows of top talkers of a [NewMemory] limiter: what
// Redis keeps for a fleet (see core/internal/redisstore/top.go), for one
// process, merged as they are flushed and dropped after their TTL.
type memTop struct {
	mu      sync.Mutex
	windows map[memTopKey]*memTopWindow
}

type memTopKey struct {
	limit  string
	window int64
}

type memTopWindow struct {
	until    int64 // unix seconds after which it is dropped
	adm, den memTopCounts
}

type memTopCounts struct {
	total, bound int64
	counts       map[uint64]int64
	names        map[uint64]string
}

func (c *memTopCounts) add(in model.TopCounts) {
	c.total += in.Total
	c.bound += in.Bound
	if c.counts == nil {
		c.counts, c.names = map[uint64]int64{}, map[uint64]string{}
	}
	for i, h := range in.Hashes {
		c.counts[h] += in.Counts[i]
		if i < len(in.Names) && in.Names[i] != "" {
			c.names[h] = in.Names[i]
		}
	}
}

func (c *memTopCounts) out() model.TopCounts {
	o := model.TopCounts{Total: c.total, Bound: c.bound}
	for h, n := range c.counts {
		o.Hashes = append(o.Hashes, h)
		o.Counts = append(o.Counts, n)
		o.Names = append(o.Names, c.names[h])
	}
	return o
}

// flush adds fl to its windows, and drops the windows past their TTL.
func (m *memTop) flush(fl []model.TopFlush) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.windows == nil {
		m.windows = map[memTopKey]*memTopWindow{}
	}
	for _, f := range fl {
		k := memTopKey{f.Limit, f.Window}
		w := m.windows[k]
		if w == nil {
			w = &memTopWindow{}
			m.windows[k] = w
		}
		w.until = f.Window + int64(f.TTL.Seconds())
		w.adm.add(f.Admitted)
		w.den.add(f.Den)
		for k, w := range m.windows {
			if w.until < f.Window {
				delete(m.windows, k)
			}
		}
	}
}

// read returns the limit's windows.
func (m *memTop) read(limit string, windows []int64) []model.TopWindow {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]model.TopWindow, len(windows))
	for i, win := range windows {
		if w := m.windows[memTopKey{limit, win}]; w != nil {
			out[i] = model.TopWindow{Admitted: w.adm.out(), Den: w.den.out()}
		}
	}
	return out
}

func (m memStore) FlushTop(_ context.Context, fl []model.TopFlush) error {
	m.top.flush(fl)
	return nil
}

func (m memStore) ReadTop(_ context.Context, limit string, windows []int64) ([]model.TopWindow, error) {
	return m.top.read(limit, windows), nil
}
