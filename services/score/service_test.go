package score_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/policy"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/platform/ctl"
	"github.com/lowbarena/lowbarena/platform/store"
	_ "github.com/lowbarena/lowbarena/platform/store/chdb"
	"github.com/lowbarena/lowbarena/services/score"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// start runs a score service until the returned function stops it (and
// waits for its actors).
func start(t *testing.T, ctx context.Context, b *bus.Bus, st store.Store) context.CancelFunc {
	t.Helper()
	s, err := score.New(ctx, b, quiet(), score.Options{Store: st})
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	actors := s.Actors()
	done := make(chan struct{}, len(actors))
	for _, a := range actors {
		go func() { _ = a.Run(rctx); done <- struct{}{} }()
	}
	return func() {
		cancel()
		for range actors {
			<-done
		}
	}
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

// submit publishes a submission's submission.received as the gateway
// would; the gateway itself (and its submissions bucket) is not there.
func submit(t *testing.T, ctx context.Context, b *bus.Bus, id, participant, split string) {
	t.Helper()
	d := *bustest.Sample(events.SubmissionReceived).(*events.SubmissionReceivedData)
	d.SubmissionID, d.Participant, d.Split, d.TaskID = id, participant, split, "tiny"
	d.Solution.Method = "FP8"
	_, err := bus.Emit(ctx, b, events.Source("gateway"), events.Submission.Received, id, d, bus.WithID("r-"+id))
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
		Engine: record.Engine{Budget: map[string]record.Budget{}, Startup: record.Startup{KVCacheDType: "fp8"}}}
	return c, q, e
}

// outcomes publishes the three outcomes of a submission with ids prefixed
// by prefix.
func outcomes(t *testing.T, ctx context.Context, b *bus.Bus, id, prefix string,
	c events.ContractCompletedData, q events.QualityCompletedData, e events.EfficiencyCompletedData) {
	t.Helper()
	c.SubmissionID, q.SubmissionID, e.SubmissionID = id, id, id
	_, err := bus.Emit(ctx, b, events.Source("contract"), events.Contract.Completed, id, c, bus.WithID(prefix+"c"))
	require.NoError(t, err)
	_, err = bus.Emit(ctx, b, events.Source("quality"), events.Quality.Completed, id, q, bus.WithID(prefix+"q"))
	require.NoError(t, err)
	_, err = bus.Emit(ctx, b, events.Source("efficiency"), events.Efficiency.Completed, id, e, bus.WithID(prefix+"e"))
	require.NoError(t, err)
}

// call asks the score service, waiting for it to answer at all (its
// micro service starts with the actors).
func call[Rep any](t *testing.T, ctx context.Context, nc *nats.Conn, subject string, req any) (Rep, error) {
	t.Helper()
	var rep Rep
	var err error
	require.Eventually(t, func() bool {
		rep, err = ctl.Call[Rep](ctx, nc, subject, req)
		return !errors.Is(err, ctl.ErrNoService)
	}, 10*time.Second, 20*time.Millisecond, "the score service answers %s", subject)
	return rep, err
}

type count struct {
	N uint64 `ch:"n"`
}

// TestRestartBetweenOutcomesScoresOnce: the service stops after the
// contract and quality outcomes and a new one gets the efficiency outcome
// (twice): one score is published, one row kept. The CLI's questions are
// then answered from the store through the micro service.
func TestRestartBetweenOutcomesScoresOnce(t *testing.T) {
	b, st, ctx := env(t)
	submit(t, ctx, b, "s1", "p1", "dev")

	c, q, e := inputs()
	stop := start(t, ctx, b, st)
	_, err := bus.Emit(ctx, b, events.Source("contract"), events.Contract.Completed, "s1", c, bus.WithID("c1"))
	require.NoError(t, err)
	_, err = bus.Emit(ctx, b, events.Source("quality"), events.Quality.Completed, "s1", q, bus.WithID("q1"))
	require.NoError(t, err)
	in, err := b.JetStream().KeyValue(ctx, bus.BucketScoreInputs)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		en, err := in.Get(ctx, "s1")
		return err == nil && json.Valid(en.Value()) && containsAll(string(en.Value()), "submission", "contract", "quality")
	}, 10*time.Second, 20*time.Millisecond)
	stop()

	stop = start(t, ctx, b, st)
	defer stop()
	for _, id := range []string{"e1", "e2"} {
		_, err = bus.Emit(ctx, b, events.Source("efficiency"), events.Efficiency.Completed, "s1", e, bus.WithID(id))
		require.NoError(t, err)
	}
	ev := bustest.Await(t, b, "arena.score.completed.s1", events.ScoreCompleted)
	sc, err := events.Score.Completed.Decode(ev)
	require.NoError(t, err)
	// speed 2, memory 2: E 2; D = 100 x mean(0.02, 0) = 1 point.
	require.Equal(t, 2.0, *sc.DevScore.EfficiencyGain)
	require.Equal(t, 1.0, *sc.DevScore.Drift)
	require.Equal(t, 0.2007, sc.DevScore.Score) // log10(2) x (1 - 1/3)
	require.True(t, sc.DevScore.Qualified)
	require.False(t, sc.Ranked, "the dev split is never ranked")
	require.Equal(t, "lowb-score/v1", sc.Policy)
	require.Equal(t, events.DeriveID("s1", string(events.ScoreCompleted), "lowb-score/v1"), ev.ID(), "the id the stage always derived")
	time.Sleep(500 * time.Millisecond)
	require.Len(t, bustest.Stored(t, b, "arena.score.completed.s1"), 1, "one score however the outcomes arrived")
	var rows []count
	require.NoError(t, st.Select(ctx, &rows, "SELECT count() AS n FROM scores FINAL WHERE submission_id = ?", "s1"))
	require.Equal(t, uint64(1), rows[0].N)

	// The CLI's questions, answered from the store.
	nc := b.Conn()
	lb, err := call[ctl.Rows](t, ctx, nc, ctl.SubjectLeaderboard, ctl.Query{Campaign: "tiny"})
	require.NoError(t, err)
	require.Len(t, lb.Rows, 1)
	require.Equal(t, "p1", lb.Rows[0].Participant)
	require.Equal(t, "FP8", lb.Rows[0].Method)
	hist, err := call[ctl.Rows](t, ctx, nc, ctl.SubjectHistory, ctl.Query{Participant: "nobody"})
	require.NoError(t, err)
	require.NotNil(t, hist.Rows, "no rows is an empty list, not null")
	require.Len(t, hist.Rows, 0)
	hist, err = call[ctl.Rows](t, ctx, nc, ctl.SubjectHistory, ctl.Query{Participant: "p1"})
	require.NoError(t, err)
	require.Len(t, hist.Rows, 1)
	// rescore reads the stage outcomes the gateway keeps in stage_results.
	var srs []store.StageResult
	for stage, d := range map[string]any{"contract": c, "quality": q, "efficiency": e} {
		body, _ := json.Marshal(d)
		srs = append(srs, store.StageResult{TsMs: uint64(time.Now().UnixMilli()), SubmissionID: "s1", Stage: stage, Status: "done", EventID: stage, Payload: string(body)})
	}
	require.NoError(t, store.Insert(ctx, st, srs))
	re, err := call[ctl.Rows](t, ctx, nc, ctl.SubjectRescore, ctl.Query{Policy: "lowb-score/v1"})
	require.NoError(t, err)
	require.Len(t, re.Rows, 1)
	require.Equal(t, 0.2007, re.Rows[0].Score, "rescore reproduces the score from stored outcomes")
	require.Equal(t, "p1", re.Rows[0].Participant, "rescore takes the participant from the submission's event")
	require.Len(t, bustest.Stored(t, b, "arena.score.completed.s1"), 1, "a rescore under the same policy republishes the same id")

	_, err = call[ctl.Rows](t, ctx, nc, ctl.SubjectRescore, ctl.Query{Policy: "lowb-score/v0"})
	var refused *ctl.Error
	require.ErrorAs(t, err, &refused)
	require.Equal(t, ctl.CodeBadRequest, refused.Code)
	require.Contains(t, refused.Message, "unknown version")
}

// A submission is scored with nothing of the gateway's: no record in the
// submissions bucket, its participant, method and split from its
// submission.received.
func TestScoresWithoutTheGateway(t *testing.T) {
	b, st, ctx := env(t)
	defer start(t, ctx, b, st)()
	submit(t, ctx, b, "s2", "p2", "ranked")
	c, q, e := inputs()
	outcomes(t, ctx, b, "s2", "s2-", c, q, e)

	ev := bustest.Await(t, b, "arena.score.*.s2", events.ScoreCompleted, events.ScoreFailed)
	require.Equal(t, string(events.ScoreCompleted), ev.Type())
	sc, err := events.Score.Completed.Decode(ev)
	require.NoError(t, err)
	require.True(t, sc.Ranked, "a qualified score of the ranked split is ranked")

	recs, err := b.JetStream().KeyValue(ctx, bus.BucketSubmissions)
	require.NoError(t, err)
	keys, err := recs.ListKeys(ctx)
	require.NoError(t, err)
	n := 0
	for range keys.Keys() {
		n++
	}
	require.Zero(t, n, "no gateway wrote a record")
	var rows []store.Score
	require.NoError(t, st.Select(ctx, &rows, "SELECT * FROM scores FINAL WHERE submission_id = ?", "s2"))
	require.Len(t, rows, 1)
	require.Equal(t, "p2", rows[0].Participant)
	require.Equal(t, "FP8", rows[0].Method)
	require.Equal(t, "ranked", rows[0].Split)
	require.Equal(t, "tiny", rows[0].Campaign)
	require.Equal(t, uint8(1), rows[0].Ranked)
}

// An entry whose outcomes were joined without its submission.received
// (here by a durable that does not consume it) reads the submission from
// the ARENA stream and scores with the right participant.
func TestJoinWithoutSubmissionReadsItFromTheStream(t *testing.T) {
	b, st, ctx := env(t)
	s, err := score.New(ctx, b, quiet(), score.Options{Store: st})
	require.NoError(t, err)
	withoutReceived := score.Consumer
	withoutReceived.Subjects = withoutReceived.Subjects[:3]
	require.NotContains(t, withoutReceived.Subjects, events.Submission.Received.Filter())

	submit(t, ctx, b, "s3", "p3", "dev")
	c, q, e := inputs()
	c.SubmissionID, q.SubmissionID = "s3", "s3"
	_, err = bus.Emit(ctx, b, events.Source("contract"), events.Contract.Completed, "s3", c, bus.WithID("s3-c"))
	require.NoError(t, err)
	_, err = bus.Emit(ctx, b, events.Source("quality"), events.Quality.Completed, "s3", q, bus.WithID("s3-q"))
	require.NoError(t, err)
	// That durable joins the two outcomes; it never saw the submission.
	for range 2 {
		o, err := b.Next(ctx, withoutReceived, 10*time.Second, s.Handle)
		require.NoError(t, err)
		require.True(t, o.IsAck(), "outcome %s", o)
	}
	in, err := b.JetStream().KeyValue(ctx, bus.BucketScoreInputs)
	require.NoError(t, err)
	en, err := in.Get(ctx, "s3")
	require.NoError(t, err)
	require.NotContains(t, string(en.Value()), `"submission"`)

	// The stage takes that durable over from where it was.
	defer start(t, ctx, b, st)()
	e.SubmissionID = "s3"
	_, err = bus.Emit(ctx, b, events.Source("efficiency"), events.Efficiency.Completed, "s3", e, bus.WithID("s3-e"))
	require.NoError(t, err)
	ev := bustest.Await(t, b, "arena.score.*.s3", events.ScoreCompleted, events.ScoreFailed)
	require.Equal(t, string(events.ScoreCompleted), ev.Type())
	var rows []store.Score
	require.NoError(t, st.Select(ctx, &rows, "SELECT * FROM scores FINAL WHERE submission_id = ?", "s3"))
	require.Len(t, rows, 1)
	require.Equal(t, "p3", rows[0].Participant)
	require.Equal(t, "FP8", rows[0].Method)

	standing, err := call[ctl.Standing](t, ctx, b.Conn(), ctl.SubjectStanding, ctl.StandingRequest{SubmissionID: "s3"})
	require.NoError(t, err)
	require.Equal(t, "p3", standing.Participant)
}

// An outcome set for a submission the arena has no submission.received
// of is refused.
func TestUnknownSubmission(t *testing.T) {
	b, st, ctx := env(t)
	defer start(t, ctx, b, st)()
	c, q, e := inputs()
	outcomes(t, ctx, b, "s1", "", c, q, e)
	ev := bustest.Await(t, b, "arena.score.failed.s1", events.ScoreFailed)
	f, err := events.Score.Failed.Decode(ev)
	require.NoError(t, err)
	require.Equal(t, string(reason.SubmissionUnknown), f.Reason)
	require.Equal(t, events.DeriveID("s1", string(events.ScoreFailed), "lowb-score/v1"), ev.ID())

	// Its standing says so too.
	standing, err := call[ctl.Standing](t, ctx, b.Conn(), ctl.SubjectStanding, ctl.StandingRequest{SubmissionID: "s1"})
	require.NoError(t, err)
	require.Equal(t, string(reason.SubmissionUnknown), standing.Failed)
	require.Nil(t, standing.Score)
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
	submit(t, ctx, b, "s1", "p1", "dev")
	defer start(t, ctx, b, st)()
	c, q, e := inputs()
	c.BundleDigest, q.BundleDigest, e.BundleDigest = strings.Repeat("a", 64), strings.Repeat("a", 64), strings.Repeat("b", 64)
	outcomes(t, ctx, b, "s1", "", c, q, e)
	ev := bustest.Await(t, b, "arena.score.*.s1", events.ScoreCompleted, events.ScoreFailed)
	require.Equal(t, string(events.ScoreFailed), ev.Type())
	f, err := events.Score.Failed.Decode(ev)
	require.NoError(t, err)
	require.Equal(t, string(reason.ScoreDigestMismatch), f.Reason)
	require.Contains(t, f.Message, "efficiency outcome is of bundle bbbbbbbbbbbb")
}

// The standing of a submission, before and after its outcomes arrive,
// from the events the stage joined; an unknown submission is a 404.
func TestStanding(t *testing.T) {
	b, st, ctx := env(t)
	defer start(t, ctx, b, st)()
	nc := b.Conn()
	ask := func(id string) (ctl.Standing, error) {
		return call[ctl.Standing](t, ctx, nc, ctl.SubjectStanding, ctl.StandingRequest{SubmissionID: id})
	}

	_, err := ask("nobody")
	var refused *ctl.Error
	require.ErrorAs(t, err, &refused)
	require.Equal(t, ctl.CodeNotFound, refused.Code)

	submit(t, ctx, b, "s4", "p4", "dev")
	standing, err := ask("s4")
	require.NoError(t, err)
	require.Equal(t, "p4", standing.Participant)
	require.Equal(t, "tiny", standing.Campaign)
	require.Equal(t, []string{"contract", "quality", "efficiency"}, standing.Pending)
	require.False(t, standing.ContractKept)
	require.Nil(t, standing.Score)

	c, q, e := inputs()
	ref := events.BundleRef{Store: "jetstream", Bucket: bus.ObjectArtifacts, Object: "manifest.json", SHA256: strings.Repeat("d", 64)}
	c.SubmissionID, c.TaskID, c.Artifact, c.BundleDigest, c.KVCacheDType = "s4", "tiny", &ref, ref.SHA256, "fp8_e4m3"
	_, err = bus.Emit(ctx, b, events.Source("contract"), events.Contract.Completed, "s4", c, bus.WithID("s4-c"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		standing, err = ask("s4")
		return err == nil && standing.ContractKept
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, []string{"quality", "efficiency"}, standing.Pending)
	require.Equal(t, &ref, standing.Artifact)
	require.Equal(t, ref.SHA256, standing.BundleDigest)
	require.Equal(t, "fp8_e4m3", standing.KVCacheDType, "the declared KV dtype before the engine ran")
	require.Nil(t, standing.Score)

	q.SubmissionID, e.SubmissionID = "s4", "s4"
	_, err = bus.Emit(ctx, b, events.Source("quality"), events.Quality.Completed, "s4", q, bus.WithID("s4-q"))
	require.NoError(t, err)
	_, err = bus.Emit(ctx, b, events.Source("efficiency"), events.Efficiency.Completed, "s4", e, bus.WithID("s4-e"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		standing, err = ask("s4")
		return err == nil && len(standing.Pending) == 0
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, "fp8", standing.KVCacheDType, "the KV dtype the engine ran")
	require.NotNil(t, standing.Score)
	require.Equal(t, 0.2007, standing.Score.Score)
	require.True(t, standing.Score.Qualified)
	require.Empty(t, standing.Failed)
}

// The score's micro service answers $SRV.PING and $SRV.INFO with its
// four endpoints, and leaves when its actor stops.
func TestMicroService(t *testing.T) {
	b, st, ctx := env(t)
	stop := start(t, ctx, b, st)
	nc := b.Conn()
	var ping micro.Ping
	require.Eventually(t, func() bool {
		m, err := nc.RequestWithContext(ctx, "$SRV.PING."+ctl.ServiceScore, nil)
		return err == nil && json.Unmarshal(m.Data, &ping) == nil
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, ctl.ServiceScore, ping.Name)
	require.Equal(t, "1.0.0", ping.Version)

	m, err := nc.RequestWithContext(ctx, "$SRV.INFO."+ctl.ServiceScore, nil)
	require.NoError(t, err)
	var info micro.Info
	require.NoError(t, json.Unmarshal(m.Data, &info))
	var subjects []string
	for _, ep := range info.Endpoints {
		subjects = append(subjects, ep.Subject)
	}
	require.ElementsMatch(t, []string{ctl.SubjectLeaderboard, ctl.SubjectHistory, ctl.SubjectRescore, ctl.SubjectStanding}, subjects)

	stop()
	_, err = ctl.Call[ctl.Rows](ctx, nc, ctl.SubjectLeaderboard, ctl.Query{})
	require.ErrorIs(t, err, ctl.ErrNoService, "the service stopped with its actor")
}

// The component holds the service's flags with the binary's defaults
// and refuses to start without a store.
func TestComponent(t *testing.T) {
	t.Setenv(score.EnvPolicy, "")
	c := score.Component()
	require.Equal(t, score.Name, c.Name)
	require.Equal(t, []string{"score"}, c.Stages)
	require.True(t, c.Store)
	cfg := app.DefaultConfig(c.Name)
	fs := c.FlagSet(&cfg)
	require.Equal(t, policy.Default, fs.Lookup("policy").DefValue)

	b, _ := bustest.Bus(t)
	_, err := c.Build(context.Background(), &app.Runtime{Bus: b, Log: quiet()})
	require.ErrorContains(t, err, "a store is required")

	require.NoError(t, fs.Parse([]string{"--policy", "lowb-score/v0"}))
	_, st, ctx := env(t)
	_, err = c.Build(ctx, &app.Runtime{Bus: b, Log: quiet(), Store: st})
	require.ErrorContains(t, err, "unknown version", "a policy the arena does not have refuses to start")
}
