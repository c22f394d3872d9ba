package redisstore

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/internal/model"
)

var (
	//go:embed top_flush.lua
	topFlushLua string
	//go:embed top_read.lua
	topReadLua string

	topFlushScript = redis.NewScript(topFlushLua)
	topReadScript  = redis.NewScript(topReadLua)
)

// topKeys returns the names of the four keys of a limit's top talkers in
// the window starting at window (unix seconds): the admitted and denied
// sorted sets, the totals and the names, all under one hash tag per limit
// (<prefix>{top:<hash of the limit's name>}<window>:a, :d, :t, :n), so one
// script call reads or writes a limit's windows on Cluster too. The tag
// hashes the name, so any name makes a key of bounded length.
func (s *Store) topKeys(limit string, window int64) [4]string {
	sum := sha256.Sum256([]byte(limit))
	base := s.cfg.Prefix + "{top:" + hex.EncodeToString(sum[:8]) + "}" + strconv.FormatInt(window, 10)
	return [4]string{base + ":a", base + ":d", base + ":t", base + ":n"}
}

// FlushTop adds each flush's counts to its window, one call of
// top_flush.lua per limit (kind OpTop), in order; it returns the first
// error, after trying every flush. No failure policy governs it (see
// sendOp): it is a background task's.
func (s *Store) FlushTop(ctx context.Context, fl []model.TopFlush) error {
	var first error
	for _, f := range fl {
		keys := s.topKeys(f.Limit, f.Window)
		args := make([]any, 0, 7+2*(len(f.Admitted.Hashes)+len(f.Den.Hashes)+len(f.Admitted.Names)+len(f.Den.Names)))
		args = append(args, f.TTL.Milliseconds(), f.Admitted.Total, f.Admitted.Bound, f.Den.Total, f.Den.Bound,
			len(f.Admitted.Hashes), len(f.Den.Hashes))
		args = appendCounts(args, f.Admitted)
		args = appendCounts(args, f.Den)
		args = appendNames(args, f.Admitted)
		args = appendNames(args, f.Den)
		_, err := s.sendOp(ctx, OpTop, &op{script: topFlushScript, keys: keys[:], args: args})
		if err != nil && first == nil {
			first = fmt.Errorf("flushing the top talkers of limit %q: %w", f.Limit, err)
		}
	}
	return first
}

func appendCounts(args []any, c model.TopCounts) []any {
	for i, h := range c.Hashes {
		args = append(args, topMember(h), c.Counts[i])
	}
	return args
}

func appendNames(args []any, c model.TopCounts) []any {
	for i, name := range c.Names {
		if name != "" {
			args = append(args, topMember(c.Hashes[i]), name)
		}
	}
	return args
}

// topMember is a key hash as the sets hold it: 16 hex digits.
func topMember(h uint64) string { return fmt.Sprintf("%016x", h) }

// ReadTop reads the limit's windows starting at windows (unix seconds),
// writing nothing: one call of top_read.lua (kind OpTop).
func (s *Store) ReadTop(ctx context.Context, limit string, windows []int64) ([]model.TopWindow, error) {
	keys := make([]string, 0, 4*len(windows))
	for _, w := range windows {
		k := s.topKeys(limit, w)
		keys = append(keys, k[:]...)
	}
	v, err := s.sendScriptSlice(ctx, OpTop, topReadScript, keys)
	if err != nil {
		return nil, err
	}
	if len(v) != len(windows) {
		return nil, fmt.Errorf("%w of %d windows to a read of %d", errBadReply, len(v), len(windows))
	}
	out := make([]model.TopWindow, len(v))
	for i, w := range v {
		if out[i], err = parseTopWindow(w); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// parseTopWindow decodes one window of top_read.lua's reply.
func parseTopWindow(v any) (model.TopWindow, error) {
	var w model.TopWindow
	parts, ok := v.([]any)
	if !ok || len(parts) != 4 {
		return w, fmt.Errorf("%w: a top-talkers window of %T", errBadReply, v)
	}
	flat := make([][]string, 4)
	for i, p := range parts {
		items, ok := p.([]any)
		if !ok || len(items)%2 != 0 {
			return w, fmt.Errorf("%w: a top-talkers list of %T", errBadReply, p)
		}
		for _, it := range items {
			s, ok := it.(string)
			if !ok {
				return w, fmt.Errorf("%w: a top-talkers item of %T", errBadReply, it)
			}
			flat[i] = append(flat[i], s)
		}
	}
	names := map[string]string{}
	for i := 0; i < len(flat[3]); i += 2 {
		names[flat[3][i]] = flat[3][i+1]
	}
	var err error
	if w.Admitted, err = parseTopSet(flat[0], names); err != nil {
		return w, err
	}
	if w.Den, err = parseTopSet(flat[1], names); err != nil {
		return w, err
	}
	for i := 0; i < len(flat[2]); i += 2 {
		n, err := strconv.ParseInt(flat[2][i+1], 10, 64)
		if err != nil || n < 0 {
			return w, fmt.Errorf("%w: a top-talkers total %q", errBadReply, flat[2][i+1])
		}
		switch flat[2][i] {
		case "at":
			w.Admitted.Total = n
		case "ab":
			w.Admitted.Bound = n
		case "dt":
			w.Den.Total = n
		case "db":
			w.Den.Bound = n
		}
	}
	return w, nil
}

// parseTopSet decodes a sorted set's members (key hashes) and scores.
func parseTopSet(flat []string, names map[string]string) (model.TopCounts, error) {
	var c model.TopCounts
	for i := 0; i < len(flat); i += 2 {
		h, err := strconv.ParseUint(flat[i], 16, 64)
		if err != nil {
			return c, fmt.Errorf("%w: a top-talkers member %q", errBadReply, flat[i])
		}
		f, err := strconv.ParseFloat(flat[i+1], 64)
		if err != nil || f < 0 {
			return c, fmt.Errorf("%w: a top-talkers score %q", errBadReply, flat[i+1])
		}
		c.Hashes = append(c.Hashes, h)
		c.Counts = append(c.Counts, int64(f))
		c.Names = append(c.Names, names[flat[i]])
	}
	return c, nil
}
