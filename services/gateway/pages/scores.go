package pages

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/lowbarena/lowbarena/platform/ctl"
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

// Simulated names the submissions whose figures came from a simulated
// engine: submission id to the simulated GPU its record names ("" when
// it names none). A submission not in it ran on a real GPU, or its
// record is not there to say.
type Simulated map[string]string

// SimNote is what a page of scores says of its simulated rows: how many
// of how many, and on which simulated GPUs. Count is 0 when none is.
type SimNote struct {
	Count, Of int
	GPUs      string
}

func simNote(rows []ScoreRow, sim Simulated) SimNote {
	n := SimNote{Of: len(rows)}
	var gpus []string
	for _, r := range rows {
		if gpu, ok := sim[r.SubmissionID]; ok {
			n.Count++
			if gpu == "" {
				gpu = "a simulated GPU"
			}
			if !slices.Contains(gpus, gpu) {
				gpus = append(gpus, gpu)
			}
		}
	}
	n.GPUs = strings.Join(gpus, ", ")
	return n
}

// Leaderboard is the leaderboard page.
type Leaderboard struct {
	Filter Filter
	Rows   []ScoreRow
	// Hidden counts the rows the filter left out.
	Hidden int
	// More counts the rows past MaxLeaderboardRows, kept but not drawn.
	More int
	// Sim says how many rows come from a simulated engine.
	Sim SimNote
}

// ScoreRow is one row of scores.
type ScoreRow struct {
	ctl.Row
	Rank                          int
	Score, Gain, Drift, When, Why string
	// Simulated marks a score whose speeds came from a simulated engine.
	Simulated bool
}

// MaxLeaderboardRows bounds the rows the leaderboard page draws: past
// it a page grows with every score held (100,000 rows took 11.6 s to draw,
// BenchmarkListSubmissionsScale page/leaderboard) and no one reads it. The
// rest are counted; `arena leaderboard` and GET /v1/leaderboard give
// every row.
const MaxLeaderboardRows = 1000

// NewLeaderboard orders rows best first (qualified before not) and keeps
// those the filter asks for, the first MaxLeaderboardRows of them to draw
// (More counts the rest); the rank counts the qualified rows only. The
// rows of sim's submissions are marked simulated.
func NewLeaderboard(rows []ctl.Row, f Filter, sim Simulated) *Leaderboard {
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
		if r.Qualified == 1 {
			rank++
		}
		if len(l.Rows) == MaxLeaderboardRows {
			l.More++
			continue
		}
		row := scoreRow(r, sim)
		if r.Qualified == 1 {
			row.Rank = rank
		}
		l.Rows = append(l.Rows, row)
	}
	l.Sim = simNote(l.Rows, sim)
	return l
}

func scoreRow(r ctl.Row, sim Simulated) ScoreRow {
	at := time.UnixMilli(int64(r.TsMs))
	why := r.Reason
	if why == "" && r.Qualified == 1 {
		why = "qualified"
	}
	_, simulated := sim[r.SubmissionID]
	return ScoreRow{Row: r, Score: Fixed(r.Score, 4), Gain: Fixed(r.Gain, 4), Drift: Fixed(r.Drift, 4), When: When(&at), Why: why, Simulated: simulated}
}

// History is a participant's page: its scores over time per method.
type History struct {
	Participant string
	Campaign    string
	Rows        []ScoreRow
	Figure      Figure
	// Sim says how many rows come from a simulated engine.
	Sim SimNote
}

// NewHistory builds a participant's page from its score rows (oldest
// first), with a plot of score over time, one line per method. The rows
// of sim's submissions are marked simulated, and the plot says so.
func NewHistory(participant, campaign string, rows []ctl.Row, sim Simulated) *History {
	h := &History{Participant: participant, Campaign: campaign}
	sorted := append([]ctl.Row{}, rows...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].TsMs < sorted[j].TsMs })
	var methods []string
	points := map[string][]plot.Point{}
	for _, r := range sorted {
		h.Rows = append(h.Rows, scoreRow(r, sim))
		name := nonEmpty(r.Method, "(no method)")
		if _, ok := points[name]; !ok {
			methods = append(methods, name)
		}
		points[name] = append(points[name], plot.Point{X: float64(r.TsMs) / 1000, Y: r.Score})
	}
	c := plot.Lines{Title: "Score over time, per method", ID: "history-plot", Markers: true,
		X: plot.Axis{Label: "scored at (UTC)", Time: true}, Y: plot.Axis{Label: "score"},
		Rules: []plot.Rule{{At: 0, Label: "0: BF16's speed", Kind: plot.RuleZero}}, Width: 760, Height: 320}
	if h.Sim = simNote(h.Rows, sim); h.Sim.Count > 0 {
		c.Note = fmt.Sprintf("simulated: %d of %d scores from a simulated engine on %s", h.Sim.Count, h.Sim.Of, h.Sim.GPUs)
	}
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
