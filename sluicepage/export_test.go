package sluicepage

import "time"

// SetWarningsClock makes w read the time from now.
func SetWarningsClock(w *Warnings, now func() time.Time) { w.now = now }
