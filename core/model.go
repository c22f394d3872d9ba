package core

import "github.com/sluicehq/sluice/core/internal/model"

// The engine's names for what it shares with its stores (package
// core/internal/model, below both): the bucket's integer limits and
// calendars, a decision, and the records a store is asked and answers
// with. They are aliases, so a value crosses to a store as it is.
type (
	decision    = model.Decision
	tickLimit   = model.Tick
	stepper     = model.Stepper
	calendar    = model.Calendar
	stepWindow  = model.StepWindow
	noAnswer    = model.NoAnswer
	slotAsk     = model.SlotAsk
	slot        = model.Slot
	slotRef     = model.SlotRef
	lostSlot    = model.LostSlot
	settleAsk   = model.SettleAsk
	pathAsk     = model.PathAsk
	shareGate   = model.ShareAsk
	buckets     = model.Buckets
	renewal     = model.Renewal
	leaseCall   = model.LeaseCall
	leaseAnswer = model.LeaseAnswer
	background  = model.Background
)

const (
	maxExact     = model.MaxExact
	maxLeaseLife = model.MaxLeaseLife
)

var errInMemory = model.ErrInMemory

// errPaused is model.ErrPaused: a store call that timed out while this
// process was paused.
var errPaused = model.ErrPaused

// newID is model.NewID: the one kind of random id the library writes.
func newID() string { return model.NewID() }
