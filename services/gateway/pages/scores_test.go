package pages

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/ctl"
)

var scoreRows = []ctl.Row{
	{TsMs: ms("2026-07-01T10:00:00Z"), SubmissionID: "a1", Participant: "alice", Method: "FP8", Split: "ranked", Ranked: 1, Qualified: 1, Score: 0.12, Gain: 1.4, Drift: 0.5},
	{TsMs: ms("2026-07-02T10:00:00Z"), SubmissionID: "a2", Participant: "alice", Method: "INT4", Split: "dev", Qualified: 0, Score: 0.2, Reason: "quality tier fail below B"},
	{TsMs: ms("2026-07-03T10:00:00Z"), SubmissionID: "a3", Participant: "alice", Method: "FP8", Split: "ranked", Ranked: 1, Qualified: 1, Score: 0.15, Gain: 1.5, Drift: 0.4},
	{TsMs: ms("2026-07-02T12:00:00Z"), SubmissionID: "b1", Participant: "bob", Method: "NVFP4", Split: "dev", Qualified: 1, Score: 0.31, Gain: 2, Drift: 0.1},
}

func ms(s string) uint64 {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return uint64(t.UnixMilli())
}

func TestLeaderboard(t *testing.T) {
	for _, tt := range []struct {
		name   string
		f      Filter
		ids    []string
		ranks  []int
		hidden int
	}{
		// Qualified first, best first; only the qualified are ranked.
		{"all", Filter{}, []string{"b1", "a3", "a1", "a2"}, []int{1, 2, 3, 0}, 0},
		{"qualified only", Filter{QualifiedOnly: true}, []string{"b1", "a3", "a1"}, []int{1, 2, 3}, 1},
		{"ranked only", Filter{RankedOnly: true}, []string{"a3", "a1"}, []int{1, 2}, 2},
		{"both", Filter{QualifiedOnly: true, RankedOnly: true}, []string{"a3", "a1"}, []int{1, 2}, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLeaderboard(scoreRows, tt.f, nil)
			var ids []string
			var ranks []int
			for _, r := range l.Rows {
				ids, ranks = append(ids, r.SubmissionID), append(ranks, r.Rank)
			}
			require.Equal(t, tt.ids, ids)
			require.Equal(t, tt.ranks, ranks)
			require.Equal(t, tt.hidden, l.Hidden)
			page := render(t, KindLeaderboard, Page{Title: "x", Live: "records", Body: l})
			for _, id := range tt.ids {
				has(t, page, `<tr data-submission="`+id+`"`)
			}
			if tt.f.QualifiedOnly {
				has(t, page, `<option value="only" selected>qualified only</option>`)
			}
		})
	}
	page := render(t, KindLeaderboard, Page{Title: "x", Body: NewLeaderboard(scoreRows[:1], Filter{Campaign: "qwen3-tiny"}, nil)})
	has(t, row(t, page, "data-submission", "a1"), `<td class="n score">0.1200</td>`)
	require.NotContains(t, page, `id="simulated"`, "no row is simulated")
	has(t, row(t, page, "data-submission", "a1"), `<a href="/participants/alice">alice</a>`)
	empty := render(t, KindLeaderboard, Page{Title: "x", Body: NewLeaderboard(scoreRows[1:2], Filter{Campaign: "qwen3-tiny", QualifiedOnly: true}, nil)})
	has(t, empty, "No scores of campaign qwen3-tiny that this viewer may read (1 left out by the filter)")
}

// TestLeaderboardBound: past MaxLeaderboardRows the page draws the best
// rows and counts the rest, ranked as if every row were drawn; at the
// bound it draws them all and says nothing more.
func TestLeaderboardBound(t *testing.T) {
	for _, tt := range []struct {
		rows, unqualified int
		drawn, more       int
	}{
		{MaxLeaderboardRows, 0, MaxLeaderboardRows, 0},
		{MaxLeaderboardRows + 1, 0, MaxLeaderboardRows, 1},
		{2500, 700, MaxLeaderboardRows, 1500},
	} {
		t.Run(strconv.Itoa(tt.rows), func(t *testing.T) {
			var rows []ctl.Row
			for i := range tt.rows {
				q := uint8(1)
				if i < tt.unqualified {
					q = 0 // the best scores, not qualified: drawn after the qualified
				}
				rows = append(rows, ctl.Row{SubmissionID: "s" + strconv.Itoa(i), Participant: "p", Split: "ranked", Qualified: q, Score: float64(tt.rows - i)})
			}
			l := NewLeaderboard(rows, Filter{}, nil)
			require.Len(t, l.Rows, tt.drawn)
			require.Equal(t, tt.more, l.More)
			// The qualified come first, ranked 1, 2, ... in score order.
			qualified := tt.rows - tt.unqualified
			for i, r := range l.Rows {
				if i < qualified {
					require.Equal(t, i+1, r.Rank)
					require.Equal(t, "s"+strconv.Itoa(tt.unqualified+i), r.SubmissionID)
				} else {
					require.Zero(t, r.Rank)
				}
			}
			page := render(t, KindLeaderboard, Page{Title: "x", Body: l})
			require.Equal(t, tt.drawn, strings.Count(page, "<tr data-submission="))
			if tt.more > 0 {
				has(t, page, strconv.Itoa(tt.more)+" more rows below these are not drawn here")
			} else {
				require.NotContains(t, page, `id="leaderboard-more"`)
			}
		})
	}
}

func TestHistory(t *testing.T) {
	h := NewHistory("alice", "", scoreRows[:3], nil)
	page := render(t, KindHistory, Page{Title: "alice", Body: h})
	// One line per method, each point at its row's time and score.
	has(t, page, `<g class="series" data-name="FP8">`)
	has(t, page, `<g class="series" data-name="INT4">`)
	for _, r := range scoreRows[:3] {
		has(t, page, `data-x="`+strconv.FormatUint(r.TsMs/1000, 10)+`"`)
	}
	has(t, page, `data-y="0.12"`)
	has(t, page, `data-y="0.15"`)
	has(t, page, `class="rule zero" data-at="0"`)
	// Oldest first in the table.
	require.Less(t, strings.Index(page, `data-submission="a1"`), strings.Index(page, `data-submission="a2"`))
	require.Less(t, strings.Index(page, `data-submission="a2"`), strings.Index(page, `data-submission="a3"`))
	require.NotContains(t, page, "simulated")
}

// TestScoresSaySimulated: the rows whose records say their figures came
// from a simulated engine are marked, the page counts them and names the
// simulated GPUs (in the order of the rows), and the history's plot says so under it; the others
// are not marked.
func TestScoresSaySimulated(t *testing.T) {
	sim := Simulated{"a1": "NVIDIA H200 (simulated)", "b1": ""}
	l := NewLeaderboard(scoreRows, Filter{}, sim)
	require.Equal(t, SimNote{Count: 2, Of: 4, GPUs: "a simulated GPU, NVIDIA H200 (simulated)"}, l.Sim)
	page := render(t, KindLeaderboard, Page{Title: "x", Body: l})
	has(t, page, `<p class="sim" id="simulated">Simulated: 2 of these 4 scores come from a simulated engine on a simulated GPU, NVIDIA H200 (simulated);`)
	tag := `<span class="simtag" title="from a simulated engine">sim</span>`
	has(t, row(t, page, "data-submission", "a1"), `>a1</a> `+tag+`</td>`)
	has(t, row(t, page, "data-submission", "a1"), `<td class="n score">0.1200</td>`)
	has(t, row(t, page, "data-submission", "b1"), tag)
	require.NotContains(t, row(t, page, "data-submission", "a3"), tag)

	// The filter leaves b1 out: the note counts the rows shown.
	l = NewLeaderboard(scoreRows, Filter{RankedOnly: true}, sim)
	require.Equal(t, SimNote{Count: 1, Of: 2, GPUs: "NVIDIA H200 (simulated)"}, l.Sim)

	h := NewHistory("alice", "", scoreRows[:3], sim)
	page = render(t, KindHistory, Page{Title: "alice", Body: h})
	has(t, page, "Simulated: 1 of these 3 scores come from a simulated engine on NVIDIA H200 (simulated)")
	has(t, string(h.Figure.SVG), "simulated: 1 of 3 scores from a simulated engine on NVIDIA H200 (simulated)")
	require.NotContains(t, row(t, page, "data-submission", "a2"), tag)
}
