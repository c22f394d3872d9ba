package model_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core/internal/model"
)

// A monthly calendar's windows around an instant: the month holding it
// starts at Start(First+1), and the next at Start(First+2).
func ExampleCalendar_Windows() {
	c := &model.Calendar{Unit: model.Monthly, Loc: time.UTC}
	now := time.Date(2026, 2, 14, 12, 0, 0, 0, time.UTC).UnixMicro()
	w := c.Windows(now, 1000, 1000)
	fmt.Println(time.UnixMicro(w.Start[1]).UTC().Format(time.DateOnly), time.UnixMicro(w.Start[2]).UTC().Format(time.DateOnly))
	// Output: 2026-02-01 2026-03-01
}
