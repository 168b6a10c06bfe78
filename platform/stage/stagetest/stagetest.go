// Package stagetest is the stage kit's contract, run against a stage's own
// declaration (its topics, consumer settings and ids) on an embedded
// nats-server: started is published once per input, a refusal becomes
// <stage>.failed and an ack, any other error a retry, a deliberate wait a
// retry after its delay, and every output's id is stable across
// redeliveries. A stage's own tests call Contract (or JobContract) with a
// sample input and output; the stage's Run (or Jobs and Result) is
// replaced by each case's answer, so the contract checks the protocol,
// and the stage's table tests check its decisions.
package stagetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/platform/ce"
	"github.com/lowbarena/lowbarena/platform/stage"
)

// wait bounds how long a case waits for a message: a bound, not a speed
// assertion.
const wait = 10 * time.Second

// Contract runs the kit's contract against s with a sample input (whose
// submission id is the event's subject, as the pipeline's are) and a
// sample output.
func Contract[In, Out any](t *testing.T, s stage.Stage[In, Out], in In, out Out) {
	t.Helper()
	b, _ := bustest.Bus(t)
	ctx := testCtx(t)
	name := s.Name()
	with := func(run func(context.Context, In) (Out, error)) bus.Handler {
		c := s
		c.Run = run
		return handlerOf(c.Bind(b, nil), 0)
	}
	answer := func(o Out, err error) func(context.Context, In) (Out, error) {
		return func(context.Context, In) (Out, error) { return o, err }
	}
	cfg := s.ConsumerConfig()

	t.Run("completed once however often it runs", func(t *testing.T) {
		e := publish(t, ctx, b, s.Input, "in-ok", "sub-ok", in)
		o := next(t, ctx, b, cfg, twice(with(answer(out, nil))))
		require.True(t, o.IsAck(), "outcome %s", o)
		stored := storedOf(t, b, name, "sub-ok")
		require.Equal(t, []events.Type{s.Output.Started.Type(), s.Output.Completed.Type()}, typesOf(stored))
		requireStarted(t, stored[0], e, name, 1)
		require.Equal(t, events.DeriveID(e.ID(), string(s.Output.Completed.Type())), stored[1].ID())
		want, err := json.Marshal(out)
		require.NoError(t, err)
		require.JSONEq(t, string(want), string(stored[1].Data()))
	})

	t.Run("a refusal is failed and acked", func(t *testing.T) {
		e := publish(t, ctx, b, s.Input, "in-refused", "sub-refused", in)
		r := stage.Refuse("contract_test_refusal", "the participant must act.").WithDetail(map[string]string{"why": "test"})
		o := next(t, ctx, b, cfg, twice(with(answer(out, r))))
		require.True(t, o.IsAck(), "outcome %s", o)
		stored := storedOf(t, b, name, "sub-refused")
		require.Equal(t, []events.Type{s.Output.Started.Type(), s.Output.Failed.Type()}, typesOf(stored))
		requireFailed(t, stored[1], events.DeriveID(e.ID(), string(s.Output.Failed.Type())), name, r)
	})

	t.Run("an error is a retry and the redelivery keeps its ids", func(t *testing.T) {
		e := publish(t, ctx, b, s.Input, "in-retry", "sub-retry", in)
		o := next(t, ctx, b, cfg, with(answer(out, errors.New("the store does not answer"))))
		require.True(t, o.IsRetry(), "outcome %s", o)
		stored := storedOf(t, b, name, "sub-retry")
		require.Equal(t, []events.Type{s.Output.Started.Type()}, typesOf(stored))
		// Redelivered (after the backoff), it completes; started is the
		// first attempt's, stored once.
		o = next(t, ctx, b, cfg, with(answer(out, nil)))
		require.True(t, o.IsAck(), "outcome %s", o)
		stored = storedOf(t, b, name, "sub-retry")
		require.Equal(t, []events.Type{s.Output.Started.Type(), s.Output.Completed.Type()}, typesOf(stored))
		requireStarted(t, stored[0], e, name, 1)
	})

	t.Run("a deliberate wait is a retry after its delay", func(t *testing.T) {
		publish(t, ctx, b, s.Input, "in-wait", "sub-wait", in)
		o := next(t, ctx, b, cfg, with(answer(out, stage.RetryAfter(7*time.Second, errors.New("not yet")))))
		require.True(t, o.IsRetry(), "outcome %s", o)
		require.Equal(t, 7*time.Second, o.Delay())
		require.Equal(t, []events.Type{s.Output.Started.Type()}, typesOf(storedOf(t, b, name, "sub-wait")))
	})
}

// JobContract runs the kit's contract against a job stage: the request
// side as Contract does, with the jobs queued once on RUNNER_JOBS, and the
// result side: an outcome of the stage's kind ends the stage once, a
// failed job passes the runner's reason on, an outcome of another kind
// never reaches the stage, and a shared job's outcome goes to Shared.
func JobContract[In, Out any](t *testing.T, s stage.JobStage[In, Out], in In, out Out) {
	t.Helper()
	b, _ := bustest.Bus(t)
	ctx := testCtx(t)
	name, kind := s.Name(), s.Kind
	ref := events.BundleRef{Store: "jetstream", Bucket: bus.ObjectArtifacts, Object: "bundles/x.json", SHA256: fmt.Sprintf("%064x", 1)}
	jobOf := func(jobID, sub string) stage.Job {
		return stage.Job{Request: events.RunnerJobRequestedData{JobID: jobID, SubmissionID: sub, Engine: "engine", Checkpoint: ref}}
	}
	var shared []stage.Outcome
	bind := func(jobs func(context.Context, In) ([]stage.Job, error), result func(context.Context, events.RunnerJobCompletedData) (Out, error)) *stage.Bound {
		c := s
		c.Jobs, c.Result = jobs, result
		c.Shared = func(_ context.Context, o stage.Outcome) error { shared = append(shared, o); return nil }
		return c.Bind(b, nil)
	}
	results := func(o Out, err error) func(context.Context, events.RunnerJobCompletedData) (Out, error) {
		return func(context.Context, events.RunnerJobCompletedData) (Out, error) { return o, err }
	}
	reqCfg, resCfg := s.RequestsConfig(), s.ResultsConfig()

	t.Run("the jobs are queued once however often the input runs", func(t *testing.T) {
		e := publish(t, ctx, b, s.Input, "in-jobs", "sub-jobs", in)
		jobs := func(context.Context, In) ([]stage.Job, error) { return []stage.Job{jobOf("job-1", "sub-jobs")}, nil }
		o := next(t, ctx, b, reqCfg, twice(handlerOf(bind(jobs, results(out, nil)), 0)))
		require.True(t, o.IsAck(), "outcome %s", o)
		stored := storedOf(t, b, name, "sub-jobs")
		require.Equal(t, []events.Type{s.Output.Started.Type()}, typesOf(stored))
		requireStarted(t, stored[0], e, name, 1)
		st, err := b.JetStream().Stream(ctx, events.StreamRunnerJobs)
		require.NoError(t, err)
		m, err := st.GetLastMsgForSubject(ctx, "jobs."+kind+".job-1")
		require.NoError(t, err, "the job is on its kind's subject")
		info, err := st.Info(ctx, jetstream.WithSubjectFilter("jobs."+kind+".job-1"))
		require.NoError(t, err)
		require.Equal(t, uint64(1), info.State.Subjects["jobs."+kind+".job-1"], "one job however often the input ran")
		req, err := ce.Decode(m.Header, m.Data)
		require.NoError(t, err)
		require.Equal(t, events.DeriveID("job-1", string(events.RunnerJobRequested)), req.ID())
	})

	t.Run("a refused input is failed and queues nothing", func(t *testing.T) {
		e := publish(t, ctx, b, s.Input, "in-refused", "sub-refused", in)
		r := stage.Refuse("contract_test_refusal", "the campaign cannot serve it.")
		jobs := func(context.Context, In) ([]stage.Job, error) { return nil, r }
		o := next(t, ctx, b, reqCfg, handlerOf(bind(jobs, results(out, nil)), 0))
		require.True(t, o.IsAck(), "outcome %s", o)
		stored := storedOf(t, b, name, "sub-refused")
		require.Equal(t, []events.Type{s.Output.Started.Type(), s.Output.Failed.Type()}, typesOf(stored))
		requireFailed(t, stored[1], events.DeriveID(e.ID(), string(s.Output.Failed.Type())), name, r)
	})

	t.Run("a completed job ends the stage once", func(t *testing.T) {
		publishOutcome(t, ctx, b, events.Job.Completed, events.RunnerJobCompletedData{JobID: "job-1", Kind: kind, SubmissionID: "sub-jobs",
			Runner: "r", Result: json.RawMessage(`{}`)})
		o := next(t, ctx, b, resCfg, twice(resultsOf(bind(nil, results(out, nil)))))
		require.True(t, o.IsAck(), "outcome %s", o)
		stored := storedOf(t, b, name, "sub-jobs")
		require.Equal(t, []events.Type{s.Output.Started.Type(), s.Output.Completed.Type()}, typesOf(stored))
		require.Equal(t, events.DeriveID("job-1", string(s.Output.Completed.Type())), stored[1].ID())
		want, err := json.Marshal(out)
		require.NoError(t, err)
		require.JSONEq(t, string(want), string(stored[1].Data()))
	})

	t.Run("a failed job passes the runner's reason on", func(t *testing.T) {
		publishOutcome(t, ctx, b, events.Job.Failed, events.RunnerJobFailedData{JobID: "job-2", Kind: kind, SubmissionID: "sub-failed",
			Runner: "r", Reason: "engine_crashed", Message: "engine died before becoming healthy", LogTail: "Traceback ..."})
		o := next(t, ctx, b, resCfg, resultsOf(bind(nil, results(out, nil))))
		require.True(t, o.IsAck(), "outcome %s", o)
		stored := storedOf(t, b, name, "sub-failed")
		require.Equal(t, []events.Type{s.Output.Failed.Type()}, typesOf(stored))
		f, err := s.Output.Failed.Decode(stored[0])
		require.NoError(t, err)
		require.Equal(t, events.DeriveID("job-2", string(s.Output.Failed.Type())), stored[0].ID())
		require.Equal(t, "engine_crashed", f.Reason)
		require.Contains(t, string(f.Detail), "Traceback")
	})

	t.Run("an error on a result is a retry, a wait its delay", func(t *testing.T) {
		publishOutcome(t, ctx, b, events.Job.Completed, events.RunnerJobCompletedData{JobID: "job-3", Kind: kind, SubmissionID: "sub-wait",
			Runner: "r", Result: json.RawMessage(`{}`)})
		o := next(t, ctx, b, resCfg, resultsOf(bind(nil, results(out, stage.RetryAfter(3*time.Second, errors.New("reference not ready"))))))
		require.True(t, o.IsRetry(), "outcome %s", o)
		require.Equal(t, 3*time.Second, o.Delay())
		require.Empty(t, storedOf(t, b, name, "sub-wait"))
	})

	t.Run("another kind's outcome never reaches the stage", func(t *testing.T) {
		publishOutcome(t, ctx, b, events.Job.Completed, events.RunnerJobCompletedData{JobID: "job-x", Kind: "other" + kind, SubmissionID: "sub-other",
			Runner: "r", Result: json.RawMessage(`{}`)})
		// The wait above left job-3 to come back; take it first.
		o, err := b.Next(ctx, resCfg, wait, resultsOf(bind(nil, results(out, nil))))
		require.NoError(t, err)
		require.True(t, o.IsAck())
		_, err = b.Next(ctx, resCfg, time.Second, resultsOf(bind(nil, results(out, nil))))
		require.ErrorIs(t, err, bus.ErrNoMessage)
		require.Empty(t, storedOf(t, b, name, "sub-other"))
	})

	t.Run("a shared job's outcome is kept by Shared", func(t *testing.T) {
		publishOutcome(t, ctx, b, events.Job.Completed, events.RunnerJobCompletedData{JobID: "job-shared", Kind: kind,
			Runner: "r", Result: json.RawMessage(`{}`)})
		shared = nil
		o := next(t, ctx, b, resCfg, resultsOf(bind(nil, results(out, nil))))
		require.True(t, o.IsAck(), "outcome %s", o)
		require.Len(t, shared, 1)
		require.Equal(t, "job-shared", shared[0].JobID())
	})
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// resultsOf is a bound job stage's result handler.
func resultsOf(b *stage.Bound) bus.Handler { return handlerOf(b, 1) }

// handlerOf is the i-th consumer's handler of a bound stage.
func handlerOf(b *stage.Bound, i int) bus.Handler { return b.Consumers()[i].Handle }

// twice runs h twice on one delivery, as a crash between publishing the
// outputs and acking would: the second run must add nothing.
func twice(h bus.Handler) bus.Handler {
	return func(ctx context.Context, d *bus.Delivery) bus.Outcome {
		_ = h(ctx, d)
		return h(ctx, d)
	}
}

func next(t *testing.T, ctx context.Context, b *bus.Bus, cfg bus.ConsumerConfig, h bus.Handler) bus.Outcome {
	t.Helper()
	o, err := b.Next(ctx, cfg, wait, h)
	require.NoError(t, err, "the stage's consumer %s received the input", cfg.Name)
	return o
}

func publish[T any](t *testing.T, ctx context.Context, b *bus.Bus, topic events.Topic[T], id, subject string, data T) event.Event {
	t.Helper()
	e, err := topic.Event(id, "/lowbarena/stagetest", subject, data)
	require.NoError(t, err)
	_, err = b.Publish(ctx, e)
	require.NoError(t, err)
	return e
}

func publishOutcome[T any](t *testing.T, ctx context.Context, b *bus.Bus, topic events.Topic[T], data T) {
	t.Helper()
	raw, err := json.Marshal(data)
	require.NoError(t, err)
	var job struct {
		JobID string `json:"job_id"`
	}
	require.NoError(t, json.Unmarshal(raw, &job))
	publish(t, ctx, b, topic, "outcome-"+job.JobID+"-"+string(topic.Type()), job.JobID, data)
}

func storedOf(t *testing.T, b *bus.Bus, stageName, subject string) []event.Event {
	t.Helper()
	return bustest.Stored(t, b, "arena."+stageName+".*."+subject)
}

func typesOf(es []event.Event) []events.Type {
	out := make([]events.Type, len(es))
	for i, e := range es {
		out[i] = events.Type(e.Type())
	}
	return out
}

func requireStarted(t *testing.T, e, cause event.Event, stageName string, attempt int) {
	t.Helper()
	require.Equal(t, events.DeriveID(cause.ID(), "dev.lowbarena."+stageName+".started.v1"), e.ID())
	var d events.StageStartedData
	require.NoError(t, json.Unmarshal(e.Data(), &d))
	require.Equal(t, events.StageStartedData{SubmissionID: cause.Subject(), Stage: stageName, Attempt: attempt}, d)
}

func requireFailed(t *testing.T, e event.Event, id, stageName string, r *stage.Refusal) {
	t.Helper()
	require.Equal(t, id, e.ID())
	var d events.StageFailedData
	require.NoError(t, json.Unmarshal(e.Data(), &d))
	require.Equal(t, stageName, d.Stage)
	require.Equal(t, string(r.Code), d.Reason)
	require.Equal(t, r.Message, d.Message)
	if len(r.Detail) > 0 {
		require.JSONEq(t, string(r.Detail), string(d.Detail))
	}
}
