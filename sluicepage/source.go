package sluicepage

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice/core"
)

// ErrNotEnabled is what a [Source] returns for a section it has nothing to
// fill with: a feature the limiter does not run, or a source that does not
// read it. The page shows the section as "not enabled" rather than as a
// failure.
var ErrNotEnabled = errors.New("sluicepage: not enabled")

// Source is what the page reads, one method per section. The page calls
// the methods at each refresh of each open page, concurrently and under
// the deadline [WithTimeout] sets, so they must be safe for concurrent
// use and should return quickly; a method returns [ErrNotEnabled] for a
// section it cannot fill, and any other error is shown in its section.
// Slices may be long: the page shows at most 100 rows of each table and
// says how many it left out.
//
// [LimiterSource] implements it over a [core.Limiter]; a program may
// implement it itself, to add what it knows or to show several limiters.
type Source interface {
	// Limits returns the limits the page lists, in the order shown.
	Limits(ctx context.Context) ([]Limit, error)
	// TopTalkers returns the heaviest keys of each limit.
	TopTalkers(ctx context.Context) ([]Talkers, error)
	// Warnings returns keys that crossed a threshold of their limit,
	// latest first.
	Warnings(ctx context.Context) ([]Warning, error)
	// Health returns the store's health.
	Health(ctx context.Context) (Health, error)
	// FleetSize returns the number of live instances sharing the limits;
	// 0 when they are not counted.
	FleetSize(ctx context.Context) (int, error)
	// Overrides returns the sets of per-key overrides in force.
	Overrides(ctx context.Context) ([]OverrideSet, error)
}

// Limit is one row of the page's list of limits: a name for people, and
// the limits checked together on each key.
type Limit struct {
	Name   string
	Limits []core.Limit
}

// Talkers are the heaviest keys of one limit, over the fleet, since
// Since: by admitted cost and by denials.
type Talkers struct {
	// Limit names the limit, as a [Limit]'s Name does.
	Limit string `json:"limit"`
	// ByAdmitted are the keys of largest admitted cost, largest first;
	// ByDenied those of most denials.
	ByAdmitted []Talker `json:"by_admitted"`
	ByDenied   []Talker `json:"by_denied"`
	// Admitted and Denied are the limit's totals since Since.
	Admitted int64 `json:"admitted"`
	Denied   int64 `json:"denied"`
	// AdmittedError and DeniedError bound how far each count of a key
	// may be from the truth (a sketch's stated error); 0 when exact.
	AdmittedError int64 `json:"admitted_error"`
	DeniedError   int64 `json:"denied_error"`
	// Since is when the counts start.
	Since time.Time `json:"since"`
}

// Talker is one heavy key: what the limit admitted of it and how often it
// denied it.
type Talker struct {
	// Key is the key as the source reports it: a name, or a digest of
	// one where names are not kept.
	Key      string `json:"key"`
	Admitted int64  `json:"admitted"` // cost admitted
	Denied   int64  `json:"denied"`   // requests denied
}

// Warning is a key that crossed a warning threshold of a limit.
type Warning struct {
	// Limit names the limit.
	Limit string `json:"limit"`
	// Key is the key that crossed.
	Key string `json:"key"`
	// Threshold is the share of the limit used at which it warns: 0.8
	// for 80%.
	Threshold float64 `json:"threshold"`
	// Remaining is what the limit still admitted after the crossing.
	Remaining int `json:"remaining"`
	// At is when the key crossed, and Until when the warning ends: no
	// other is raised for the key and limit before.
	At    time.Time `json:"at"`
	Until time.Time `json:"until"`
}

// Health is the store's health.
type Health struct {
	// Ready reports whether the store can decide now.
	Ready bool `json:"ready"`
	// Cause says in words why it cannot; empty when Ready.
	Cause string `json:"cause,omitempty"`
	// Outages are the store's nodes that are judged unavailable now,
	// whose keys are decided under the failure policy.
	Outages []Outage `json:"outages"`
	// AckMisses counts decisions made without the replica acknowledgement
	// asked for (see [core.Limiter.ReplicaAckMisses]).
	AckMisses int64 `json:"ack_misses"`
}

// Outage is a store node judged unavailable (its breaker open).
type Outage struct {
	Node  string    `json:"node"`
	Since time.Time `json:"since"`
	Err   string    `json:"error,omitempty"`
}

// OverrideSet is one set of per-key overrides (see package overrides).
type OverrideSet struct {
	Name    string `json:"name"`
	Version int64  `json:"version"`
	// Len is the number of entries in the set; Entries may hold fewer.
	Len int `json:"len"`
	// Entries are entries of the set, sorted by key.
	Entries []Override `json:"entries"`
}

// Override is one entry of a set: its key and the override's text form
// (such as "50/m burst 10", "allow" or "deny").
type Override struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}
