// Package plot draws the pages' figures as SVG on the server, so that a
// page needs no script to show them: line charts (GPU memory over time,
// scores over time) with labelled reference lines (a budget, a hard cap),
// and horizontal bars with a one-sided upper bound (a quality drop)
// against labelled thresholds (the quality tiers).
//
// The SVG is self-contained: colours and dashes are presentation
// attributes, never style attributes, so it draws under a Content
// Security Policy that allows no inline style, and it carries a <title>
// and a <desc> for readers that do not see it. Every text is escaped.
// Each drawn value keeps its data in data-* attributes, so a test (or a
// person) can read back what a mark stands for.
package plot

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ErrNoData is returned for a figure with nothing to draw.
var ErrNoData = errors.New("plot: no data to draw")

// ErrNotFinite is returned for a value that is NaN or infinite.
var ErrNotFinite = errors.New("plot: a value is not finite")

// Point is one (x, y) of a series.
type Point struct{ X, Y float64 }

// Series is a named line of points, drawn in order of X as given.
type Series struct {
	Name   string
	Points []Point
}

// Rule is a labelled reference line at At on the value axis: horizontal
// in a line chart, vertical in a bar chart. Kind picks its look
// (RuleBudget, RuleCap, RuleTier, RuleZero; anything else is drawn as a
// plain dashed line) and is its class in the SVG.
type Rule struct {
	At    float64
	Label string
	Kind  string
}

// Kinds of rule.
const (
	RuleBudget = "budget"
	RuleCap    = "cap"
	RuleTier   = "tier"
	RuleZero   = "zero"
)

// Axis is how an axis is labelled and its ticks written.
type Axis struct {
	// Label names the axis and its unit ("GiB", "seconds since the
	// engine started").
	Label string
	// Time says the values are unix seconds: ticks fall on whole
	// seconds, minutes, hours or days (UTC) and read as times.
	Time bool
	// Format writes a tick (nil: the shortest decimal form the tick
	// step needs).
	Format func(float64) string
	// FromZero makes the axis start at zero when every value is above
	// it (memory, rates).
	FromZero bool
}

// Palette is the colours of the series, in turn (colour-blind safe:
// Okabe and Ito's).
var Palette = []string{"#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000000"}

// ruleColour is each kind of rule's colour.
var ruleColour = map[string]string{RuleBudget: "#b45309", RuleCap: "#b91c1c", RuleTier: "#6b7280", RuleZero: "#9ca3af"}

// Lines is a line chart.
type Lines struct {
	// Title is the figure's title, ID its element id (optional).
	Title, ID string
	X, Y      Axis
	Series    []Series
	// Rules are horizontal lines at values of Y; the Y axis always
	// spans them.
	Rules []Rule
	// Note is a line under the figure ("simulated GPU: ..."); Markers
	// draws each point as a dot as well.
	Note    string
	Markers bool
	// Width and Height in pixels (defaults 640 and 280).
	Width, Height int
}

// margins of a chart: left for the Y ticks, bottom for the X ticks and
// label, top for the title, right for the rules' labels.
const (
	marginLeft   = 64
	marginRight  = 150
	marginTop    = 30
	marginBottom = 46
	legendRow    = 16
	noteRow      = 14
)

// SVG draws the chart. It returns ErrNoData when no series has a point
// and ErrNotFinite (wrapped, naming the value) for a NaN or an infinity.
func (c Lines) SVG() (string, error) {
	w, h := c.Width, c.Height
	if w <= 0 {
		w = 640
	}
	if h <= 0 {
		h = 280
	}
	var xs, ys []float64
	for _, s := range c.Series {
		for i, p := range s.Points {
			if !finite(p.X) || !finite(p.Y) {
				return "", fmt.Errorf("%w: series %q point %d is (%v, %v)", ErrNotFinite, s.Name, i, p.X, p.Y)
			}
			xs, ys = append(xs, p.X), append(ys, p.Y)
		}
	}
	if len(xs) == 0 {
		return "", ErrNoData
	}
	for _, r := range c.Rules {
		if !finite(r.At) {
			return "", fmt.Errorf("%w: rule %q is at %v", ErrNotFinite, r.Label, r.At)
		}
		ys = append(ys, r.At)
	}
	named := 0
	for _, s := range c.Series {
		if s.Name != "" {
			named++
		}
	}
	// The legend under the plot, a series to a line: names can be long
	// (a method's description).
	legendH := 0
	if named > 1 {
		legendH = legendRow*named + 4
	}
	plotL, plotR := float64(marginLeft), float64(w-marginRight)
	plotT, plotB := float64(marginTop), float64(h-marginBottom-legendH)
	if c.Note != "" {
		plotT += noteRow // the note's line under the title
	}
	xd, xt := domain(xs, c.X, 6)
	yd, yt := domain(ys, c.Y, 5)
	sx := Scale{D0: xd[0], D1: xd[1], R0: plotL, R1: plotR}
	sy := Scale{D0: yd[0], D1: yd[1], R0: plotB, R1: plotT}

	var b strings.Builder
	open(&b, c.ID, "plot lines", w, h, c.Title, c.describe())
	// Grid and ticks.
	b.WriteString(`<g class="axis y">`)
	for _, v := range yt {
		y := sy.At(v)
		fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#e5e7eb"/>`, num(plotL), num(y), num(plotR), num(y))
		fmt.Fprintf(&b, `<text x="%s" y="%s" text-anchor="end" dominant-baseline="middle" font-size="11" fill="#4b5563">%s</text>`,
			num(plotL-6), num(y), esc(tick(c.Y, v, yt)))
	}
	fmt.Fprintf(&b, `<text x="14" y="%s" transform="rotate(-90 14 %s)" text-anchor="middle" font-size="11" fill="#374151">%s</text>`,
		num((plotT+plotB)/2), num((plotT+plotB)/2), esc(c.Y.Label))
	b.WriteString(`</g><g class="axis x">`)
	for _, v := range xt {
		x := sx.At(v)
		fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#9ca3af"/>`, num(x), num(plotB), num(x), num(plotB+4))
		fmt.Fprintf(&b, `<text x="%s" y="%s" text-anchor="middle" font-size="11" fill="#4b5563">%s</text>`, num(x), num(plotB+16), esc(tick(c.X, v, xt)))
	}
	fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#9ca3af"/>`, num(plotL), num(plotB), num(plotR), num(plotB))
	fmt.Fprintf(&b, `<text x="%s" y="%s" text-anchor="middle" font-size="11" fill="#374151">%s</text>`, num((plotL+plotR)/2), num(plotB+32), esc(c.X.Label))
	b.WriteString(`</g>`)
	// Rules, labelled at their right end.
	for _, r := range c.Rules {
		y := sy.At(r.At)
		col := colour(r.Kind)
		fmt.Fprintf(&b, `<g class="rule %s" data-at="%s"><line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="1.5" stroke-dasharray="%s"/>`,
			attr(r.Kind), val(r.At), num(plotL), num(y), num(plotR), num(y), col, dash(r.Kind))
		fmt.Fprintf(&b, `<text x="%s" y="%s" dominant-baseline="middle" font-size="11" fill="%s">%s</text></g>`, num(plotR+6), num(y), col, esc(r.Label))
	}
	// Series.
	for i, s := range c.Series {
		col := Palette[i%len(Palette)]
		fmt.Fprintf(&b, `<g class="series" data-name="%s">`, esc(s.Name))
		if len(s.Points) > 1 {
			pts := make([]string, len(s.Points))
			for j, p := range s.Points {
				pts[j] = num(sx.At(p.X)) + "," + num(sy.At(p.Y))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.75" stroke-linejoin="round" points="%s"/>`, col, strings.Join(pts, " "))
		}
		if c.Markers || len(s.Points) == 1 {
			for _, p := range s.Points {
				fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="3.5" fill="%s" data-x="%s" data-y="%s"><title>%s</title></circle>`,
					num(sx.At(p.X)), num(sy.At(p.Y)), col, val(p.X), val(p.Y), esc(s.Name+": "+tickFull(c.X, p.X)+", "+tickFull(c.Y, p.Y)))
			}
		}
		b.WriteString(`</g>`)
	}
	if named > 1 {
		b.WriteString(`<g class="legend">`)
		k := 0
		for i, s := range c.Series {
			if s.Name == "" {
				continue
			}
			x := plotL
			y := float64(h-legendH) + float64(k)*legendRow + 4
			fmt.Fprintf(&b, `<rect x="%s" y="%s" width="12" height="3" fill="%s"/><text x="%s" y="%s" dominant-baseline="middle" font-size="11" fill="#374151">%s</text>`,
				num(x), num(y-1.5), Palette[i%len(Palette)], num(x+16), num(y), esc(s.Name))
			k++
		}
		b.WriteString(`</g>`)
	}
	closeSVG(&b, c.Note, w, h)
	return b.String(), nil
}

// describe is the chart's <desc>: what a reader without the picture
// needs (the series, their ranges, the rules).
func (c Lines) describe() string {
	var parts []string
	for _, s := range c.Series {
		if len(s.Points) == 0 {
			continue
		}
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, p := range s.Points {
			lo, hi = math.Min(lo, p.Y), math.Max(hi, p.Y)
		}
		parts = append(parts, fmt.Sprintf("%s: %d points, %s from %s to %s", nameOr(s.Name, "series"), len(s.Points), c.Y.Label, tickFull(c.Y, lo), tickFull(c.Y, hi)))
	}
	for _, r := range c.Rules {
		parts = append(parts, r.Label)
	}
	if c.Note != "" {
		parts = append(parts, c.Note)
	}
	return strings.Join(parts, "; ")
}

// Bar is one horizontal bar: Value from zero, and when HasUpper a
// whisker from Value to Upper (a one-sided upper bound).
type Bar struct {
	Label    string
	Value    float64
	Upper    float64
	HasUpper bool
	// Muted draws the bar grey (a domain that does not count).
	Muted bool
}

// Bars is a horizontal bar chart with vertical rules (thresholds).
type Bars struct {
	Title, ID string
	// X is the value axis.
	X    Axis
	Bars []Bar
	// Rules are vertical lines at values of X; the axis always spans
	// them and zero.
	Rules []Rule
	Note  string
	// Width in pixels (default 640); the height follows the bars.
	Width int
}

const barRow = 26

// SVG draws the bars. It returns ErrNoData without bars and ErrNotFinite
// (wrapped) for a NaN or an infinity.
func (c Bars) SVG() (string, error) {
	if len(c.Bars) == 0 {
		return "", ErrNoData
	}
	w := c.Width
	if w <= 0 {
		w = 640
	}
	vals := []float64{0}
	for _, br := range c.Bars {
		if !finite(br.Value) || (br.HasUpper && !finite(br.Upper)) {
			return "", fmt.Errorf("%w: bar %q is %v (upper %v)", ErrNotFinite, br.Label, br.Value, br.Upper)
		}
		vals = append(vals, br.Value)
		if br.HasUpper {
			vals = append(vals, br.Upper)
		}
	}
	for _, r := range c.Rules {
		if !finite(r.At) {
			return "", fmt.Errorf("%w: rule %q is at %v", ErrNotFinite, r.Label, r.At)
		}
		vals = append(vals, r.At)
	}
	const labelW = 120
	top := 34
	if c.Note != "" {
		top += noteRow
	}
	h := top + barRow*len(c.Bars) + marginBottom
	plotL, plotR := float64(labelW), float64(w-40)
	plotT, plotB := float64(top), float64(top+barRow*len(c.Bars))
	xd, xt := domain(vals, c.X, 6)
	sx := Scale{D0: xd[0], D1: xd[1], R0: plotL, R1: plotR}

	var b strings.Builder
	open(&b, c.ID, "plot bars", w, h, c.Title, c.describe())
	b.WriteString(`<g class="axis x">`)
	for _, v := range xt {
		x := sx.At(v)
		fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#e5e7eb"/>`, num(x), num(plotT), num(x), num(plotB))
		fmt.Fprintf(&b, `<text x="%s" y="%s" text-anchor="middle" font-size="11" fill="#4b5563">%s</text>`, num(x), num(plotB+16), esc(tick(c.X, v, xt)))
	}
	fmt.Fprintf(&b, `<text x="%s" y="%s" text-anchor="middle" font-size="11" fill="#374151">%s</text></g>`, num((plotL+plotR)/2), num(plotB+32), esc(c.X.Label))
	zero := sx.At(0)
	for i, br := range c.Bars {
		y := plotT + float64(i)*barRow
		x0, x1 := zero, sx.At(br.Value)
		if x1 < x0 {
			x0, x1 = x1, x0
		}
		fill := Palette[0]
		if br.Muted {
			fill = "#9ca3af"
		}
		fmt.Fprintf(&b, `<g class="bar" data-label="%s" data-value="%s"`, esc(br.Label), val(br.Value))
		if br.HasUpper {
			fmt.Fprintf(&b, ` data-upper="%s"`, val(br.Upper))
		}
		fmt.Fprintf(&b, `><text x="%s" y="%s" text-anchor="end" dominant-baseline="middle" font-size="12" fill="#111827">%s</text>`, num(plotL-8), num(y+barRow/2), esc(br.Label))
		fmt.Fprintf(&b, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s"/>`, num(x0), num(y+6), num(math.Max(x1-x0, 0.5)), num(barRow-12), fill)
		if br.HasUpper {
			xv, xu := sx.At(br.Value), sx.At(br.Upper)
			mid := y + barRow/2
			fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#111827" stroke-width="1.5"/>`, num(xv), num(mid), num(xu), num(mid))
			fmt.Fprintf(&b, `<line class="upper" x1="%s" y1="%s" x2="%s" y2="%s" stroke="#111827" stroke-width="2"/>`, num(xu), num(mid-6), num(xu), num(mid+6))
		}
		b.WriteString(`</g>`)
	}
	fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#6b7280"/>`, num(zero), num(plotT-4), num(zero), num(plotB))
	for i, r := range c.Rules {
		x := sx.At(r.At)
		col := colour(r.Kind)
		fmt.Fprintf(&b, `<g class="rule %s" data-at="%s"><line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="1.5" stroke-dasharray="%s"/>`,
			attr(r.Kind), val(r.At), num(x), num(plotT-4), num(x), num(plotB), col, dash(r.Kind))
		// Labels alternate in height so that two close rules stay legible.
		fmt.Fprintf(&b, `<text x="%s" y="%s" text-anchor="middle" font-size="11" fill="%s">%s</text></g>`, num(x), num(plotT-8-float64(i%2)*12), col, esc(r.Label))
	}
	closeSVG(&b, c.Note, w, h)
	return b.String(), nil
}

func (c Bars) describe() string {
	parts := make([]string, 0, len(c.Bars)+len(c.Rules)+1)
	for _, br := range c.Bars {
		s := br.Label + " " + tickFull(c.X, br.Value)
		if br.HasUpper {
			s += " (upper bound " + tickFull(c.X, br.Upper) + ")"
		}
		parts = append(parts, s)
	}
	for _, r := range c.Rules {
		parts = append(parts, r.Label)
	}
	if c.Note != "" {
		parts = append(parts, c.Note)
	}
	return strings.Join(parts, "; ")
}

func open(b *strings.Builder, id, class string, w, h int, title, desc string) {
	b.WriteString(`<svg xmlns="http://www.w3.org/2000/svg"`)
	if id != "" {
		fmt.Fprintf(b, ` id="%s"`, esc(id))
	}
	fmt.Fprintf(b, ` class="%s" viewBox="0 0 %d %d" width="%d" height="%d" role="img" font-family="system-ui, sans-serif">`, class, w, h, w, h)
	fmt.Fprintf(b, `<title>%s</title><desc>%s</desc>`, esc(title), esc(desc))
	if title != "" {
		fmt.Fprintf(b, `<text class="title" x="8" y="18" font-size="13" font-weight="600" fill="#111827">%s</text>`, esc(title))
	}
}

// closeSVG writes the note on its own line under the title (a figure
// from a simulation says so where it is seen) and ends the SVG.
func closeSVG(b *strings.Builder, note string, w, h int) {
	if note != "" {
		fmt.Fprintf(b, `<text class="note" x="8" y="32" font-size="11" fill="#a16207">%s</text>`, esc(note))
	}
	b.WriteString(`</svg>`)
}

// Scale maps the domain [D0, D1] linearly onto the range [R0, R1] (pixels;
// R1 < R0 for a Y axis, whose pixels grow downwards).
type Scale struct{ D0, D1, R0, R1 float64 }

// At is v's pixel.
func (s Scale) At(v float64) float64 {
	if s.D1 == s.D0 {
		return (s.R0 + s.R1) / 2
	}
	return s.R0 + (v-s.D0)/(s.D1-s.D0)*(s.R1-s.R0)
}

// domain returns the axis' extent, widened to whole ticks, and its ticks.
func domain(vs []float64, ax Axis, n int) ([2]float64, []float64) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range vs {
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	if ax.FromZero && lo > 0 {
		lo = 0
	}
	if lo == hi {
		// One value: a span around it, so it sits mid-axis.
		pad := math.Abs(lo) * 0.1
		if pad == 0 {
			pad = 1
		}
		if ax.Time {
			pad = 60
		}
		lo, hi = lo-pad, hi+pad
		if ax.FromZero && lo < 0 && vs[0] >= 0 {
			lo = 0
		}
	}
	var ticks []float64
	if ax.Time {
		ticks = TimeTicks(lo, hi, n)
	} else {
		ticks = Ticks(lo, hi, n)
	}
	d := [2]float64{math.Min(lo, ticks[0]), math.Max(hi, ticks[len(ticks)-1])}
	return d, ticks
}

// Ticks returns about n evenly spaced round values (1, 2 or 5 times a
// power of ten apart) that cover [lo, hi]: the first at or below lo, the
// last at or above hi.
func Ticks(lo, hi float64, n int) []float64 {
	if n < 1 {
		n = 1
	}
	if hi < lo {
		lo, hi = hi, lo
	}
	if hi == lo {
		return []float64{lo}
	}
	step := NiceStep((hi - lo) / float64(n))
	first := math.Floor(lo/step+1e-9) * step
	var out []float64
	for i := 0; ; i++ {
		v := first + float64(i)*step
		// Snap to the step's decimals, so 0.1 + 0.2 reads 0.3.
		v = math.Round(v/step) * step
		out = append(out, v)
		if v >= hi-step*1e-9 || i > 1000 {
			break
		}
	}
	return out
}

// NiceStep is the least of 1, 2, 5 and 10 times a power of ten that is at
// least raw.
func NiceStep(raw float64) float64 {
	if raw <= 0 || !finite(raw) {
		return 1
	}
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw*(1-1e-12) {
			return m * mag
		}
	}
	return 10 * mag
}

// timeSteps are the spacings of time ticks, in seconds.
var timeSteps = []float64{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 2 * 86400, 7 * 86400, 14 * 86400, 30 * 86400, 91 * 86400, 365 * 86400}

// TimeTicks returns about n ticks over the unix seconds [lo, hi], on
// whole seconds, minutes, hours or days of UTC.
func TimeTicks(lo, hi float64, n int) []float64 {
	if n < 1 {
		n = 1
	}
	raw := (hi - lo) / float64(n)
	step := timeSteps[len(timeSteps)-1]
	for _, s := range timeSteps {
		if s >= raw {
			step = s
			break
		}
	}
	first := math.Floor(lo/step) * step
	var out []float64
	for v := first; ; v += step {
		out = append(out, v)
		if v >= hi || len(out) > 1000 {
			break
		}
	}
	return out
}

// tick writes v as a tick of an axis whose ticks are ts.
func tick(ax Axis, v float64, ts []float64) string {
	if ax.Format != nil {
		return ax.Format(v)
	}
	step := 0.0
	if len(ts) > 1 {
		step = ts[1] - ts[0]
	}
	if ax.Time {
		t := time.Unix(int64(v), 0).UTC()
		switch {
		case step >= 86400:
			return t.Format("Jan 2")
		case step >= 60:
			if t.Hour() == 0 && t.Minute() == 0 {
				return t.Format("Jan 2")
			}
			return t.Format("15:04")
		default:
			return t.Format("15:04:05")
		}
	}
	return decimal(v, step)
}

// tickFull writes v in full (a point's tooltip, the description).
func tickFull(ax Axis, v float64) string {
	if ax.Format != nil {
		return ax.Format(v)
	}
	if ax.Time {
		return time.Unix(int64(v), 0).UTC().Format("2006-01-02 15:04:05 UTC")
	}
	return strconv.FormatFloat(v, 'g', 6, 64)
}

// decimal writes v with as many decimals as step needs.
func decimal(v, step float64) string {
	d := 0
	if step > 0 && step < 1 {
		d = int(math.Ceil(-math.Log10(step) - 1e-9))
	}
	if math.Abs(v) < step*1e-9 {
		v = 0
	}
	return strconv.FormatFloat(v, 'f', d, 64)
}

// num writes a coordinate with two decimals at most.
func num(v float64) string {
	s := strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
	if s == "-0" {
		return "0"
	}
	return s
}

// val writes a value in full, for data-* attributes.
func val(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func colour(kind string) string {
	if c, ok := ruleColour[kind]; ok {
		return c
	}
	return "#6b7280"
}

func dash(kind string) string {
	switch kind {
	case RuleCap:
		return "2 3"
	case RuleZero:
		return "1 0"
	}
	return "6 4"
}

// attr keeps a class to the characters a class name needs.
func attr(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			return r
		}
		return -1
	}, strings.ToLower(s))
}

func nameOr(s, or string) string {
	if s == "" {
		return or
	}
	return s
}

var escaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&#39;")

// esc escapes text and attribute values.
func esc(s string) string { return escaper.Replace(s) }
