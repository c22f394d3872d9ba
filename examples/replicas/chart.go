package main

import (
	"bytes"
	"cmp"
	"fmt"
	"html"
	"math"
	"os"
	"time"
)

// series is one line of a chart.
type series struct {
	name, color string
	times       []time.Duration // admitted requests
}

var colors = map[string]string{
	"per-replica memory buckets": "#d62728",
	"Redis fixed window":         "#ff7f0e",
	"sluice":                     "#1f77b4",
}

// staticColor draws sluice sized by WithFallbackReplicas, whatever the count.
const staticColor = "#9467bd"

// writeChart draws, for each approach, the requests admitted in the trailing
// second, every 100 ms: one panel for the main traffic and one for the
// scale-out and outage.
func writeChart(path string, cfg *config, main []*phase, out *outagePhase) error {
	const width, panelH = 1000, 320
	var b bytes.Buffer
	height := panelH
	if out != nil {
		height = 2 * panelH
	}
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)

	var lines []series
	for _, p := range main {
		lines = append(lines, series{p.name, colors[p.name], p.admittedTimes()})
	}
	var shade [][2]time.Duration
	for _, b := range main[0].bursts {
		shade = append(shade, [2]time.Duration{b - burstLen/2, b + burstLen/2})
	}
	title := fmt.Sprintf("Admitted in the trailing second: %d requests/s offered, limit %d/s (shaded: bursts across a second boundary)", cfg.rate, cfg.limit)
	panel(&b, 0, width, panelH, title, cfg.limit, main[0].length, lines, shade)

	if out != nil {
		lines = nil
		for _, r := range []*outageRun{out.fixed, out.fleet, out.static} {
			lines = append(lines, series{r.name, cmp.Or(colors[r.name], staticColor), r.admittedTimes()})
		}
		title = fmt.Sprintf("Redis outage (shaded), %d → %d replicas at %.1f s: %d requests/s offered, limit %d/s (separate runs)",
			cfg.replicas(), len(out.weights), out.scaleAt.Seconds(), cfg.rate, cfg.limit)
		panel(&b, panelH, width, panelH, title, cfg.limit, out.fleet.length, lines, [][2]time.Duration{{out.fleet.cut, out.fleet.restored}})
	}
	b.WriteString("</svg>\n")
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// panel draws one chart at vertical offset top.
func panel(b *bytes.Buffer, top, width, height int, title string, limit int, length time.Duration, lines []series, shade [][2]time.Duration) {
	const left, right, upper, lower = 60, 250, 30, 40
	plotW, plotH := float64(width-left-right), float64(height-upper-lower)
	const step = 100 * time.Millisecond

	// The values: admitted in (t-1s, t], from t = 1s.
	values := make([][]int, len(lines))
	peak := limit
	for i, l := range lines {
		for t := time.Second; t <= length; t += step {
			n := countIn(l.times, t-time.Second, t)
			values[i] = append(values[i], n)
			peak = max(peak, n)
		}
	}
	yStep := niceStep(float64(peak) / 5)
	yMax := math.Ceil(float64(peak)/yStep) * yStep
	x := func(t time.Duration) float64 { return left + plotW*t.Seconds()/length.Seconds() }
	y := func(v float64) float64 { return float64(top+upper) + plotH*(1-v/yMax) }

	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="14">%s</text>`+"\n", left, top+18, html.EscapeString(title))
	for _, s := range shade {
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#eeeeee"/>`+"\n", x(s[0]), y(yMax), x(s[1])-x(s[0]), plotH)
	}
	for v := 0.0; v <= yMax; v += yStep {
		fmt.Fprintf(b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#dddddd"/>`+"\n", left, left+plotW, y(v), y(v))
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">%.0f</text>`+"\n", left-6, y(v)+4, v)
	}
	tick := time.Second
	if length > 30*time.Second {
		tick = 5 * time.Second
	}
	for t := time.Duration(0); t <= length; t += tick {
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%d s</text>`+"\n", x(t), y(0)+18, int(t.Seconds()))
	}
	fmt.Fprintf(b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="black" stroke-dasharray="6 4"/>`+"\n",
		left, left+plotW, y(float64(limit)), y(float64(limit)))
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f">limit %d/s</text>`+"\n", left+plotW+8, y(float64(limit))+4, limit)

	for i, l := range lines {
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="2" points="`, l.color)
		for j, v := range values[i] {
			t := time.Second + time.Duration(j)*step
			fmt.Fprintf(b, "%.1f,%.1f ", x(t), y(float64(v)))
		}
		b.WriteString(`"/>` + "\n")
		ly := float64(top+upper) + 20 + float64(i)*20
		fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n",
			left+plotW+8, left+plotW+28, ly, ly, l.color)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", left+plotW+34, ly+4, html.EscapeString(l.name))
	}
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if x <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}
