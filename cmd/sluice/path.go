package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/overrides"
)

// parsePath parses "path usage|reset <scope> <name>=<limits>... --
// <key>...": a PathRule's scope and levels, root first, then the path's
// keys, root first, at most one per level.
func parsePath(args []string) (command, error) {
	if len(args) < 2 || (args[1] != "usage" && args[1] != "reset") {
		return command{}, fmt.Errorf("path needs usage or reset")
	}
	dash := slices.Index(args, "--")
	if len(args) < 3 || dash < 4 || dash == len(args)-1 {
		return command{}, fmt.Errorf("path %s takes a scope, its levels as <name>=<limits>, then -- and the path's keys", args[1])
	}
	c := command{op: "path " + args[1], scope: args[2], path: args[dash+1:]}
	for _, lv := range args[3:dash] {
		name, text, ok := strings.Cut(lv, "=")
		if !ok || name == "" {
			return command{}, fmt.Errorf("path %s: level %q is not <name>=<limits>, such as org=1000/h", args[1], lv)
		}
		o, err := overrides.Parse(text)
		if err != nil {
			return command{}, fmt.Errorf("path %s: level %s: %w", args[1], name, err)
		}
		if len(o.Limits) == 0 {
			return command{}, fmt.Errorf("path %s: level %s: %q is not limits", args[1], name, text)
		}
		c.levels = append(c.levels, core.Level{Name: name, Limits: o.Limits})
	}
	if len(c.path) > len(c.levels) {
		return command{}, fmt.Errorf("path %s: %d keys for %d levels", args[1], len(c.path), len(c.levels))
	}
	if slices.Contains(c.path, "") {
		return command{}, fmt.Errorf("path %s: empty key", args[1])
	}
	return c, nil
}

// execPath runs a parsed path command: one line per level of the path,
// or the reset's confirmation.
func (c command) execPath(ctx context.Context, lim *core.Limiter, out io.Writer) error {
	pr, err := lim.PreparePath(c.scope, c.levels...)
	if err != nil {
		return err
	}
	if c.op == "path reset" {
		if err := pr.Reset(ctx, c.path...); err != nil {
			return err
		}
		fmt.Fprintf(out, "path %s reset at levels %s%s\n", quote(strings.Join(c.path, "/")), strings.Join(pr.Levels()[:len(c.path)], ", "), scopeText(c.scope))
		return nil
	}
	levels, err := pr.Peek(ctx, c.path...)
	if err != nil {
		return err
	}
	for i, res := range levels {
		fmt.Fprintf(out, "%s %s: %d of %d left, full in %s", res.Level, quote(c.path[i]), res.Remaining, res.Limit.Burst, ceilSecond(res.ResetAfter))
		switch {
		case res.Locked:
			fmt.Fprintf(out, "; locked for %s", ceilSecond(res.RetryAfter))
		case !res.Allowed:
			fmt.Fprintf(out, "; next admitted in %s", ceilSecond(res.RetryAfter))
		}
		fmt.Fprintln(out)
	}
	return nil
}
