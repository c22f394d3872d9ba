package redisstore

import "github.com/sluicehq/sluice/core/internal/model"

// The store's names for what it shares with the engine (package
// core/internal/model, below both). They are aliases: a value the engine
// hands down is used as it is.
type (
	plan        = model.Plan
	decision    = model.Decision
	noAnswer    = model.NoAnswer
	slotAsk     = model.SlotAsk
	slot        = model.Slot
	slotRef     = model.SlotRef
	lostSlot    = model.LostSlot
	settleAsk   = model.SettleAsk
	pathAsk     = model.PathAsk
	shareAsk    = model.ShareAsk
	buckets     = model.Buckets
	renewal     = model.Renewal
	leaseCall   = model.LeaseCall
	leaseAnswer = model.LeaseAnswer
	background  = model.Background
)

const maxLeaseLife = model.MaxLeaseLife

var (
	errUnavailable = model.ErrUnavailable
	errLeaseLost   = model.ErrLeaseLost
)

// newID is model.NewID: the one kind of random id the library writes.
func newID() string { return model.NewID() }
