package efficiency_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/audit"
	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/domain/suite"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/platform/stage"
	"github.com/lowbarena/lowbarena/services/efficiency"
)

// answers is a store of the quality job's answers (quality_answers) by
// campaign: it answers the audits' query with the rows filed under the
// campaign, suite, submission and role asked for, and remembers the
// campaigns it was asked about.
type answers struct {
	mu    sync.Mutex
	rows  map[string][]map[string]any // campaign -> rows by column
	asked []string
}

func (a *answers) Select(_ context.Context, dest any, query string, args ...any) error {
	if !strings.Contains(query, "quality_answers") || len(args) < 1 {
		return errors.New("answers: an unexpected query")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	camp := fmt.Sprint(args[0])
	a.asked = append(a.asked, camp)
	out := reflect.ValueOf(dest).Elem()
	for _, row := range a.rows[camp] {
		v := reflect.New(out.Type().Elem()).Elem()
		for i := range v.NumField() {
			if x, ok := row[v.Type().Field(i).Tag.Get("ch")]; ok {
				v.Field(i).Set(reflect.ValueOf(x))
			}
		}
		out.Set(reflect.Append(out, v))
	}
	return nil
}

func (a *answers) Append(context.Context, string, []string, [][]any) error { return nil }
func (a *answers) Exec(context.Context, string, ...any) error              { return nil }
func (a *answers) Engine() string                                          { return "answers" }
func (a *answers) Close() error                                            { return nil }

// twoCampaigns is the example campaign and a copy of it that sorts first
// ("aaa-first"), both on the same dev suite (lowb-gen@1/dev).
func twoCampaigns(t *testing.T) campaign.Set {
	t.Helper()
	set := exampleCampaigns(t)
	first := *set[examples.TaskID]
	first.TaskID = "aaa-first"
	set[first.TaskID] = &first
	require.Equal(t, []string{"aaa-first", examples.TaskID}, set.Tasks())
	return set
}

// auditItems are the example dev suite's items the evidence below asks:
// 4 probes and 12 items under load.
func auditItems(t *testing.T) []suite.Item {
	t.Helper()
	st := suite.Generate("lowb-gen", "1", suite.SplitDev, suite.SeedDev, suite.Sizes{"math": 8, "knowledge": 8})
	var its []suite.Item
	for _, d := range []string{"math", "knowledge"} {
		its = append(its, st.Items[d]...)
	}
	require.GreaterOrEqual(t, len(its), 16)
	return its[:16]
}

// reply is the quality job's first sample of an item: its reference
// answer, right.
func reply(it suite.Item) string {
	if len(it.Choices) > 0 {
		return "The answer is (" + it.Answer + ")."
	}
	return "The answer is " + it.Answer + "."
}

// chunks cuts a text into the engine's streamed tokens, 4 bytes each.
func chunks(text string) []string {
	var out []string
	for len(text) > 4 {
		out = append(out, text[:4])
		text = text[4:]
	}
	return append(out, text)
}

// evidence is an efficiency run's audit evidence on the dev suite: the
// engine names its checkpoint, counts its tokens honestly, caches no
// answer, and answers the probes and the items under load as the quality
// job did, or (wrong) every item under load with another number.
func evidence(its []suite.Item, wrong bool) *audit.Evidence {
	ev := &audit.Evidence{Seed: 7, SuiteKey: "lowb-gen@1/dev", Checkpoint: "fp8-w8a8", ServedModel: "fp8-w8a8",
		LoadTPOTMs: map[string]float64{"serve": 10},
		Tokens:     audit.TokenCount{Tokenizer: "tokenizer.json", Requests: 100, Claimed: 6400, Retokenized: 6400},
		Cache:      &audit.CacheRuns{Concurrency: 8, Unique: audit.RunTimes{Requests: 32, TPOTMs: 10}, Repeat: audit.RunTimes{Requests: 24, TPOTMs: 10}}}
	for i, it := range its[:4] {
		ev.Probes = append(ev.Probes, audit.Answer{Item: it.ID, Seq: i, Chunks: chunks(reply(it))})
	}
	for i, it := range its[4:] {
		text := reply(it)
		if wrong {
			text = "The answer is (Z) 99991."
		}
		ev.Items = append(ev.Items, audit.Answer{Item: it.ID, Workload: "serve", Seq: 10 + i, Chunks: chunks(text), TPOTMs: 10})
	}
	return ev
}

// completion is the efficiency job of submission id as the runner
// reports it: the 27B fixture's measurement with the evidence.
func completion(t *testing.T, id string, ev *audit.Evidence) events.RunnerJobCompletedData {
	t.Helper()
	res := measurement(load(t, rec27b))
	res.Candidate.Audit = ev
	raw, err := events.EfficiencyJob.Encode(res)
	require.NoError(t, err)
	return events.RunnerJobCompletedData{JobID: efficiency.JobID(id), Kind: events.JobEfficiency, SubmissionID: id, Runner: "r1",
		Pod: "pod-0", GPUHours: 0.1, Result: raw, CheckpointDigest: strings.Repeat("ab", 32)}
}

// TestAuditsReadTheSubmissionsOwnCampaign: two campaigns share the dev
// suite lowb-gen@1/dev, and a submission on the second (in sorted order)
// is audited against its own campaign's answers, so a cheat there is
// caught; an audit whose answers cannot be had (none in the store, the
// quality stage failed, no store) fails with audit_unjudged, never
// passes; an audit whose quality outcome is not in yet waits.
func TestAuditsReadTheSubmissionsOwnCampaign(t *testing.T) {
	its := auditItems(t)
	ownRows := []map[string]any{}
	for _, it := range its {
		text := reply(it)
		ownRows = append(ownRows, map[string]any{"item_id": it.ID, "score": 1.0, "output_tokens": uint32(len(chunks(text))), "answer": text})
	}
	digest := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name     string
		rows     map[string][]map[string]any
		noStore  bool
		quality  string // "completed", "failed" or "" (not in yet)
		wrong    bool
		verdict  string
		reason   reason.Code
		unjudged bool // served_model and accuracy_under_load fail with audit_unjudged
		// unjudgedOnly: that one fails with audit_unjudged, the other passes
		unjudgedOnly string
		wait         bool
	}{
		{name: "an honest engine on the second campaign passes on its own answers", rows: map[string][]map[string]any{examples.TaskID: ownRows},
			quality: "completed", verdict: record.VerdictPass},
		{name: "a cheat on the second campaign is caught on its own answers", rows: map[string][]map[string]any{examples.TaskID: ownRows},
			quality: "completed", wrong: true, verdict: record.VerdictFail, reason: reason.AccuracyDiffersUnderLoad},
		{name: "answers filed under the other campaign are not the submission's", rows: map[string][]map[string]any{"aaa-first": ownRows},
			quality: "completed", verdict: record.VerdictFail, reason: reason.AuditUnjudged, unjudged: true},
		{name: "no answers in the store: the audits fail, never pass", rows: map[string][]map[string]any{},
			quality: "completed", verdict: record.VerdictFail, reason: reason.AuditUnjudged, unjudged: true},
		{name: "no answers to the probes: served_model fails, never passes", rows: map[string][]map[string]any{examples.TaskID: ownRows[4:]},
			quality: "completed", verdict: record.VerdictFail, reason: reason.AuditUnjudged, unjudgedOnly: "served_model"},
		{name: "no answers to the items under load: accuracy_under_load fails, never passes", rows: map[string][]map[string]any{examples.TaskID: ownRows[:4]},
			quality: "completed", verdict: record.VerdictFail, reason: reason.AuditUnjudged, unjudgedOnly: "accuracy_under_load"},
		{name: "the quality stage failed: the audits fail", rows: map[string][]map[string]any{examples.TaskID: ownRows},
			quality: "failed", verdict: record.VerdictFail, reason: reason.AuditUnjudged, unjudged: true},
		{name: "no store: the audits fail", noStore: true, quality: "completed", verdict: record.VerdictFail, reason: reason.AuditUnjudged, unjudged: true},
		{name: "the quality outcome is not in yet: the stage waits", rows: map[string][]map[string]any{examples.TaskID: ownRows}, wait: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := bustest.Bus(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			st := &answers{rows: tc.rows}
			o := efficiency.Options{Campaigns: twoCampaigns(t), Store: st}
			if tc.noStore {
				o.Store = nil
			}
			s, err := efficiency.New(ctx, b, quiet(), o)
			require.NoError(t, err)
			const id = "sub-second"
			cc := kept(id)
			cc.BundleDigest, cc.Split = digest, suite.SplitDev
			_, err = bus.Emit(ctx, b, events.Source("contract"), events.Contract.Completed, id, cc, bus.WithID("cc-1"))
			require.NoError(t, err)
			switch tc.quality {
			case "completed":
				qc := *bustest.Sample(events.QualityCompleted).(*events.QualityCompletedData)
				qc.SubmissionID, qc.BundleDigest = id, digest
				_, err = bus.Emit(ctx, b, events.Source("quality"), events.Quality.Completed, id, qc, bus.WithID("qc-1"))
			case "failed":
				_, err = bus.Emit(ctx, b, events.Source("quality"), events.Quality.Failed, id,
					events.StageFailedData{SubmissionID: id, Stage: "quality", Reason: string(reason.CampaignNoSuite), Message: "no suite"}, bus.WithID("qf-1"))
			}
			require.NoError(t, err)

			out, err := s.Stage().Result(ctx, completion(t, id, evidence(its, tc.wrong)))
			if tc.wait {
				var w *stage.Wait
				require.ErrorAs(t, err, &w, "no quality outcome yet is a deliberate wait")
				require.Equal(t, efficiency.AuditWait, w.After)
				return
			}
			require.NoError(t, err)
			a := out.Engine.Audit
			require.NotNil(t, a)
			js, _ := json.MarshalIndent(a, "", " ")
			require.Equal(t, tc.verdict, a.Verdict, string(js))
			require.Equal(t, string(tc.reason), a.Reason, a.Message)
			require.Equal(t, record.VerdictPass, a.TokenHonesty.Verdict)
			require.Equal(t, record.VerdictPass, a.AnswerCache.Verdict)
			if tc.unjudgedOnly != "" {
				checks := map[string]record.Check{"served_model": a.ServedModel.Check, "accuracy_under_load": a.AccuracyUnderLoad.Check}
				for name, c := range checks {
					if name == tc.unjudgedOnly {
						require.Equal(t, record.VerdictFail, c.Verdict, name)
						require.Equal(t, string(reason.AuditUnjudged), c.Reason, name)
					} else {
						require.Equal(t, record.VerdictPass, c.Verdict, name+": "+c.Message)
					}
				}
				return
			}
			if tc.reason == "" {
				require.Empty(t, out.AuditReason)
				require.Equal(t, record.VerdictPass, a.ServedModel.Verdict, a.ServedModel.Message)
				require.Equal(t, 4, a.ServedModel.Probes)
				require.Equal(t, record.VerdictPass, a.AccuracyUnderLoad.Verdict, a.AccuracyUnderLoad.Message)
				require.Equal(t, 12, a.AccuracyUnderLoad.Compared)
			} else {
				require.True(t, strings.HasPrefix(out.AuditReason, "audit "+string(tc.reason)+": "), out.AuditReason)
			}
			if tc.unjudged {
				for _, c := range []record.Check{a.ServedModel.Check, a.AccuracyUnderLoad.Check} {
					require.Equal(t, record.VerdictFail, c.Verdict)
					require.Equal(t, string(reason.AuditUnjudged), c.Reason)
				}
			}
			if !tc.noStore && tc.quality == "completed" {
				require.Equal(t, []string{examples.TaskID}, st.asked, "the answers are read under the submission's own campaign")
			}
		})
	}
}
