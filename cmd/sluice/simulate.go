package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core/replay"
)

const simulateUsage = `usage:
  sluice simulate -limits FILE -log FILE [-top N] [-deny-at-most PERCENT]
  sluice convert -key FIELD [-prefix TEXT] [-in FILE] [-out FILE]

simulate replays a recorded log (JSON lines, see docs/replay.md) through
sluice's own arithmetic under each rule of the limits file, and prints per
rule and limit what was admitted and denied. convert turns an access log
in the combined format (nginx's and Apache's default) into that log.

flags:
`

// offline reports whether args name a command that needs no Redis.
func offline(args []string) bool {
	return len(args) > 0 && (args[0] == "simulate" || args[0] == "convert")
}

// runOffline runs simulate or convert and returns the exit code: 0, 1
// when a file cannot be read or written, 2 for a usage error or a bad
// limits file.
func runOffline(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, simulateUsage)
		fs.PrintDefaults()
	}
	fail := func(code int, err error) int {
		fmt.Fprintf(stderr, "sluice %s: %v\n", args[0], err)
		return code
	}
	if args[0] == "convert" {
		key := fs.String("key", "", "convert: the field that is the key: ip, user, method, path, request (method and path), referer or agent")
		prefix := fs.String("prefix", "", `convert: put before each key (default: the field's name and ":", such as "ip:")`)
		in := fs.String("in", "-", "convert: the access log (- for standard input)")
		out := fs.String("out", "-", "convert: where to write the events (- for standard output)")
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		if fs.NArg() > 0 {
			return fail(2, fmt.Errorf("unexpected arguments %q", fs.Args()))
		}
		field, ok := combinedFields[*key]
		if !ok {
			return fail(2, fmt.Errorf("-key %q: want ip, user, method, path, request, referer or agent", *key))
		}
		p := *key + ":"
		if isSet(fs, "prefix") {
			p = *prefix
		}
		return convert(*in, *out, field, p, stdout, stderr)
	}
	limits := fs.String("limits", "", "simulate: the limits file: one rule a line (see docs/replay.md)")
	logFile := fs.String("log", "", "simulate: the recorded log (- for standard input)")
	top := fs.Int("top", 5, "simulate: how many of the most denied keys to list per limit")
	most := fs.Float64("deny-at-most", 1, "simulate: find each limit's smallest version that alone denies at most this percentage of requests (0: do not look)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	switch {
	case fs.NArg() > 0:
		return fail(2, fmt.Errorf("unexpected arguments %q", fs.Args()))
	case *limits == "" || *logFile == "":
		fs.Usage()
		return 2
	case *top < 0 || !(*most >= 0 && *most < 100):
		return fail(2, errors.New("-top must be at least 0, and -deny-at-most from 0 to under 100"))
	}
	rules, err := readRules(*limits)
	if err != nil {
		return fail(2, err)
	}
	events, err := readEvents(*logFile, stderr)
	if err != nil {
		return fail(1, err)
	}
	replay.Sort(events)
	o := replay.Options{Top: *top, DenyAtMost: *most / 100}
	reports, err := replay.Simulate(events, rules, o)
	if err != nil {
		return fail(2, err)
	}
	fmt.Fprintf(stdout, "%d events", len(events))
	if len(events) > 0 {
		fmt.Fprintf(stdout, " from %s to %s", events[0].Time.UTC().Format(time.RFC3339Nano), events[len(events)-1].Time.UTC().Format(time.RFC3339Nano))
	}
	fmt.Fprintln(stdout)
	replay.Print(stdout, reports, o)
	return 0
}

// isSet reports whether the flag name was given.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// readRules reads the limits file.
func readRules(name string) ([]replay.Rule, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rules, err := replay.ParseRules(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return rules, nil
}

// maxBadLines is how many bad lines a command reports one by one.
const maxBadLines = 20

// readEvents reads the log, reporting bad lines on stderr.
func readEvents(name string, stderr io.Writer) ([]replay.Event, error) {
	r := io.Reader(os.Stdin)
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	bad := 0
	events, err := replay.Read(r, func(b replay.BadLine) {
		bad++
		if bad <= maxBadLines {
			fmt.Fprintf(stderr, "sluice simulate: %s: %v (skipped)\n", name, b)
		}
	})
	if bad > maxBadLines {
		fmt.Fprintf(stderr, "sluice simulate: %s: %d bad lines in all, skipped\n", name, bad)
	}
	return events, err
}

// combinedLine matches a line of the combined log format:
//
//	203.0.113.7 - alice [28/Nov/2026:22:00:00 +0000] "GET /a?b=c HTTP/1.1" 200 512 "-" "curl/8"
//
// The referer and user agent are optional (the common format).
var combinedLine = regexp.MustCompile(`^(\S+) \S+ (\S+) \[([^\]]+)\] "([^"]*)" (\d{3}) \S+(?: "([^"]*)" "([^"]*)")?`)

// combinedFields are the fields convert can take a key from: their
// group in combinedLine, or a part of the request (negative).
var combinedFields = map[string]int{"ip": 1, "user": 2, "referer": 6, "agent": 7, "method": -1, "path": -2, "request": -3}

// parseCombined reads one line of the combined format into an event keyed
// by field, with prefix before the key.
func parseCombined(line string, field int, prefix string) (replay.Event, error) {
	m := combinedLine.FindStringSubmatch(line)
	if m == nil {
		return replay.Event{}, errors.New("not in the combined log format")
	}
	t, err := time.Parse("02/Jan/2006:15:04:05 -0700", m[3])
	if err != nil {
		return replay.Event{}, fmt.Errorf("time %q: want 02/Jan/2006:15:04:05 -0700", m[3])
	}
	status, _ := strconv.Atoi(m[5]) // three digits
	if status < 100 || status > 599 {
		return replay.Event{}, fmt.Errorf("status %d: want 100 to 599", status)
	}
	var key string
	if field > 0 {
		key = m[field]
	} else {
		method, rest, _ := strings.Cut(m[4], " ")
		path, _, _ := strings.Cut(rest, " ")
		path, _, _ = strings.Cut(path, "?")
		switch field {
		case -1:
			key = method
		case -2:
			key = path
		default:
			key = method + " " + path
		}
	}
	if key == "" || key == "-" {
		return replay.Event{}, errors.New("the key's field is empty")
	}
	return replay.Event{Time: t, Key: prefix + key, Cost: 1, Status: status}, nil
}

// convert converts the access log in into events written to out.
func convert(in, out string, field int, prefix string, stdout, stderr io.Writer) int {
	r := io.Reader(os.Stdin)
	if in != "-" {
		f, err := os.Open(in)
		if err != nil {
			fmt.Fprintf(stderr, "sluice convert: %v\n", err)
			return 1
		}
		defer f.Close()
		r = f
	}
	w := stdout
	var file *os.File
	if out != "-" {
		var err error
		if file, err = os.Create(out); err != nil {
			fmt.Fprintf(stderr, "sluice convert: %v\n", err)
			return 1
		}
		w = file
	}
	bw := bufio.NewWriter(w)
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, replay.MaxLine)
	var buf []byte
	n, bad, written := 0, 0, 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		ev, err := parseCombined(line, field, prefix)
		if err != nil {
			bad++
			if bad <= maxBadLines {
				fmt.Fprintf(stderr, "sluice convert: line %d: %v (skipped)\n", n, err)
			}
			continue
		}
		buf = replay.AppendLine(buf[:0], ev)
		bw.Write(buf) // an error stays in bw, for Flush
		written++
	}
	err := sc.Err()
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	if file != nil {
		if cerr := file.Close(); err == nil {
			err = cerr
		}
	}
	if bad > maxBadLines {
		fmt.Fprintf(stderr, "sluice convert: %d bad lines in all, skipped\n", bad)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice convert: line %d: %v\n", n+1, err)
		return 1
	}
	fmt.Fprintf(stderr, "sluice convert: %d events from %d lines\n", written, n)
	return 0
}
