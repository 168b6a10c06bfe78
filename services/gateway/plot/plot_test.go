package plot

import (
	"encoding/xml"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestNiceStep(t *testing.T) {
	for _, tt := range []struct{ raw, want float64 }{
		{0.0096, 0.01}, {0.011, 0.02}, {2.4, 5}, {3.33, 5}, {5, 5}, {5.01, 10}, {12, 20}, {0.3, 0.5}, {700, 1000}, {0, 1}, {-3, 1}, {math.NaN(), 1},
	} {
		require.InDelta(t, tt.want, NiceStep(tt.raw), tt.want*1e-12, "raw %v", tt.raw)
	}
}

func TestTicks(t *testing.T) {
	for _, tt := range []struct {
		lo, hi float64
		n      int
		want   []float64
	}{
		{0, 10, 5, []float64{0, 2, 4, 6, 8, 10}},
		{0, 12, 5, []float64{0, 5, 10, 15}},
		{0.013, 0.061, 5, []float64{0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07}},
		{-0.02, 0.05, 6, []float64{-0.02, 0, 0.02, 0.04, 0.06}},
		{3, 3, 5, []float64{3}},
		{10, 0, 5, []float64{0, 2, 4, 6, 8, 10}},
	} {
		got := Ticks(tt.lo, tt.hi, tt.n)
		require.Len(t, got, len(tt.want), "%v..%v: %v", tt.lo, tt.hi, got)
		for i := range got {
			require.InDelta(t, tt.want[i], got[i], 1e-12, "%v..%v: %v", tt.lo, tt.hi, got)
		}
		// The ticks cover the range.
		require.LessOrEqual(t, got[0], math.Min(tt.lo, tt.hi)+1e-12)
		require.GreaterOrEqual(t, got[len(got)-1], math.Max(tt.lo, tt.hi)-1e-12)
	}
}

func TestTimeTicks(t *testing.T) {
	base := float64(time.Date(2026, 9, 17, 12, 46, 10, 0, time.UTC).Unix())
	for _, tt := range []struct {
		span   float64
		step   float64
		format string
	}{
		{40, 10, "15:04:05"},
		{10 * 60, 120, "15:04"},
		{5 * 3600, 3600, "15:04"},
		{20 * 86400, 7 * 86400, "Jan 2"},
	} {
		ts := TimeTicks(base, base+tt.span, 5)
		require.GreaterOrEqual(t, len(ts), 2)
		for i, v := range ts {
			require.Zero(t, math.Mod(v, tt.step), "tick %v of a %v s span falls on a whole step", v, tt.span)
			if i > 0 {
				require.Equal(t, tt.step, v-ts[i-1])
			}
		}
		require.LessOrEqual(t, ts[0], base)
		require.GreaterOrEqual(t, ts[len(ts)-1], base+tt.span)
		label := tick(Axis{Time: true}, ts[1], ts)
		_, err := time.Parse(tt.format, label)
		require.NoError(t, err, "%q reads as %s", label, tt.format)
	}
}

// node is a parsed SVG element.
type node struct {
	XMLName  xml.Name
	Attrs    []xml.Attr `xml:",any,attr"`
	Text     string     `xml:",chardata"`
	Children []node     `xml:",any"`
}

func (n node) attr(name string) string {
	for _, a := range n.Attrs {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

func (n node) f(t *testing.T, name string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(n.attr(name), 64)
	require.NoError(t, err, "%s=%q", name, n.attr(name))
	return v
}

// all returns the elements below n (n included) for which keep holds.
func (n node) all(keep func(node) bool) []node {
	var out []node
	if keep(n) {
		out = append(out, n)
	}
	for _, c := range n.Children {
		out = append(out, c.all(keep)...)
	}
	return out
}

func parse(t *testing.T, svg string) node {
	t.Helper()
	var root node
	require.NoError(t, xml.Unmarshal([]byte(svg), &root), svg)
	require.Equal(t, "svg", root.XMLName.Local)
	require.Equal(t, "http://www.w3.org/2000/svg", root.XMLName.Space)
	return root
}

func byClass(class string) func(node) bool {
	return func(n node) bool { return strings.Contains(" "+n.attr("class")+" ", " "+class+" ") }
}

func byName(name string) func(node) bool {
	return func(n node) bool { return n.XMLName.Local == name }
}

func TestLines(t *testing.T) {
	c := Lines{
		Title: "GPU memory <serve@1.02>", ID: "mem",
		X:      Axis{Label: "seconds since the engine started"},
		Y:      Axis{Label: "GiB", FromZero: true},
		Series: []Series{{Name: "used", Points: []Point{{0, 1}, {10, 5}, {20, 9}}}},
		Rules:  []Rule{{At: 12, Label: "budget 12 GiB", Kind: RuleBudget}, {At: 16, Label: "hard cap 16 GiB", Kind: RuleCap}},
		Note:   "simulated GPU",
	}
	svg, err := c.SVG()
	require.NoError(t, err)
	root := parse(t, svg)
	require.Equal(t, "mem", root.attr("id"))
	require.NotContains(t, svg, "style=", "presentation attributes only: the page's CSP allows no inline style")
	titles := root.all(byName("title"))
	require.Equal(t, "GPU memory <serve@1.02>", titles[0].Text, "escaped, and read back as written")
	desc := root.all(byName("desc"))[0].Text
	require.Contains(t, desc, "used: 3 points, GiB from 1 to 9")
	require.Contains(t, desc, "budget 12 GiB")
	require.Contains(t, desc, "simulated GPU")

	lines := root.all(byName("polyline"))
	require.Len(t, lines, 1)
	var px [][2]float64
	for _, p := range strings.Fields(lines[0].attr("points")) {
		x, y, ok := strings.Cut(p, ",")
		require.True(t, ok)
		fx, err := strconv.ParseFloat(x, 64)
		require.NoError(t, err)
		fy, err := strconv.ParseFloat(y, 64)
		require.NoError(t, err)
		px = append(px, [2]float64{fx, fy})
	}
	require.Len(t, px, 3)
	// Equal steps of x are equal steps of pixels; y grows upwards.
	require.InDelta(t, px[1][0]-px[0][0], px[2][0]-px[1][0], 0.02)
	require.Less(t, px[1][1], px[0][1])
	rules := root.all(byClass("rule"))
	require.Len(t, rules, 2)
	ruleY := map[string]float64{}
	for _, r := range rules {
		ln := r.all(byName("line"))[0]
		require.Equal(t, ln.f(t, "y1"), ln.f(t, "y2"), "a horizontal rule")
		ruleY[r.attr("data-at")] = ln.f(t, "y1")
		require.Contains(t, []string{"budget 12 GiB", "hard cap 16 GiB"}, r.all(byName("text"))[0].Text)
	}
	// One linear scale for the points and the rules: the pixel distances
	// are in the values' proportions (1 -> 5 is 4, 1 -> 12 is 11, 1 -> 16 is 15).
	d := px[0][1] - px[1][1]
	require.InDelta(t, 11.0/4, (px[0][1]-ruleY["12"])/d, 0.01)
	require.InDelta(t, 15.0/4, (px[0][1]-ruleY["16"])/d, 0.01)
	// FromZero: the y axis starts at a tick of 0, below the first point.
	yticks := root.all(byClass("y"))[0].all(byName("text"))
	require.Equal(t, "0", yticks[0].Text)
	require.Contains(t, svg, `class="note"`)
}

func TestLinesMarkersAndLegend(t *testing.T) {
	at := func(s string) float64 {
		v, err := time.Parse(time.RFC3339, s)
		require.NoError(t, err)
		return float64(v.Unix())
	}
	c := Lines{
		X: Axis{Label: "submitted", Time: true}, Y: Axis{Label: "score"}, Markers: true,
		Series: []Series{
			{Name: "FP8-W8A8", Points: []Point{{at("2026-07-01T10:00:00Z"), 0.12}, {at("2026-07-02T10:00:00Z"), 0.15}}},
			{Name: "INT4 <g32>", Points: []Point{{at("2026-07-01T12:00:00Z"), -0.02}}},
		},
		Rules: []Rule{{At: 0, Label: "BF16 = 0", Kind: RuleZero}},
	}
	svg, err := c.SVG()
	require.NoError(t, err)
	root := parse(t, svg)
	dots := root.all(byName("circle"))
	require.Len(t, dots, 3)
	ys := map[string]float64{}
	for _, d := range dots {
		ys[d.attr("data-y")] = d.f(t, "cy")
	}
	require.Less(t, ys["0.15"], ys["0.12"])
	require.Less(t, ys["0.12"], ys["-0.02"])
	legend := root.all(byClass("legend"))
	require.Len(t, legend, 1)
	var names []string
	for _, x := range legend[0].all(byName("text")) {
		names = append(names, x.Text)
	}
	require.Equal(t, []string{"FP8-W8A8", "INT4 <g32>"}, names)
	require.NotContains(t, svg, "<g32>")
}

func TestBars(t *testing.T) {
	c := Bars{
		Title: "drop against BF16", X: Axis{Label: "drop (accuracy points / 100)"},
		Bars: []Bar{
			{Label: "math", Value: 0.02, Upper: 0.048, HasUpper: true},
			{Label: "code", Value: -0.01, Upper: 0.01, HasUpper: true},
			{Label: "expert", Value: 0.04, Muted: true},
		},
		Rules: []Rule{{At: 0.03, Label: "A", Kind: RuleTier}, {At: 0.05, Label: "B", Kind: RuleTier}},
	}
	svg, err := c.SVG()
	require.NoError(t, err)
	root := parse(t, svg)
	bars := root.all(byClass("bar"))
	require.Len(t, bars, 3)
	rules := map[string]float64{}
	for _, r := range root.all(byClass("rule")) {
		ln := r.all(byName("line"))[0]
		require.Equal(t, ln.f(t, "x1"), ln.f(t, "x2"), "a vertical rule")
		rules[r.attr("data-at")] = ln.f(t, "x1")
	}
	require.Len(t, rules, 2)
	rect := func(b node) node { return b.all(byName("rect"))[0] }
	zero := rect(bars[0]).f(t, "x")
	// Positive bars start at zero; a negative one ends there.
	require.InDelta(t, zero, rect(bars[2]).f(t, "x"), 0.01)
	require.InDelta(t, zero, rect(bars[1]).f(t, "x")+rect(bars[1]).f(t, "width"), 0.01)
	// Widths in proportion to the values, on the scale of the rules.
	unit := (rules["0.05"] - rules["0.03"]) / 0.02
	require.InDelta(t, 0.02*unit, rect(bars[0]).f(t, "width"), 0.05)
	require.InDelta(t, 0.04*unit, rect(bars[2]).f(t, "width"), 0.05)
	require.InDelta(t, 0.03*unit, rules["0.03"]-zero, 0.05)
	// The upper bound's tick is at 0.048: left of tier B, right of A.
	up := bars[0].all(byClass("upper"))[0].f(t, "x1")
	require.InDelta(t, zero+0.048*unit, up, 0.05)
	require.Equal(t, "0.048", bars[0].attr("data-upper"))
	require.Empty(t, bars[2].attr("data-upper"), "no bound, no whisker")
	require.Empty(t, bars[2].all(byClass("upper")))
	require.Equal(t, "#9ca3af", rect(bars[2]).attr("fill"), "a domain that does not count is grey")
}

func TestRefusals(t *testing.T) {
	for _, tt := range []struct {
		name string
		draw func() (string, error)
		want error
	}{
		{"no series", Lines{}.SVG, ErrNoData},
		{"empty series", Lines{Series: []Series{{Name: "a"}}}.SVG, ErrNoData},
		{"NaN point", Lines{Series: []Series{{Name: "a", Points: []Point{{0, math.NaN()}}}}}.SVG, ErrNotFinite},
		{"infinite rule", Lines{Series: []Series{{Name: "a", Points: []Point{{0, 1}}}}, Rules: []Rule{{At: math.Inf(1)}}}.SVG, ErrNotFinite},
		{"no bars", Bars{}.SVG, ErrNoData},
		{"NaN upper", Bars{Bars: []Bar{{Label: "x", Value: 0.1, Upper: math.NaN(), HasUpper: true}}}.SVG, ErrNotFinite},
	} {
		t.Run(tt.name, func(t *testing.T) {
			svg, err := tt.draw()
			require.ErrorIs(t, err, tt.want)
			require.Empty(t, svg)
		})
	}
}

// TestOnePoint: a single value sits inside its axis, not on its edge.
func TestOnePoint(t *testing.T) {
	svg, err := Lines{X: Axis{Label: "t"}, Y: Axis{Label: "GiB"}, Series: []Series{{Name: "used", Points: []Point{{5, 3}}}}}.SVG()
	require.NoError(t, err)
	dot := parse(t, svg).all(byName("circle"))
	require.Len(t, dot, 1, "one point is drawn as a dot")
	require.Greater(t, dot[0].f(t, "cx"), float64(marginLeft))
	require.Less(t, dot[0].f(t, "cx"), float64(640-marginRight))
}

// BenchmarkLines draws a memory plot of 400 points with a budget and a
// hard cap, the largest figure a submission page draws.
func BenchmarkLines(b *testing.B) {
	pts := make([]Point, 400)
	for i := range pts {
		pts[i] = Point{X: float64(i) / 10, Y: 20 + math.Sin(float64(i)/20)}
	}
	c := Lines{Title: "Budget replay serve@1.02", X: Axis{Label: "s"}, Y: Axis{Label: "GiB", FromZero: true}, Series: []Series{{Name: "used", Points: pts}},
		Rules: []Rule{{At: 22, Label: "budget", Kind: RuleBudget}, {At: 26, Label: "hard cap", Kind: RuleCap}}, Note: "simulated"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.SVG(); err != nil {
			b.Fatal(err)
		}
	}
}
