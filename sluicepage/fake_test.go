package sluicepage_test

import (
	"context"

	"github.com/sluicehq/sluice/sluicepage"
)

// fakeSource is a Source that returns what its fields hold.
type fakeSource struct {
	limits    []sluicepage.Limit
	top       []sluicepage.Talkers
	topErr    error
	warnings  []sluicepage.Warning
	warnErr   error
	health    sluicepage.Health
	fleet     int
	fleetErr  error
	overrides []sluicepage.OverrideSet
	// block, when set, makes every method wait for its context to end.
	block bool
	// panics, when set, makes Limits panic with it.
	panics any
}

func (f *fakeSource) wait(ctx context.Context) error {
	if f.block {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (f *fakeSource) Limits(ctx context.Context) ([]sluicepage.Limit, error) {
	if f.panics != nil {
		panic(f.panics)
	}
	return f.limits, f.wait(ctx)
}

func (f *fakeSource) TopTalkers(ctx context.Context) ([]sluicepage.Talkers, error) {
	if err := f.wait(ctx); err != nil {
		return nil, err
	}
	return f.top, f.topErr
}

func (f *fakeSource) Warnings(ctx context.Context) ([]sluicepage.Warning, error) {
	if err := f.wait(ctx); err != nil {
		return nil, err
	}
	return f.warnings, f.warnErr
}

func (f *fakeSource) Health(ctx context.Context) (sluicepage.Health, error) {
	return f.health, f.wait(ctx)
}

func (f *fakeSource) FleetSize(ctx context.Context) (int, error) {
	if err := f.wait(ctx); err != nil {
		return 0, err
	}
	return f.fleet, f.fleetErr
}

func (f *fakeSource) Overrides(ctx context.Context) ([]sluicepage.OverrideSet, error) {
	return f.overrides, f.wait(ctx)
}
