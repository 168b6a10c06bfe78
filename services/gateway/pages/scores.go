package pages

import (
	"sort"
	"time"

	"github.com/lowbarena/lowbarena/events/ctl"
	"github.com/lowbarena/lowbarena/services/gateway/plot"
)

// Filter is the leaderboard's choice of rows: a campaign and a policy
// (empty: the score service's defaults), and whether only qualified or
// only ranked rows are shown.
type Filter struct {
	Campaign, Policy string
	QualifiedOnly    bool
	RankedOnly       bool
}

// Leaderboard is the leaderboard page.
type Leaderboard struct {
	Filter Filter
	Rows   []ScoreRow
	// Hidden counts the rows the filter left out.
	Hidden int
}

// ScoreRow is one row of scores.
type ScoreRow struct {
	ctl.Row
	Rank                          int
	Score, Gain, Drift, When, Why string
}

// NewLeaderboard orders rows best first (qualified before not) and keeps
// those the filter asks for; the rank counts the qualified rows only.
func NewLeaderboard(rows []ctl.Row, f Filter) *Leaderboard {
	l := &Leaderboard{Filter: f}
	sorted := append([]ctl.Row{}, rows...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if sorted[i].Qualified != sorted[j].Qualified {
			return sorted[i].Qualified > sorted[j].Qualified
		}
		return sorted[i].Score > sorted[j].Score
	})
	rank := 0
	for _, r := range sorted {
		if (f.QualifiedOnly && r.Qualified == 0) || (f.RankedOnly && r.Ranked == 0) {
			l.Hidden++
			continue
		}
		row := scoreRow(r)
		if r.Qualified == 1 {
			rank++
			row.Rank = rank
		}
		l.Rows = append(l.Rows, row)
	}
	return l
}

func scoreRow(r ctl.Row) ScoreRow {
	at := time.UnixMilli(int64(r.TsMs))
	why := r.Reason
	if why == "" && r.Qualified == 1 {
		why = "qualified"
	}
	return ScoreRow{Row: r, Score: Fixed(r.Score, 4), Gain: Fixed(r.Gain, 4), Drift: Fixed(r.Drift, 4), When: When(&at), Why: why}
}

// History is a participant's page: its scores over time per method.
type History struct {
	Participant string
	Campaign    string
	Rows        []ScoreRow
	Figure      Figure
}

// NewHistory builds a participant's page from its score rows (oldest
// first), with a plot of score over time, one line per method.
func NewHistory(participant, campaign string, rows []ctl.Row) *History {
	h := &History{Participant: participant, Campaign: campaign}
	sorted := append([]ctl.Row{}, rows...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].TsMs < sorted[j].TsMs })
	var methods []string
	points := map[string][]plot.Point{}
	for _, r := range sorted {
		h.Rows = append(h.Rows, scoreRow(r))
		name := nonEmpty(r.Method, "(no method)")
		if _, ok := points[name]; !ok {
			methods = append(methods, name)
		}
		points[name] = append(points[name], plot.Point{X: float64(r.TsMs) / 1000, Y: r.Score})
	}
	c := plot.Lines{Title: "Score over time, per method", ID: "history-plot", Markers: true,
		X: plot.Axis{Label: "scored at (UTC)", Time: true}, Y: plot.Axis{Label: "score"},
		Rules: []plot.Rule{{At: 0, Label: "0: BF16's speed", Kind: plot.RuleZero}}, Width: 760, Height: 320}
	for _, m := range methods {
		c.Series = append(c.Series, plot.Series{Name: m, Points: points[m]})
	}
	svg, err := c.SVG()
	h.Figure = figure(c.Title, svg, err)
	return h
}

// Problem is an error page: the status, a stable code and a sentence
// that says what is not there or what went wrong.
type Problem struct {
	Status  int
	Code    string
	Title   string
	Message string
}

// Index is the home page: the live lists, drawn by its script.
type Index struct{}

// Page is what the layout needs: the title, what the live script
// follows, and the page's body.
type Page struct {
	Title string
	// Live is what page.js follows: "record:ID", "round:ID", "records",
	// "participant:NAME" ("" for nothing).
	Live string
	Body any
	// Nav marks the current section.
	Nav string
}
