package service_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/bus"
	"github.com/lowbarena/lowbarena/events/bustest"
	"github.com/lowbarena/lowbarena/services/domain/record"
	score "github.com/lowbarena/lowbarena/services/score/service"
	"github.com/lowbarena/lowbarena/services/store"
	_ "github.com/lowbarena/lowbarena/services/store/chdb"
)

func start(t *testing.T, ctx context.Context, b *bus.Bus, st store.Store) context.CancelFunc {
	t.Helper()
	s, err := score.New(ctx, b, slog.New(slog.NewTextHandler(io.Discard, nil)), score.Options{Store: st})
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	for _, a := range s.Actors() {
		go func() { _ = a.Run(rctx); done <- struct{}{} }()
	}
	return func() { cancel(); <-done; <-done }
}

// env is a NATS server with the arena's streams and a chDB store.
func env(t *testing.T) (*bus.Bus, store.Store, context.Context) {
	t.Helper()
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	st, err := store.Open(ctx, "chdb://"+t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return b, st, ctx
}

// putRecord writes a submission's record as the gateway would.
func putRecord(t *testing.T, ctx context.Context, b *bus.Bus, rec record.Submission) {
	t.Helper()
	recs, err := b.JetStream().KeyValue(ctx, bus.BucketSubmissions)
	require.NoError(t, err)
	body, _ := json.Marshal(rec)
	_, err = recs.Put(ctx, rec.ID, body)
	require.NoError(t, err)
}

func inputs() (events.ContractCompletedData, events.QualityCompletedData, events.EfficiencyCompletedData) {
	c := events.ContractCompletedData{SubmissionID: "s1", Contract: record.Contract{OK: true, WeightBits: 8, ActivationBits: 8, BitsPerWeight: 8.104},
		DetectedPrecision: "W8A8KV8"}
	dom := func(drop float64) record.Domain {
		return record.Domain{Status: "valid", Drop: drop, Items: 60}
	}
	q := events.QualityCompletedData{SubmissionID: "s1", MeanDrop: 0.01,
		DevQuality: record.Quality{Tier: "B", Domains: map[string]record.Domain{"math": dom(0.02), "code": dom(0), "expert": {Status: "R5_diagnostic", Drop: 0.5}}}}
	rates := map[string]float64{"serve": 200, "interactive": 20, "long_context": 100}
	bf := map[string]float64{"serve": 100, "interactive": 10, "long_context": 50}
	pk := map[string]record.PeakMemory{"serve": {PeakGiB: 10}, "interactive": {PeakGiB: 5}, "long_context": {PeakGiB: 20}}
	bpk := map[string]record.PeakMemory{"serve": {PeakGiB: 20}, "interactive": {PeakGiB: 10}, "long_context": {PeakGiB: 40}}
	e := events.EfficiencyCompletedData{SubmissionID: "s1", Efficiency: rates, AnchorEfficiency: bf, PeakMemory: pk, AnchorPeakMemory: bpk,
		GPU: "NVIDIA H200 (simulated)", Simulated: true,
		Engine: record.Engine{Budget: map[string]record.Budget{}, Audit: json.RawMessage("null"), Startup: record.Startup{KVCacheDType: "fp8"}}}
	return c, q, e
}

// TestRestartBetweenOutcomesScoresOnce: the service stops after the
// contract and quality outcomes and a new one gets the efficiency outcome
// (twice): one score is published, one row kept.
func TestRestartBetweenOutcomesScoresOnce(t *testing.T) {
	b, st, ctx := env(t)
	putRecord(t, ctx, b, record.Submission{ID: "s1", TaskID: "tiny", Participant: "p1", Split: "dev", Solution: record.Solution{Method: "FP8"}})

	c, q, e := inputs()
	stop := start(t, ctx, b, st)
	_, err := b.PublishNew(ctx, "c1", events.ContractCompleted, events.Source("contract"), "s1", c)
	require.NoError(t, err)
	_, err = b.PublishNew(ctx, "q1", events.QualityCompleted, events.Source("quality"), "s1", q)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		in, err := b.JetStream().KeyValue(ctx, bus.BucketScoreInputs)
		require.NoError(t, err)
		en, err := in.Get(ctx, "s1")
		return err == nil && json.Valid(en.Value()) && len(en.Value()) > 100 && containsAll(string(en.Value()), "contract", "quality")
	}, 10*time.Second, 20*time.Millisecond)
	stop()

	stop = start(t, ctx, b, st)
	defer stop()
	for _, id := range []string{"e1", "e2"} {
		_, err = b.PublishNew(ctx, id, events.EfficiencyCompleted, events.Source("efficiency"), "s1", e)
		require.NoError(t, err)
	}
	ev := bustest.Await(t, b, "arena.score.completed.s1", events.ScoreCompleted)
	var sc events.ScoreCompletedData
	require.NoError(t, json.Unmarshal(ev.Data(), &sc))
	// speed 2, memory 2: E 2; D = 100 x mean(0.02, 0) = 1 point.
	require.Equal(t, 2.0, *sc.DevScore.EfficiencyGain)
	require.Equal(t, 1.0, *sc.DevScore.Drift)
	require.Equal(t, 0.2007, sc.DevScore.Score) // log10(2) x (1 - 1/3)
	require.True(t, sc.DevScore.Qualified)
	require.False(t, sc.Ranked, "the dev split is never ranked")
	require.Equal(t, "lowb-score/v1", sc.Policy)
	time.Sleep(500 * time.Millisecond)
	require.Len(t, bustest.Stored(t, b, "arena.score.completed.s1"), 1, "one score however the outcomes arrived")
	type n struct {
		N uint64 `ch:"n"`
	}
	var rows []n
	require.NoError(t, st.Select(ctx, &rows, "SELECT count() AS n FROM scores FINAL WHERE submission_id = ?", "s1"))
	require.Equal(t, uint64(1), rows[0].N)

	// The CLI's questions, answered from the store.
	nc := b.Conn()
	ask := func(subject string, q score.Query) score.Reply {
		body, _ := json.Marshal(q)
		m, err := nc.Request(subject, body, 30*time.Second)
		require.NoError(t, err)
		var rep score.Reply
		require.NoError(t, json.Unmarshal(m.Data, &rep))
		return rep
	}
	lb := ask(score.SubjectLeaderboard, score.Query{Campaign: "tiny"})
	require.Empty(t, lb.Error)
	require.Len(t, lb.Rows, 1)
	require.Equal(t, "p1", lb.Rows[0].Participant)
	require.Len(t, ask(score.SubjectHistory, score.Query{Participant: "nobody"}).Rows, 0)
	// rescore reads the stage outcomes the gateway keeps in stage_results.
	var srs []store.StageResult
	for stage, d := range map[string]any{"contract": c, "quality": q, "efficiency": e} {
		body, _ := json.Marshal(d)
		srs = append(srs, store.StageResult{TsMs: uint64(time.Now().UnixMilli()), SubmissionID: "s1", Stage: stage, Status: "done", EventID: stage, Payload: string(body)})
	}
	require.NoError(t, store.Insert(ctx, st, srs))
	re := ask(score.SubjectRescore, score.Query{Policy: "lowb-score/v1"})
	require.Empty(t, re.Error)
	require.Len(t, re.Rows, 1)
	require.Equal(t, 0.2007, re.Rows[0].Score, "rescore reproduces the score from stored outcomes")
	require.Contains(t, ask(score.SubjectRescore, score.Query{Policy: "lowb-score/v0"}).Error, "unknown version")
}

// An outcome set for a submission the arena has no record of is refused.
func TestUnknownSubmission(t *testing.T) {
	b, st, ctx := env(t)
	defer start(t, ctx, b, st)()
	c, q, e := inputs()
	for _, x := range []struct {
		id string
		t  events.Type
		d  any
	}{{"c", events.ContractCompleted, c}, {"q", events.QualityCompleted, q}, {"e", events.EfficiencyCompleted, e}} {
		_, err := b.PublishNew(ctx, x.id, x.t, events.Source("test"), "s1", x.d)
		require.NoError(t, err)
	}
	ev := bustest.Await(t, b, "arena.score.failed.s1", events.ScoreFailed)
	var f events.StageFailedData
	require.NoError(t, json.Unmarshal(ev.Data(), &f))
	require.Equal(t, score.ReasonUnknownSubmission, f.Reason)
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, `"`+p+`"`) {
			return false
		}
	}
	return true
}

// Quality and efficiency of different bundles are never scored.
func TestDigestMismatchIsRefused(t *testing.T) {
	b, st, ctx := env(t)
	putRecord(t, ctx, b, record.Submission{ID: "s1", TaskID: "tiny", Split: "dev"})
	defer start(t, ctx, b, st)()
	c, q, e := inputs()
	c.BundleDigest, q.BundleDigest, e.BundleDigest = strings.Repeat("a", 64), strings.Repeat("a", 64), strings.Repeat("b", 64)
	for _, x := range []struct {
		id string
		t  events.Type
		d  any
	}{{"c", events.ContractCompleted, c}, {"q", events.QualityCompleted, q}, {"e", events.EfficiencyCompleted, e}} {
		_, err := b.PublishNew(ctx, x.id, x.t, events.Source("test"), "s1", x.d)
		require.NoError(t, err)
	}
	ev := bustest.Await(t, b, "arena.score.*.s1", events.ScoreCompleted, events.ScoreFailed)
	require.Equal(t, string(events.ScoreFailed), ev.Type())
	var f events.StageFailedData
	require.NoError(t, json.Unmarshal(ev.Data(), &f))
	require.Equal(t, score.ReasonDigestMismatch, f.Reason)
	require.Contains(t, f.Message, "efficiency outcome is of bundle bbbbbbbbbbbb")
}
