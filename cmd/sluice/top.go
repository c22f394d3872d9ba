package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/overrides"
)

// parseTop parses "top <limit> [<k>]".
func parseTop(args []string) (command, error) {
	if len(args) != 2 && len(args) != 3 {
		return command{}, fmt.Errorf("top takes <limit> [<k>], got %d arguments", len(args)-1)
	}
	if args[1] == "" {
		return command{}, fmt.Errorf("top: empty limit name")
	}
	c := command{op: "top", key: args[1], k: 10}
	if len(args) == 3 {
		k, err := strconv.Atoi(args[2])
		if err != nil || k < 1 || k > 1000 {
			return command{}, fmt.Errorf("top: k %q is not a number from 1 to 1000", args[2])
		}
		c.k = k
	}
	return c, nil
}

// execTop prints a limit's top talkers: the totals and error bounds, then
// the keys most denied and those of largest admitted cost. A count of the
// other kind is 0 for a key not among that kind's counters (at most the
// error bound, see core.Talker).
func (c command) execTop(ctx context.Context, lim *core.Limiter, out io.Writer) error {
	top, err := lim.Top(ctx, c.key, c.k)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "limit %s since %s: admitted cost %d (each count ±%d), denials %d (±%d)\n",
		quote(top.Limit), top.Since.UTC().Format(time.RFC3339), top.Admitted, top.AdmittedError, top.Denied, top.DeniedError)
	section := func(title, h1, h2 string, ts []core.Talker, denied bool) {
		fmt.Fprintf(out, "\n%s:\n", title)
		if len(ts) == 0 {
			fmt.Fprintln(out, "none")
			return
		}
		rows := make([][2]string, len(ts))
		w1, w2 := len(h1), len(h2)
		for i, t := range ts {
			a, b := t.Admitted, t.Denied
			if denied {
				a, b = b, a
			}
			rows[i] = [2]string{strconv.FormatInt(a, 10), strconv.FormatInt(b, 10)}
			w1, w2 = max(w1, len(rows[i][0])), max(w2, len(rows[i][1]))
		}
		fmt.Fprintf(out, "%*s  %*s  KEY\n", w1, h1, w2, h2)
		for i, t := range ts {
			label := "#" + t.Hash // a hash prints plainly
			if t.Key != "" {
				label = quote(t.Key)
			}
			fmt.Fprintf(out, "%*s  %*s  %s\n", w1, rows[i][0], w2, rows[i][1], label)
		}
	}
	section("most denied", "DENIED", "ADMITTED", top.ByDenied, true)
	section("largest admitted cost", "ADMITTED", "DENIED", top.ByAdmitted, false)
	return nil
}

// parseUsageMany parses the forms of usage with several keys:
// "usage <limits> [<scope>] -- <key>..." and "usage cap <max> [<name>] --
// <key>...".
func parseUsageMany(args []string) (command, error) {
	dash := slices.Index(args, "--")
	keys := args[dash+1:]
	if len(keys) == 0 || slices.Contains(keys, "") {
		return command{}, fmt.Errorf("usage: give one or more keys after --, none empty")
	}
	head := args[1:dash]
	if len(head) > 0 && head[0] == "cap" {
		if len(head) != 2 && len(head) != 3 {
			return command{}, fmt.Errorf("usage cap takes <max> [<name>] -- <key>..., got %d arguments before --", len(head)-1)
		}
		n, err := strconv.Atoi(head[1])
		if err != nil {
			return command{}, fmt.Errorf("usage cap: max %q is not a number", head[1])
		}
		c := command{op: "usage cap", keys: keys, capLimit: core.ConcurrencyLimit{Max: n}}
		if len(head) == 3 {
			c.capLimit.Name = head[2]
		}
		return c, nil
	}
	if len(head) != 1 && len(head) != 2 {
		return command{}, fmt.Errorf("usage takes <limits> [<scope>] -- <key>..., got %d arguments before --", len(head))
	}
	o, err := overrides.Parse(head[0])
	if err != nil {
		return command{}, err
	}
	if len(o.Limits) == 0 {
		return command{}, fmt.Errorf("usage: %q is not limits, such as \"600/m\" or \"10/s; 1000/h\"", head[0])
	}
	c := command{op: "usage many", keys: keys, override: o}
	if len(head) == 2 {
		if head[1] == "" {
			return command{}, fmt.Errorf("usage: empty scope; leave it out for a middleware without one")
		}
		c.scope = head[1]
	}
	return c, nil
}

// execUsageMany prints what each key has left (one round trip per Redis
// node, writing nothing: core.Rule.PeekMany), or how many slots of a cap
// each key holds (core.Concurrency.InFlight).
func (c command) execUsageMany(ctx context.Context, lim *core.Limiter, out io.Writer) error {
	if c.op == "usage cap" {
		cc, err := lim.PrepareConcurrency(c.capLimit)
		if err != nil {
			return err
		}
		name := ""
		if c.capLimit.Name != "" {
			name = " " + quote(c.capLimit.Name)
		}
		for _, key := range c.keys {
			n, err := cc.InFlight(ctx, key)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "%s: %d of %d in flight under cap%s\n", quote(key), n, c.capLimit.Max, name)
		}
		return nil
	}
	rule, err := lim.PrepareScoped(c.scope, c.override.Limits...)
	if err != nil {
		return err
	}
	results, err := rule.PeekMany(ctx, c.keys)
	if err != nil {
		return err
	}
	for i, res := range results {
		printUsage(out, c.keys[i], c.override, c.scope, res)
	}
	return nil
}

// printUsage writes one key's usage line.
func printUsage(out io.Writer, key string, o overrides.Override, scope string, res core.Result) {
	fmt.Fprintf(out, "%s under %s%s: %d of %d left, full in %s", quote(key), o, scopeText(scope),
		res.Remaining, res.Limit.Burst, ceilSecond(res.ResetAfter))
	switch {
	case res.Locked:
		fmt.Fprintf(out, "; locked for %s", ceilSecond(res.RetryAfter))
	case !res.Allowed:
		fmt.Fprintf(out, "; next admitted in %s", ceilSecond(res.RetryAfter))
	}
	fmt.Fprintln(out)
}
