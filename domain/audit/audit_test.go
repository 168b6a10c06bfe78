package audit

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events/reason"
)

// world is an engine's evidence and the quality job's answers over n
// items: item i's right answer is "R<i>" (one token), the quality job
// answered it right when i%4 != 0, and an honest engine's stream under
// ignore_eos is that answer followed by filler.
type world struct {
	ev      Evidence
	quality map[string]Reference
}

func honest(n int) world {
	w := world{quality: map[string]Reference{}}
	w.ev = Evidence{Seed: 7, Checkpoint: "abc123", ServedModel: "/var/lib/lowbarena/runner/abc123", LoadTPOTMs: map[string]float64{"serve": 4, "long_context": 6},
		Tokens: TokenCount{Tokenizer: "reference/tokenizer.json", Requests: 100, Claimed: 6400, Retokenized: 6400},
		Cache:  &CacheRuns{Concurrency: 8, Unique: RunTimes{Requests: 32, TPOTMs: 4.1, TTFTMs: 9}, Repeat: RunTimes{Requests: 24, TPOTMs: 4.0, TTFTMs: 3}}}
	for i := range n {
		id := fmt.Sprintf("i%d", i)
		text, score := fmt.Sprintf("R%d", i), 1.0
		if i%4 == 0 {
			text, score = fmt.Sprintf("W%d", i), 0
		}
		w.quality[id] = Reference{Text: text, Tokens: 1, Score: score}
		wl := "serve"
		if i%2 == 1 {
			wl = "long_context"
		}
		a := Answer{Item: id, Workload: wl, Seq: i, Chunks: []string{text, " the", " harbour"}, TPOTMs: w.ev.LoadTPOTMs[wl]}
		w.ev.Items = append(w.ev.Items, a)
		if i < 8 {
			p := a
			p.Workload, p.TPOTMs = "", 0
			w.ev.Probes = append(w.ev.Probes, p)
		}
	}
	return w
}

// grade scores "R<i>" right for item i.
func grade(item, answer string) (float64, error) {
	if answer == "R"+item[1:] {
		return 1, nil
	}
	return 0, nil
}

func (w world) judge() record.Audit {
	return Judge(Inputs{Evidence: &w.ev, Quality: w.quality, Grade: grade, KVDeclared: "fp8", KVEngine: "fp8", Pod: "local"})
}

func TestJudge(t *testing.T) {
	cases := []struct {
		name   string
		change func(w *world)
		reason string // "" passes
	}{
		{"honest", func(*world) {}, ""},
		{"answers differ both ways, no loss", func(w *world) {
			// Two items right in the quality job answered wrong under
			// load, two wrong there answered right: noise, no drop.
			for _, i := range []int{1, 2} {
				w.ev.Items[i].Chunks = []string{fmt.Sprintf("W%d", i)}
			}
			for _, i := range []int{4, 8} {
				w.ev.Items[i].Chunks = []string{fmt.Sprintf("R%d", i)}
			}
		}, ""},
		{"another name in /v1/models", func(w *world) { w.ev.ServedModel = "Qwen/Qwen3-8B" }, string(reason.ServedModelMismatch)},
		{"probes answered by another model", func(w *world) {
			for i := range 3 {
				w.ev.Probes[i].Chunks = []string{"Let me", " think"}
			}
		}, string(reason.ServedModelMismatch)},
		{"padded tokens", func(w *world) { w.ev.Tokens.Claimed = 2 * w.ev.Tokens.Retokenized }, string(reason.TokenCountDishonest)},
		{"past max_tokens", func(w *world) { w.ev.Tokens.OverMax = 1 }, string(reason.TokenCountDishonest)},
		{"ends early", func(w *world) { w.ev.Tokens.EndedEarly = 3 }, string(reason.TokenCountDishonest)},
		{"answer cache", func(w *world) { w.ev.Cache.Repeat.TPOTMs = 0.2 }, string(reason.AnswerCacheSuspected)},
		{"prefix cache: faster first token, same decode", func(w *world) {
			w.ev.Cache.Repeat.TTFTMs, w.ev.Cache.Repeat.TPOTMs = 0.5, 3.9
		}, ""},
		{"damaged fast path under load", func(w *world) {
			for i := range w.ev.Items {
				if i%4 != 0 && i%3 == 0 {
					w.ev.Items[i].Chunks = []string{fmt.Sprintf("W%d", i)}
				}
			}
		}, string(reason.AccuracyDiffersUnderLoad)},
		{"errors on audit items", func(w *world) {
			w.ev.Items[3].Err, w.ev.Items[3].Chunks = "engine_http_error", nil
		}, string(reason.AuditItemErrors)},
		{"stops mid-item", func(w *world) {
			w.ev.Items[5].Err = "engine_disconnected"
		}, string(reason.AuditItemIncomplete)},
		{"audit items slower", func(w *world) {
			for i := range w.ev.Items {
				w.ev.Items[i].TPOTMs *= 2.5
			}
		}, string(reason.AuditItemsSlower)},
		{"items slower by less than the floor: the host's timing noise", func(w *world) {
			// A replay at 50 us a token: 1.6 times the load, 0.03 ms more.
			for wl := range w.ev.LoadTPOTMs {
				w.ev.LoadTPOTMs[wl] = 0.05
			}
			for i := range w.ev.Items {
				w.ev.Items[i].TPOTMs = 0.08
			}
		}, ""},
		{"items slower by more than the floor at a fast load", func(w *world) {
			for wl := range w.ev.LoadTPOTMs {
				w.ev.LoadTPOTMs[wl] = 0.5
			}
			for i := range w.ev.Items {
				w.ev.Items[i].TPOTMs = 2
			}
		}, string(reason.AuditItemsSlower)},
	}
	for _, c := range cases {
		w := honest(64)
		c.change(&w)
		a := w.judge()
		if c.reason == "" {
			require.Equal(t, record.VerdictPass, a.Verdict, "%s: %s", c.name, a.Message)
			require.Empty(t, a.Reason, c.name)
			continue
		}
		require.Equal(t, record.VerdictFail, a.Verdict, c.name)
		require.Equal(t, c.reason, a.Reason, c.name)
		require.NotEmpty(t, a.Message, c.name)
		r, m := Failed(&a)
		require.Equal(t, c.reason, r, c.name)
		require.Equal(t, a.Message, m, c.name)
	}
}

// TestAccuracyFigures checks the accuracy audit's figures against a
// derivation by hand: 64 items, 48 right in the quality job; under load
// 12 of those answered wrong.
func TestAccuracyFigures(t *testing.T) {
	w := honest(64)
	changed := 0
	for i := range w.ev.Items {
		if i%4 != 0 && changed < 12 {
			w.ev.Items[i].Chunks = []string{"X", "R1"}
			changed++
		}
	}
	a := w.judge().AccuracyUnderLoad
	require.Equal(t, 64, a.Items)
	require.Equal(t, 64, a.Compared)
	require.InDelta(t, 52.0/64, a.Agreement, 1e-12)
	require.InDelta(t, 48.0/64, a.QualityAccuracy, 1e-12)
	require.InDelta(t, 36.0/64, a.LoadAccuracy, 1e-12)
	// Differences: twelve 1s and fifty-two 0s.
	mean := 12.0 / 64
	sd := math.Sqrt((12*(1-mean)*(1-mean) + 52*mean*mean) / 63)
	require.InDelta(t, mean, a.Drop, 1e-12)
	require.InDelta(t, sd/8, a.SE, 1e-12)
	require.InDelta(t, mean-1.645*sd/8, a.Lower, 1e-12)
	require.Equal(t, string(reason.AccuracyDiffersUnderLoad), a.Reason)
	require.Equal(t, "TEST01", a.MLPerf)
	require.Len(t, a.Requests, 64)
	require.InDelta(t, 1.0, a.SlowRatio, 1e-12)
	require.InDelta(t, 0.0, a.SlowExcessMs, 1e-12)
	require.Equal(t, SlowFloorMs, a.SlowFloorMs)
}

// TestWithoutQuality checks the audits that need the quality job's
// answers are skipped without them, and the others still decide.
func TestWithoutQuality(t *testing.T) {
	w := honest(16)
	a := Judge(Inputs{Evidence: &w.ev, QualityWhy: "the quality stage failed", Grade: grade})
	require.Equal(t, record.VerdictSkipped, a.AccuracyUnderLoad.Verdict)
	require.Contains(t, a.AccuracyUnderLoad.Message, "the quality stage failed")
	require.Equal(t, record.VerdictSkipped, a.ServedModel.Verdict)
	require.Equal(t, record.VerdictPass, a.Verdict, "the token and cache audits passed")

	w.ev.Tokens.Claimed *= 3
	require.Equal(t, string(reason.TokenCountDishonest), Judge(Inputs{Evidence: &w.ev, QualityWhy: "none"}).Reason)

	none := Judge(Inputs{KVDeclared: "fp8", KVEngine: "fp8"})
	require.Equal(t, record.VerdictSkipped, none.Verdict)
	require.Equal(t, "fp8", none.KVCacheDTypeEngine)
	r, _ := Failed(&none)
	require.Empty(t, r)
	r, _ = Failed(nil)
	require.Empty(t, r)
}

// TestSame checks when an answer under load is the quality job's: its
// text begins with it and a chunk ends there, however it was chunked.
func TestSame(t *testing.T) {
	ref := Reference{Text: "42", Tokens: 1}
	cases := []struct {
		chunks []string
		same   bool
	}{
		{[]string{"42", " the"}, true},
		{[]string{"4", "2", " the"}, true},
		{[]string{"42"}, true},
		{[]string{"421", " the"}, false},
		{[]string{"4", "21"}, false},
		{[]string{"4"}, false},
		{[]string{"43", " the"}, false},
		{nil, false},
	}
	for _, c := range cases {
		require.Equal(t, c.same, same(Answer{Chunks: c.chunks}, ref), "%q", c.chunks)
	}
	require.False(t, same(Answer{Chunks: []string{""}}, Reference{}))
}
