package pages

import (
	"encoding/json"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/services/gateway/projector"
)

func render(t *testing.T, kind string, p Page) string {
	t.Helper()
	r, err := NewRenderer()
	require.NoError(t, err)
	var b strings.Builder
	require.NoError(t, r.Render(&b, kind, p, false))
	out := b.String()
	// The pages' CSP allows no inline script or style.
	require.NotRegexp(t, `<script>|<style|style="|\son[a-z]+="`, out)
	return out
}

// has requires page to hold s, naming s alone when it does not (a
// page is long).
func has(t *testing.T, page, s string) {
	t.Helper()
	if !strings.Contains(page, s) {
		t.Fatalf("the page does not hold %q", s)
	}
}

// row returns the HTML of the table row with attr="value".
func row(t *testing.T, page, attr, value string) string {
	t.Helper()
	re := regexp.MustCompile(`(?s)<tr ` + attr + `="` + regexp.QuoteMeta(value) + `"[^>]*>.*?</tr>`)
	m := re.FindString(page)
	require.NotEmpty(t, m, "no row %s=%q", attr, value)
	return m
}

// TestSubmissionFixtures renders the arena's two real records and finds
// each figure of their blocks on the page, formatted from the raw JSON
// (not from the record type the page reads).
func TestSubmissionFixtures(t *testing.T) {
	paths, err := filepath.Glob("../../../schemas/testdata/lowbarena/submission_*.json")
	require.NoError(t, err)
	require.Len(t, paths, 2)
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			raw, err := os.ReadFile(p)
			require.NoError(t, err)
			var rec record.Submission
			require.NoError(t, json.Unmarshal(raw, &rec))
			var m map[string]any
			require.NoError(t, json.Unmarshal(raw, &m))
			res := m["result"].(map[string]any)
			page := render(t, KindSubmission, Page{Title: "x", Live: "record:" + rec.ID, Body: NewSubmission(rec, Telemetry{Err: NoStore})})

			require.Contains(t, page, `data-live="record:`+rec.ID+`"`)
			require.NotContains(t, page, `id="simulated"`, "the fixtures are real measurements")
			// Quality: every domain's drop and upper bound, in the table
			// and as a bar with its whisker.
			q := res["dev_quality"].(map[string]any)
			for name, d := range q["domains"].(map[string]any) {
				dm := d.(map[string]any)
				tr := row(t, page, "data-domain", name)
				require.Contains(t, tr, fmt.Sprintf(">%.4f<", dm["drop"].(float64)), name)
				require.Contains(t, tr, fmt.Sprintf(">%.4f<", dm["upper"].(float64)), name)
				require.Contains(t, page, fmt.Sprintf(`data-label="%s" data-value="%s" data-upper="%s"`, name,
					strconv.FormatFloat(dm["drop"].(float64), 'f', -1, 64), strconv.FormatFloat(dm["upper"].(float64), 'f', -1, 64)))
			}
			require.Contains(t, page, `id="tier" class="st `)
			require.Contains(t, page, ">"+q["tier"].(string)+"</span>")
			require.Contains(t, page, "tier A ≤ 0.03")
			require.Contains(t, page, "tier B ≤ 0.05")
			// Efficiency: each workload's rate, peak and budget replay.
			for w, rate := range res["efficiency"].(map[string]any) {
				tr := row(t, page, "data-workload", w)
				require.Contains(t, tr, fmt.Sprintf(">%.1f<", rate.(float64)), w)
				b := res["engine"].(map[string]any)["budget"].(map[string]any)[w+"@1.02"].(map[string]any)
				require.Contains(t, tr, fmt.Sprintf("%.3f GiB · %.3f GiB", b["budget_gib"].(float64), b["cap_gib"].(float64)), w)
				verdict := "failed"
				if b["healthy"].(bool) {
					verdict = "held"
				}
				require.Contains(t, tr, ">"+verdict+"</span> "+verdict+": ran "+fmt.Sprintf("%.0f of %.0f", b["running"].(float64), b["full_running"].(float64)), w)
				if pm, ok := res["peak_memory"].(map[string]any); ok {
					require.Contains(t, tr, fmt.Sprintf("%.3f GiB", pm[w].(map[string]any)["peak_gib"].(float64)), w)
				}
				require.Contains(t, tr, `class="n ttft">—`, "no latencies without the store")
			}
			// KL and the length shift.
			kl := res["kl"].(map[string]any)
			require.Contains(t, page, fmt.Sprintf("KL %.5f ± %.5f", kl["kl"].(float64), kl["kl_se"].(float64)))
			ln := q["length"].(map[string]any)
			require.Contains(t, page, fmt.Sprintf("length shift %.2f%%", 100*ln["length_shift"].(float64)))
			// The contract: both labels and the bits per weight.
			c := res["contract"].(map[string]any)
			require.Contains(t, page, fmt.Sprintf(`<td id="bits-per-weight">%.3f</td>`, c["bits_per_weight"].(float64)))
			require.Contains(t, page, `<strong id="detected">`+rec.Solution.DetectedPrecision+`</strong>`)
			// The score and why.
			ds := res["dev_score"].(map[string]any)
			require.Contains(t, page, fmt.Sprintf(`<span id="score-value">%.4f</span>`, ds["score"].(float64)))
			if reason, ok := ds["reason"].(string); ok {
				require.Contains(t, page, `<p id="score-why">`+html.EscapeString(reason)+`</p>`)
			} else {
				require.Contains(t, page, fmt.Sprintf("E = %.4f and D = %.4f", ds["efficiency_gain"].(float64), ds["drift"].(float64)))
			}
			// No audits in the fixtures (null), and no store here.
			require.Contains(t, page, "no audit in this record")
			require.Contains(t, page, html.EscapeString(NoStore))
		})
	}
}

// fold folds events into a record as the gateway does.
func fold(t *testing.T, evs ...event.Event) record.Submission {
	t.Helper()
	var rec *record.Submission
	for _, e := range evs {
		next, _, err := projector.Fold(rec, e)
		require.NoError(t, err, e.Type())
		rec = next
	}
	return *rec
}

func sampleEvent(t *testing.T, typ events.Type, n int, data any) event.Event {
	t.Helper()
	if data == nil {
		data = bustest.Sample(typ)
	}
	e, err := events.NewEvent(events.DeriveID(bustest.SampleSubject, string(typ)), typ, events.Source("test"), bustest.SampleSubject, data)
	require.NoError(t, err)
	e.SetTime(time.Date(2026, 10, 13, 5, 46, 19, 0, time.UTC).Add(time.Duration(n) * time.Second))
	return e
}

// TestSubmissionFailedAtEachStage: a submission whose pipeline stopped
// at each stage in turn, folded from its events: the page names the
// stage, its code and sentence, shows the stages before it done and
// after it skipped, and says of each missing block why it is missing.
func TestSubmissionFailedAtEachStage(t *testing.T) {
	broken, err := json.Marshal(record.Contract{DetectedPrecision: "W16A16KV8", DeclaredPrecision: "W4A16KV8", BitsPerWeight: 16,
		Violations: []record.Violation{
			{Code: "precision_wider_than_declared", Message: "W4A16KV8 declared · the service reads W16A16KV8"},
			{Code: "foreign_tensors", Message: "2 tensors the source lacks <lora_A>, 3.1% of tensor bytes"},
		}})
	require.NoError(t, err)
	for i, stage := range events.Stages {
		t.Run(stage, func(t *testing.T) {
			evs := []event.Event{sampleEvent(t, events.SubmissionReceived, 0, nil)}
			kept := &events.ContractCompletedData{SubmissionID: bustest.SampleSubject, DetectedPrecision: "W8A8KV8",
				Contract: record.Contract{OK: true, DetectedPrecision: "W8A8KV8", DeclaredPrecision: "W8A8KV8", BitsPerWeight: 8.1}}
			for _, before := range events.Stages[:i] {
				var data any
				if before == "contract" {
					data = kept
				}
				evs = append(evs, sampleEvent(t, events.Type("dev.lowbarena."+before+".started.v1"), 1, nil),
					sampleEvent(t, events.Type("dev.lowbarena."+before+".completed.v1"), 2, data))
			}
			failed := &events.StageFailedData{SubmissionID: bustest.SampleSubject, Stage: stage, Reason: stage + "_refused",
				Message: "the " + stage + " stage refused it: fix <this> & submit again"}
			if stage == "contract" {
				failed.Reason, failed.Detail = "precision_wider_than_declared", broken
			}
			evs = append(evs, sampleEvent(t, events.Type("dev.lowbarena."+stage+".started.v1"), 3, nil),
				sampleEvent(t, events.Type("dev.lowbarena."+stage+".failed.v1"), 4, failed))
			// Efficiency runs beside quality (both start when the
			// contract completes): a failed quality does not skip it, and
			// it ends on its own.
			beside := stage == "quality"
			if beside {
				evs = append(evs, sampleEvent(t, events.EfficiencyStarted, 5, nil), sampleEvent(t, events.EfficiencyCompleted, 6, nil))
			}
			rec := fold(t, evs...)
			require.Equal(t, record.StatusFailed, rec.Status)
			page := render(t, KindSubmission, Page{Title: "x", Body: NewSubmission(rec, Telemetry{})})

			has(t, page, "<h2>Failed at the "+stage+" stage</h2>")
			has(t, page, `<code class="reason">`+failed.Reason+`</code>: `+html.EscapeString(failed.Message))
			require.NotContains(t, page, "<this>", "escaped")
			for j, s := range events.Stages {
				want := map[bool]string{true: "done", false: "skipped"}[j < i || (beside && s == "efficiency")]
				if j == i {
					want = "failed"
				}
				require.Contains(t, row(t, page, "data-stage", s), `data-status="`+want+`"`, s)
			}
			for _, s := range events.Stages[i+1:] {
				if beside && s == "efficiency" {
					require.NotContains(t, page, "the efficiency stage was skipped", "efficiency ran beside quality")
					continue
				}
				has(t, page, "not measured: the "+s+" stage was skipped because the "+stage+" stage failed ("+failed.Reason+")")
			}
			if stage != "build" && stage != "contract" {
				has(t, page, `<p class="absent">the `+stage+` stage failed: `+failed.Reason+`: `+html.EscapeString(failed.Message)+`</p>`)
			}
			if stage == "contract" {
				// Each violation, with its code and sentence.
				require.Contains(t, page, `<span id="contract-verdict" class="st failed">broken</span>`)
				require.Contains(t, page, `<li data-code="precision_wider_than_declared"><code class="reason">precision_wider_than_declared</code>: W4A16KV8 declared · the service reads W16A16KV8</li>`)
				require.Contains(t, page, `<li data-code="foreign_tensors"><code class="reason">foreign_tensors</code>: 2 tensors the source lacks &lt;lora_A&gt;, 3.1% of tensor bytes</li>`)
				require.Contains(t, page, `<span class="st failed">differs</span>`)
			}
			if i > 1 {
				has(t, page, `<span id="contract-verdict" class="st done">kept</span>`)
				has(t, page, `<td id="bits-per-weight">8.100</td>`)
			}
		})
	}
}

// TestSubmissionFailureLogTail: an engine that died names its log tail
// in the failure's sentence; the page shows the sentence, and the tail
// apart as the engine wrote it.
func TestSubmissionFailureLogTail(t *testing.T) {
	rec := record.Submission{ID: "s1", Participant: "alice", Status: record.StatusFailed,
		Stages: []record.Stage{{Name: "efficiency", Status: record.StatusFailed, Reason: "engine_crashed"}},
		Error: &record.Error{Stage: "efficiency", Code: "engine_crashed",
			Message: "engine died before becoming healthy (last error: HTTP 503 from /health); container log tail: INFO loading <weights>\nERROR EngineCore failed to start"}}
	s := NewSubmission(rec, Telemetry{})
	require.Equal(t, "engine died before becoming healthy (last error: HTTP 503 from /health)", s.Failure.Message)
	require.Equal(t, "INFO loading <weights>\nERROR EngineCore failed to start", s.FailureLogTail)
	require.Contains(t, rec.Error.Message, "container log tail", "the record is left whole")
	page := render(t, KindSubmission, Page{Title: "x", Body: s})
	has(t, page, `<code class="reason">engine_crashed</code>: engine died before becoming healthy (last error: HTTP 503 from /health)</p>`)
	has(t, page, `<pre class="logtail">INFO loading &lt;weights&gt;`+"\n"+`ERROR EngineCore failed to start</pre>`)
	has(t, page, "the efficiency stage failed: engine_crashed: engine died before becoming healthy (last error: HTTP 503 from /health)</p>")
	require.Equal(t, 1, strings.Count(page, "EngineCore failed to start"), "the tail once, under the failure")

	rec.Error.Message = "the bundle holds a pickle"
	page = render(t, KindSubmission, Page{Title: "x", Body: NewSubmission(rec, Telemetry{})})
	require.NotContains(t, page, "logtail", "no tail, no block")
}

// TestSubmissionTelemetry: the efficiency job's runs become one memory
// plot each, the replays with their budget and hard cap drawn at the
// record's values, and the candidate's latencies fill the table.
func TestSubmissionTelemetry(t *testing.T) {
	rate := 1200.0
	rec := record.Submission{ID: "s1", Participant: "team", Split: "dev", Status: "done",
		Result: record.Result{Simulated: true, GPU: "NVIDIA H200 (simulated)",
			Efficiency:       map[string]float64{"serve": rate},
			AnchorEfficiency: map[string]float64{"serve": 1000},
			PeakMemory:       map[string]record.PeakMemory{"serve": {PeakGiB: 20}},
			AnchorPeakMemory: map[string]record.PeakMemory{"serve": {PeakGiB: 30}},
			Engine: &record.Engine{HardCap: true, Budget: map[string]record.Budget{
				"serve@1.02": {BudgetGiB: 20.4, CapGiB: 24.4, Factor: 1.02, FullRunning: 32, Running: 32, Healthy: true, Value: &rate}}}}}
	var samples []Sample
	for i := range 50 {
		samples = append(samples, Sample{Seconds: float64(i) / 10, GiB: 10 + float64(i)/5})
	}
	reqs := []Request{{TTFTMs: 10, E2EMs: 110, OutputTokens: 11}, {TTFTMs: 20, E2EMs: 220, OutputTokens: 21}, {TTFTMs: 30, E2EMs: 60, OutputTokens: 1}}
	tel := Telemetry{Runs: []Run{
		{Phase: "candidate", Samples: samples, Simulated: true, Latency: map[string]Latency{"serve": LatencyOf(reqs)}},
		{Phase: "serve@1.02", Samples: samples[:30], Simulated: true},
		{Phase: "interactive@1.02"}, // no samples: no plot
	}}
	s := NewSubmission(rec, tel)
	require.Len(t, s.Memory, 2)
	page := render(t, KindSubmission, Page{Title: "x", Body: s})
	require.Contains(t, page, `id="simulated"`)
	require.Contains(t, page, "NVIDIA H200 (simulated)")
	require.Contains(t, page, `<svg xmlns="http://www.w3.org/2000/svg" id="memory-candidate"`)
	require.Contains(t, page, "Measured run: peak 19.800 GiB")
	replay := page[strings.Index(page, `id="memory-serve@1.02"`):]
	replay = replay[:strings.Index(replay, "</svg>")]
	require.Contains(t, replay, `class="rule budget" data-at="20.4"`)
	require.Contains(t, replay, `class="rule cap" data-at="24.4"`)
	require.Contains(t, replay, "budget 20.400 GiB")
	require.Contains(t, replay, "hard cap 24.400 GiB")
	require.Contains(t, replay, `class="note"`)
	tr := row(t, page, "data-workload", "serve")
	// TTFT p50 of 10, 20, 30 is 20; TPOT of the two many-token requests
	// is 100/10 = 10 and 200/20 = 10 ms.
	require.Contains(t, tr, `<td class="n ttft">20.0</td>`)
	require.Contains(t, tr, `<td class="n tpot">10.00</td>`)
	require.Contains(t, tr, "1.20×", "speed = 1200 / 1000")
	require.Contains(t, tr, "1.50×", "memory = 30 / 20")
	require.Contains(t, tr, "held: ran 32 of 32 requests at once, kept 100.0% of its rate")
}

func TestLatencyOf(t *testing.T) {
	for _, tt := range []struct {
		name  string
		reqs  []Request
		want  Latency
		delta float64
	}{
		{"none", nil, Latency{}, 0},
		{"one", []Request{{TTFTMs: 50, E2EMs: 150, OutputTokens: 5}}, Latency{Requests: 1, TTFTP50: 50, TTFTP99: 50, TPOTP50: 25, TPOTP99: 25, TPOTRequests: 1, OutputTokensPerReq: 5}, 0},
		// Interpolated between the nearest ranks: p99 of 10..40 is 10 + 0.99*3*10.
		{"four", []Request{{TTFTMs: 40, E2EMs: 40, OutputTokens: 1}, {TTFTMs: 10, E2EMs: 20, OutputTokens: 2}, {TTFTMs: 30, E2EMs: 90, OutputTokens: 3}, {TTFTMs: 20, E2EMs: 20, OutputTokens: 0}},
			Latency{Requests: 4, TTFTP50: 25, TTFTP99: 39.7, TPOTP50: 20, TPOTP99: 29.8, TPOTRequests: 2, OutputTokensPerReq: 1.5}, 1e-9},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := LatencyOf(tt.reqs)
			require.InDelta(t, tt.want.TTFTP50, got.TTFTP50, tt.delta)
			require.InDelta(t, tt.want.TTFTP99, got.TTFTP99, tt.delta)
			require.InDelta(t, tt.want.TPOTP50, got.TPOTP50, tt.delta)
			require.InDelta(t, tt.want.TPOTP99, got.TPOTP99, tt.delta)
			require.Equal(t, tt.want.Requests, got.Requests)
			require.Equal(t, tt.want.TPOTRequests, got.TPOTRequests)
			require.InDelta(t, tt.want.OutputTokensPerReq, got.OutputTokensPerReq, 1e-12)
		})
	}
}

func TestRunID(t *testing.T) {
	for _, tt := range []struct {
		id       string
		delivery int
		phase    string
		ok       bool
	}{
		{"eff-0123456789abcdef01234567-2/candidate", 2, "candidate", true},
		{"eff-0123-1/serve@1.02", 1, "serve@1.02", true},
		{"sla-abc-1/candidate-1", 1, "candidate-1", true},
		{"eff-abc/candidate", 0, "", false},
		{"eff-abc-1", 0, "", false},
		{"eff-abc-1/", 0, "", false},
	} {
		d, p, ok := RunID(tt.id)
		require.Equal(t, tt.ok, ok, tt.id)
		require.Equal(t, tt.delivery, d, tt.id)
		require.Equal(t, tt.phase, p, tt.id)
	}
}

func TestThin(t *testing.T) {
	var s []Sample
	for i := range 1000 {
		s = append(s, Sample{Seconds: float64(i), GiB: float64(i % 7)})
	}
	s[503].GiB = 99
	out := Thin(s, 100)
	require.Len(t, out, 100)
	peak := 0.0
	for i, x := range out {
		peak = max(peak, x.GiB)
		if i > 0 {
			require.Greater(t, x.Seconds, out[i-1].Seconds, "in order")
		}
	}
	require.Equal(t, 99.0, peak, "a peak is never thinned away")
	require.Len(t, Thin(s[:10], 100), 10)
}

// TestSubmissionPatch: the submission page shows the engine patch (path,
// digest, files, lines) and the engine built from it, and nothing of a
// patch for a bundle without one; the round page's label says the same
// in one line.
func TestSubmissionPatch(t *testing.T) {
	sha, engine := strings.Repeat("ab", 32), strings.Repeat("cd", 32)
	p := &record.Patch{Path: "patches/fast.patch", Size: 120, SHA256: sha, Files: []string{"sched/batch.go", "sched/sched.go"},
		LinesAdded: 12, LinesRemoved: 3, Revision: "simengine 1.0", SourceDigest: strings.Repeat("ef", 32), EngineDigest: engine}
	rec := record.Submission{ID: "s1", Participant: "alice", Status: record.StatusRunning, Bundle: &record.Bundle{Digest: sha, Files: 5, Patch: p}}
	page := render(t, KindSubmission, Page{Title: "x", Body: NewSubmission(rec, Telemetry{})})
	has(t, page, `engine patch <code>patches/fast.patch</code> <code title="`+sha+`">`+Short(sha)+`</code> · 2 files, +12 −3 lines: <code>sched/batch.go</code>, <code>sched/sched.go</code>`)
	has(t, page, `engine <code id="engine-digest" title="`+engine+`">`+Short(engine)+`</code>, patched from simengine 1.0</p>`)
	require.Equal(t, "patches/fast.patch "+Short(sha)+" · 2 files +12 −3 · engine "+Short(engine), PatchLabel(p))

	old := &record.Patch{Path: "fast.patch", Size: 10, SHA256: sha}
	require.Equal(t, "fast.patch "+Short(sha), PatchLabel(old), "a patch from before summaries: its file and digest")
	require.Empty(t, PatchLabel(nil))
	rec.Bundle.Patch = old
	page = render(t, KindSubmission, Page{Title: "x", Body: NewSubmission(rec, Telemetry{})})
	has(t, page, `engine patch <code>fast.patch</code> <code title="`+sha+`">`+Short(sha)+`</code></p>`)
	require.NotContains(t, page, "engine-digest")

	rec.Bundle.Patch = nil
	page = render(t, KindSubmission, Page{Title: "x", Body: NewSubmission(rec, Telemetry{})})
	require.NotContains(t, page, `id="patch"`)
}
