package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/adapters/hub/hubtest"
	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/access"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/app/apptest"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/ctl"
	"github.com/lowbarena/lowbarena/schemas"
	"github.com/lowbarena/lowbarena/services/runner/engine"
)

// arenaBin is the (light) arena binary the end-to-end tests run as real
// processes, upBin the arena-up beside it; exampleDir holds the example
// campaign and bundles.
var arenaBin, upBin, exampleDir string

// bundleDir is the folder of an example bundle.
func bundleDir(name string) string { return filepath.Join(exampleDir, examples.SubmissionsDir, name) }

func TestMain(m *testing.M) {
	// Runners started in this process sandbox patched engines with the
	// test binary as their helper, as arena's main does.
	engine.RunHelper()
	dir, err := os.MkdirTemp("", "arena-e2e-")
	if err != nil {
		panic(err)
	}
	// The light arena, as participants build it, and beside it arena-up,
	// which holds up and demo (and the embedded engine), as make build
	// lays them out.
	arenaBin = filepath.Join(dir, "arena")
	out, err := exec.Command("go", "build", "-o", arenaBin, ".").CombinedOutput()
	if err != nil {
		os.Stderr.Write(out)
		panic("build arena: " + err.Error())
	}
	upBin = filepath.Join(dir, "arena-up")
	if out, err := exec.Command("go", "build", "-tags", "embedded", "-o", upBin, ".").CombinedOutput(); err != nil {
		os.Stderr.Write(out)
		panic("build arena-up: " + err.Error())
	}
	// The example campaign's engine is simengine, found beside the arena
	// binary as make build lays them out.
	if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, "simengine"), "../simengine").CombinedOutput(); err != nil {
		os.Stderr.Write(out)
		panic("build simengine: " + err.Error())
	}
	// The examples come from the CLI itself, as a participant would make them.
	exampleDir = filepath.Join(dir, "examples")
	if out, err := exec.Command(arenaBin, "example", exampleDir).CombinedOutput(); err != nil {
		os.Stderr.Write(out)
		panic("arena example: " + err.Error())
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// result is what a finished CLI process printed.
type result struct {
	stdout, stderr string
	code           int
}

func arena(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, arenaBin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return result{stdout.String(), stderr.String(), code}
}

// upProc is a running `arena up`.
type upProc struct {
	cmd           *exec.Cmd
	natsURL, http string
	data          string
	stderr        *bytes.Buffer
	exited        chan struct{}
	// out is what it printed on standard output.
	outMu sync.Mutex
	out   strings.Builder
}

// stdout is what arena up has printed on its standard output so far.
func (p *upProc) stdout() string {
	p.outMu.Lock()
	defer p.outMu.Unlock()
	return p.out.String()
}

// log is arena up's log file.
func (p *upProc) log(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p.data, "arena.log"))
	require.NoError(t, err)
	return string(b)
}

var upLine = regexp.MustCompile(`arena up: NATS (nats://\S+) · HTTP http://(\S+) ·`)

func startUp(t *testing.T, data string, extra ...string) *upProc {
	t.Helper()
	cmd := exec.Command(arenaBin, append([]string{"up", "--data", data, "--nats-listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
		"--metrics-addr", "127.0.0.1:0", "--campaigns", filepath.Join(exampleDir, examples.CampaignsDir)}, extra...)...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	p := &upProc{cmd: cmd, data: data, stderr: &bytes.Buffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	require.NoError(t, cmd.Start())
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.outMu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.outMu.Unlock()
			lines <- sc.Text()
		}
		close(lines)
	}()
	go func() { _ = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
	})
	deadline := time.After(60 * time.Second)
	for {
		select {
		case line, ok := <-lines:
			require.True(t, ok, "arena up exited before it was up: %s", p.stderr)
			if m := upLine.FindStringSubmatch(line); m != nil {
				p.natsURL, p.http = m[1], m[2]
				go func() {
					for range lines {
					}
				}()
				return p
			}
		case <-deadline:
			t.Fatalf("arena up did not come up: %s", p.stderr)
		}
	}
}

// stop sends SIGTERM and requires a clean exit, and that the arena's
// NATS refused none of its own clients anything: every service and the
// CLI keep to their permissions (a refusal is logged as "NATS refused",
// in DATA/arena.log or, with --log-format json, on standard error).
func (p *upProc) stop(t *testing.T) {
	t.Helper()
	for where, text := range map[string]string{"standard error": p.stderr.String(), "the log": p.log(t)} {
		require.NotContains(t, text, "NATS refused", "a client of this arena did something its NATS user may not (%s)", where)
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("arena up did not stop on SIGTERM: %s", p.stderr)
	}
	require.Equal(t, 0, p.cmd.ProcessState.ExitCode(), "arena up exit: %s", p.stderr)
}

func lastWord(s string) string {
	f := strings.Fields(strings.TrimSpace(s))
	if len(f) == 0 {
		return ""
	}
	return f[len(f)-1]
}

func showJSON(t *testing.T, natsURL, id string) (record.Submission, map[string]any) {
	t.Helper()
	r := arena(t, "show", id, "--json", "--nats", natsURL)
	require.Equal(t, 0, r.code, "show: %s", r.stderr)
	var rec record.Submission
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rec))
	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &raw))
	// The record the arena serves keeps the layout of the fixtures'
	// records: the record schema they validate against.
	v, err := schemas.Default()
	require.NoError(t, err)
	require.NoError(t, v.ValidateRecord([]byte(r.stdout)), "record %s", id)
	return rec, raw
}

func TestCLIWithoutArena(t *testing.T) {
	for _, args := range [][]string{
		{"show", "abc123", "--nats", "nats://127.0.0.1:1"},
		{"watch", "--nats", "nats://127.0.0.1:1"},
		{"submit", bundleDir("fp8-w8a8"), "--nats", "nats://127.0.0.1:1"},
	} {
		r := arena(t, args...)
		require.Equal(t, exitFailed, r.code, args)
		require.Contains(t, r.stderr, "the arena is not running: nothing answers at nats://127.0.0.1:1", args)
		require.Contains(t, r.stderr, "arena up", args)
	}
	r := arena(t, "show", "../etc", "--nats", "nats://127.0.0.1:1")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "is not a submission id")
	r = arena(t, "frobnicate")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, `unknown command "frobnicate"`)
}

func TestArenaEndToEnd(t *testing.T) { //nolint:gocyclo // a scenario: one arena driven through every command in order, read as one script
	// A checkpoint by reference: the FP8 example's files in a private
	// model repository on loopback, which the arena reads with its
	// operator's token.
	const token = "hf_e2e_NeverShow_0451"
	repo, sawToken := privateRepository(t, bundleDir("fp8-w8a8"), token)
	t.Setenv(app.EnvRefHosts, repo.Host())
	t.Setenv(app.EnvRefTokens, repo.Host()+"="+token)

	data := t.TempDir()
	// The CLI connects as the arena's operator, with the seed `arena up`
	// writes to its data folder.
	t.Setenv(app.EnvNATSCreds, filepath.Join(credentialsDir(data), access.Operator+".nk"))
	up := startUp(t, data)

	// A second arena on the same folder is refused.
	r := arena(t, "up", "--data", data, "--nats-listen", "127.0.0.1:0", "--http", "127.0.0.1:0")
	require.Equal(t, exitFailed, r.code)
	require.Contains(t, r.stderr, "data folder in use")

	// watch follows events live, as a separate process.
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	watch := exec.CommandContext(wctx, arenaBin, "watch", "--json", "--all", "--nats", up.natsURL)
	wout, err := watch.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, watch.Start())
	watched := make(chan map[string]any, 64)
	go func() {
		sc := bufio.NewScanner(wout)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				watched <- m
			}
		}
	}()

	r = arena(t, "submit", bundleDir("fp8-w8a8"), "--nats", up.natsURL)
	require.Equal(t, 0, r.code, r.stderr)
	id := lastWord(r.stdout)
	require.True(t, events.ValidID(id), "submit printed %q", r.stdout)

	select {
	case m := <-watched:
		require.Equal(t, string(events.SubmissionReceived), m["type"])
		require.Equal(t, id, m["subject"])
		require.Equal(t, examples.TaskID, m["data"].(map[string]any)["task_id"])
	case <-time.After(30 * time.Second):
		t.Fatal("arena watch printed no event")
	}

	// The same checkpoint submitted by reference: the bundle holds
	// submission.json and the checkpoint.json `arena reference` wrote from
	// a local copy; its shards stay in the repository.
	refDir := t.TempDir()
	decl, err := os.ReadFile(filepath.Join(bundleDir("fp8-w8a8"), "submission.json"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(refDir, "submission.json"), decl, 0o644))
	r = arena(t, "reference", bundleDir("fp8-w8a8"), "--repository", repo.Repository(), "--revision", hubtest.Revision, "--out", filepath.Join(refDir, "checkpoint.json"))
	require.Equal(t, 0, r.code, r.stderr)
	r = arena(t, "submit", refDir, "--nats", up.natsURL)
	require.Equal(t, 0, r.code, r.stderr)
	refID := lastWord(r.stdout)
	require.True(t, events.ValidID(refID), "submit printed %q", r.stdout)

	// A cheat: the FP8 checkpoint (its contract holds) with an engine
	// patch that takes a damaged fast path under load.
	r = arena(t, "submit", bundleDir("engine-fast-path"), "--nats", up.natsURL)
	require.Equal(t, 0, r.code, r.stderr)
	cheatID := lastWord(r.stdout)
	require.True(t, events.ValidID(cheatID), "submit printed %q", r.stdout)
	// Every other example whose bundle patches the engine: the honest
	// patch and the other cheats, each with the audit the examples' table
	// names for it.
	table, err := examples.Write(t.TempDir())
	require.NoError(t, err)
	var patchedExamples []examples.Example
	patchedIDs := map[string]string{}
	for _, ex := range table {
		if ex.Patch == "" || ex.Name == "engine-fast-path" {
			continue
		}
		r = arena(t, "submit", bundleDir(ex.Name), "--nats", up.natsURL)
		require.Equal(t, 0, r.code, r.stderr)
		patchedIDs[ex.Name] = lastWord(r.stdout)
		patchedExamples = append(patchedExamples, ex)
	}
	require.NotEmpty(t, patchedExamples)

	// Build and contract run; the later stages are not served yet.
	var rec record.Submission
	var raw map[string]any
	require.Eventually(t, func() bool {
		res := arena(t, "show", id, "--json", "--nats", up.natsURL)
		if res.code != 0 {
			return false
		}
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &rec))
		return stageOf(t, rec, "contract").Status == record.StatusDone
	}, 60*time.Second, 200*time.Millisecond)
	rec, raw = showJSON(t, up.natsURL, id)
	require.Equal(t, id, rec.ID)
	require.Equal(t, record.StatusRunning, rec.Status)
	require.Equal(t, "example-team", rec.Participant)
	require.Equal(t, "W8A8KV8", rec.Solution.Precision)
	require.Equal(t, "W8A8KV8", rec.Solution.DetectedPrecision)
	names := make([]string, len(rec.Stages))
	for i, s := range rec.Stages {
		names[i] = s.Name
		require.Contains(t, []string{"pending", "running", "done", "failed", "skipped"}, s.Status)
	}
	require.Equal(t, events.Stages, names)
	require.Equal(t, record.StatusDone, stageOf(t, rec, "build").Status, "build")
	for _, k := range []string{"agent", "created_at", "error", "id", "participant", "partition", "result", "runner", "solution", "split", "stages", "status", "task_id", "track", "updated_at"} {
		require.Contains(t, raw, k, "the record keeps the fixtures' top-level fields")
	}
	require.NotNil(t, rec.Bundle)
	require.Len(t, rec.Bundle.Digest, 64)
	require.Empty(t, rec.Bundle.DuplicateOf)
	contract := raw["result"].(map[string]any)["contract"].(map[string]any)
	for _, k := range []string{"ok", "bits_per_weight", "model_bits_per_weight", "safetensor_bytes", "quantization", "weight_bits",
		"activation_bits", "kv_bits", "detected_precision", "declared_precision", "foreign_tensors", "rope_source", "rope_artifact", "violations"} {
		require.Contains(t, contract, k, "the contract block has the fixtures' layout")
	}
	require.Equal(t, true, contract["ok"])
	require.InDelta(t, 8.1, contract["bits_per_weight"], 0.1)

	// The efficiency stage: the runner measures the checkpoint beside the
	// campaign's BF16 reference on the simulated GPU and replays it under
	// its budget; the record gets the fixtures' efficiency layout.
	require.Eventually(t, func() bool {
		rec, raw = showJSON(t, up.natsURL, id)
		ended := func(st record.Stage) bool {
			return st.Status != record.StatusPending && st.Status != record.StatusRunning
		}
		return ended(stageOf(t, rec, "quality")) && ended(stageOf(t, rec, "efficiency"))
	}, 4*time.Minute, 500*time.Millisecond, "quality and efficiency end")
	require.Equal(t, record.StatusDone, stageOf(t, rec, "efficiency").Status, "efficiency: %+v", rec.Error)
	result := raw["result"].(map[string]any)
	for _, k := range []string{"efficiency", "anchor_efficiency", "peak_memory", "anchor_peak_memory", "engine", "workload", "gpu_hours"} {
		require.Contains(t, result, k, "the efficiency block has the fixtures' layout")
	}
	for _, w := range []string{"serve", "interactive", "long_context"} {
		pm := result["peak_memory"].(map[string]any)[w].(map[string]any)
		for _, k := range []string{"device_peak_gib", "kv_bytes_per_token", "kv_gib", "kv_usage", "other_gib", "peak_gib", "weights_gib"} {
			require.Contains(t, pm, k)
		}
		// FP8 weights are fewer bytes than BF16's: less memory at every
		// workload, and faster decode where weights dominate a step.
		require.Less(t, rec.Result.PeakMemory[w].PeakGiB, rec.Result.AnchorPeakMemory[w].PeakGiB, w)
		b := rec.Result.Engine.Budget[w+"@1.02"]
		require.True(t, b.Healthy, "%s budget: %+v", w, b)
	}
	require.Greater(t, rec.Result.Efficiency["serve"], rec.Result.AnchorEfficiency["serve"])
	require.Equal(t, "fp8", rec.Result.Engine.Startup.KVCacheDType)
	// The honest engine passes every audit: its answers to the eval items
	// mixed into the load are the quality job's, its tokens re-tokenise
	// to what it claims, repeats are no faster, its probes agree.
	au := rec.Result.Engine.Audit
	require.NotNil(t, au)
	require.Equal(t, record.VerdictPass, au.Verdict, au.Message)
	require.Equal(t, "fp8", au.KVCacheDTypeEngine)
	require.Equal(t, record.VerdictPass, au.ServedModel.Verdict, au.ServedModel.Message)
	require.Equal(t, au.ServedModel.Probes, au.ServedModel.Agreed)
	require.Equal(t, record.VerdictPass, au.TokenHonesty.Verdict, au.TokenHonesty.Message)
	require.Equal(t, au.TokenHonesty.Claimed, au.TokenHonesty.Retokenized)
	require.Equal(t, record.VerdictPass, au.AnswerCache.Verdict, au.AnswerCache.Message)
	require.Equal(t, record.VerdictPass, au.AccuracyUnderLoad.Verdict, au.AccuracyUnderLoad.Message)
	require.GreaterOrEqual(t, au.AccuracyUnderLoad.Compared, 64)
	require.Equal(t, 1.0, au.AccuracyUnderLoad.Agreement)
	for k, want := range map[string]string{"token_honesty": "TEST06", "answer_cache": "TEST04", "accuracy_under_load": "TEST01"} {
		got := raw["result"].(map[string]any)["engine"].(map[string]any)["audit"].(map[string]any)[k].(map[string]any)["mlperf"]
		require.Equal(t, want, got, k)
	}
	require.True(t, rec.Result.Simulated)
	require.Contains(t, rec.Result.GPU, "simulated")
	require.Greater(t, *rec.Result.GPUHours, 0.0)

	// The quality stage: the campaign's suite answered by the checkpoint
	// and by BF16 (computed once), paired item by item; the record gets
	// the fixtures' dev_quality layout.
	require.Equal(t, record.StatusDone, stageOf(t, rec, "quality").Status, "quality: %+v", rec.Error)
	dq := result["dev_quality"].(map[string]any)
	for _, k := range []string{"domains", "evaluations", "first_quality", "length", "recovery", "recovery_se", "reference_rows", "tier", "valid_domains", "worst_domain", "worst_drop", "worst_upper"} {
		require.Contains(t, dq, k, "dev_quality has the fixtures' layout")
	}
	require.Len(t, rec.Result.DevQuality.Domains, 6)
	for name, d := range rec.Result.DevQuality.Domains {
		require.InDelta(t, d.Drop+1.645*d.SE, d.Upper, 1e-12, name)
		require.Contains(t, []string{"valid", "R5_diagnostic"}, d.Status)
	}
	require.Equal(t, "R5_diagnostic", rec.Result.DevQuality.Domains["expert"].Status)
	require.Contains(t, []string{"A", "B", "fail"}, rec.Result.DevQuality.Tier)
	require.NotNil(t, rec.Result.KL)
	require.Equal(t, 16, rec.Result.KL.Sequences)

	// The checkpoint by reference went through contract, quality and
	// efficiency like the uploaded one: the build fetched its small files,
	// the contract read each shard's header with two Range requests, the
	// runner staged the shards once (progress in bytes in arena watch).
	var refRec record.Submission
	require.Eventually(t, func() bool {
		refRec, _ = showJSON(t, up.natsURL, refID)
		ended := func(st record.Stage) bool {
			return st.Status != record.StatusPending && st.Status != record.StatusRunning
		}
		return ended(stageOf(t, refRec, "quality")) && ended(stageOf(t, refRec, "efficiency"))
	}, 4*time.Minute, 500*time.Millisecond, "quality and efficiency of the checkpoint by reference end")
	for _, st := range []string{"build", "contract", "quality", "efficiency"} {
		require.Equal(t, record.StatusDone, stageOf(t, refRec, st).Status, "%s: %+v", st, refRec.Error)
	}
	require.NotNil(t, refRec.Bundle.Reference)
	require.Equal(t, repo.Repository(), refRec.Bundle.Reference.Repository)
	require.Equal(t, hubtest.Revision, refRec.Bundle.Reference.Revision)
	require.Equal(t, "W8A8KV8", refRec.Solution.DetectedPrecision)
	require.Equal(t, rec.Result.Contract.HeaderBytesRead, refRec.Result.Contract.HeaderBytesRead, "the same headers, read over HTTP")
	require.Equal(t, rec.Result.Contract.SafetensorBytes, refRec.Result.Contract.SafetensorBytes)
	require.Less(t, refRec.Result.PeakMemory["serve"].PeakGiB, refRec.Result.AnchorPeakMemory["serve"].PeakGiB)
	require.Contains(t, []string{"A", "B", "fail"}, refRec.Result.DevQuality.Tier)
	shards := map[string][]string{}
	for _, q := range repo.Requests() {
		if strings.HasSuffix(q.Path, ".safetensors") {
			shards[q.Path] = append(shards[q.Path], q.Range)
			continue
		}
		require.Empty(t, q.Range, "the build fetches %s whole", q.Path)
	}
	require.Len(t, shards, 2)
	for name, ranges := range shards {
		require.Len(t, ranges, 3, "%s: the header in two ranges, then staged once: %v", name, ranges)
		require.Equal(t, "bytes=0-7", ranges[0], name)
		require.Regexp(t, `^bytes=8-\d+$`, ranges[1], name)
		require.Empty(t, ranges[2], "%s is staged whole, once", name)
	}
	require.True(t, sawToken(), "the repository was read with the operator's token")
	require.Regexp(t, `runner\.job\.progress\s+\S+\s+staging \[#{20}\] \S+ \S+ of \S+ \S+ \(100%\)`, watchUntil(t, up.natsURL, `staging .*\(100%\)`))

	// The score joins the three outcomes under lowb-score/v1; the dev
	// split is never ranked. The leaderboard and history answer from
	// ClickHouse, and a rescore reproduces the score from stored data.
	require.Eventually(t, func() bool {
		rec, raw = showJSON(t, up.natsURL, id)
		return rec.Result.DevScore != nil
	}, time.Minute, 300*time.Millisecond, "scored")
	ds := rec.Result.DevScore
	require.Equal(t, "lowb-score/v1", ds.Policy)
	require.NotNil(t, ds.EfficiencyGain)
	for _, k := range []string{"speeds", "speed", "memories", "memory", "efficiency_gain", "memory_saved", "peak_gib", "bf16_peak_gib", "drift", "mean_drop", "precision", "qualified", "reason", "score"} {
		require.Contains(t, raw["result"].(map[string]any)["dev_score"], k, "dev_score has the fixtures' layout")
	}
	require.Equal(t, "W8A8KV8", ds.Precision.Label)
	lb := arena(t, "leaderboard", "--json", "--nats", up.natsURL)
	require.Equal(t, 0, lb.code, lb.stderr)
	require.Contains(t, lb.stdout, id)
	hist := arena(t, "history", "--participant", "example-team", "--nats", up.natsURL)
	require.Equal(t, 0, hist.code, hist.stderr)
	require.Contains(t, hist.stdout, id)
	res := arena(t, "rescore", "--policy", "lowb-score/v1", "--json", "--nats", up.natsURL)
	require.Equal(t, 0, res.code, res.stderr)
	var rescored []map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &rescored))
	found := false
	for _, row := range rescored {
		if row["submission_id"] == id {
			found = true
			require.Equal(t, ds.Score, row["score"], "rescore reproduces the score")
		}
	}
	require.True(t, found, res.stdout)

	// The cheat is measured like the others and disqualified by the
	// accuracy-under-load audit: under load it answered the eval items
	// worse than in its quality job.
	var cheat record.Submission
	require.Eventually(t, func() bool {
		cheat, _ = showJSON(t, up.natsURL, cheatID)
		return cheat.Result.DevScore != nil || cheat.Status == record.StatusFailed
	}, 4*time.Minute, 500*time.Millisecond, "the cheat is scored")
	require.Equal(t, record.StatusDone, stageOf(t, cheat, "efficiency").Status, "%+v", cheat.Error)
	require.True(t, cheat.Result.Contract.OK, "its checkpoint keeps its contract")
	ca := cheat.Result.Engine.Audit
	require.Equal(t, record.VerdictFail, ca.Verdict)
	require.Equal(t, "accuracy_differs_under_load", ca.Reason, ca.Message)
	require.Positive(t, ca.AccuracyUnderLoad.Lower)
	require.Less(t, ca.AccuracyUnderLoad.LoadAccuracy, ca.AccuracyUnderLoad.QualityAccuracy)
	require.Equal(t, record.VerdictPass, ca.ServedModel.Verdict, "careful when asked one at a time")
	require.False(t, cheat.Result.DevScore.Qualified)
	require.Equal(t, 0.0, cheat.Result.DevScore.Score)
	require.True(t, strings.HasPrefix(*cheat.Result.DevScore.Reason, "audit accuracy_differs_under_load: "), *cheat.Result.DevScore.Reason)
	// Each of the other patched examples, its engine built from the
	// campaign's pinned source and its patch and run in the sandbox: a
	// cheat is disqualified for the reason of its own audit, the honest
	// patch passes every audit and is measured at its own speed, above
	// the unpatched engine's on the same checkpoint (fp8-w8a8).
	for _, ex := range patchedExamples {
		var pr record.Submission
		require.Eventually(t, func() bool {
			// A show that times out on a busy machine is asked again.
			res := arena(t, "show", patchedIDs[ex.Name], "--json", "--nats", up.natsURL)
			if res.code != 0 {
				return false
			}
			pr = record.Submission{}
			require.NoError(t, json.Unmarshal([]byte(res.stdout), &pr))
			return pr.Result.DevScore != nil || pr.Status == record.StatusFailed
		}, 6*time.Minute, time.Second, "%s is scored", ex.Name)
		require.Equal(t, record.StatusDone, stageOf(t, pr, "efficiency").Status, "%s: %+v", ex.Name, pr.Error)
		require.True(t, pr.Result.Contract.OK, "%s keeps its contract", ex.Name)
		pa := pr.Result.Engine.Audit
		require.NotNil(t, pa, ex.Name)
		t.Logf("%s: audit %s %s (%s); serve %.1f against the unpatched engine's %.1f", ex.Name, pa.Verdict, pa.Reason, pa.Message,
			pr.Result.Efficiency["serve"], rec.Result.Efficiency["serve"])
		if ex.Audit == "" {
			require.Equal(t, record.VerdictPass, pa.Verdict, "%s: %s", ex.Name, pa.Message)
			require.Greater(t, pr.Result.Efficiency["serve"], rec.Result.Efficiency["serve"], "%s is measured at its own speed", ex.Name)
			continue
		}
		require.Equal(t, record.VerdictFail, pa.Verdict, ex.Name)
		require.Equal(t, ex.Audit, pa.Reason, "%s: %s", ex.Name, pa.Message)
		require.False(t, pr.Result.DevScore.Qualified, ex.Name)
		require.True(t, strings.HasPrefix(*pr.Result.DevScore.Reason, "audit "+ex.Audit+": "), *pr.Result.DevScore.Reason)
	}
	// A rescore recomputes from the stored outcomes, audits included: the
	// cheat stays disqualified for the same reason.
	res = arena(t, "rescore", "--policy", "lowb-score/v1", "--json", "--nats", up.natsURL)
	require.Equal(t, 0, res.code, res.stderr)
	rescored = nil
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &rescored))
	found = false
	for _, row := range rescored {
		if row["submission_id"] == cheatID {
			found = true
			require.Equal(t, *cheat.Result.DevScore.Reason, row["reason"], "rescore keeps the audit's verdict")
			require.EqualValues(t, 0, row["score"])
		}
	}
	require.True(t, found, res.stdout)

	// A round on the pod: the in-round baseline, no incumbent yet, the
	// candidate, the drift baseline; followed step by step.
	rr := arena(t, "round", "start", "--campaign", examples.TaskID, "--candidates", id, "--wait", "--nats", up.natsURL)
	require.Equal(t, 0, rr.code, rr.stderr)
	require.Contains(t, rr.stdout, "15/15 Releasing the pod · done")
	require.Contains(t, rr.stdout, "round.completed")
	require.Contains(t, rr.stdout, "leader "+id+" (changed true)")
	rh := arena(t, "history", "--rounds", "--nats", up.natsURL)
	require.Equal(t, 0, rh.code, rh.stderr)
	require.Regexp(t, `round-\S+\s+qwen3-tiny\s+pod-0\s+complete\s+15\s+2\s+0`, rh.stdout)
	// Every SQL example of docs/operators/sql.md runs through arena sql
	// on the embedded default, against this arena's data.
	roundID := lastWord(rr.stdout)
	require.True(t, strings.HasPrefix(roundID, "round-"), rr.stdout)
	for _, stmt := range docSQL(t) {
		stmt = strings.ReplaceAll(stmt, "'round-...'", "'"+roundID+"'")
		stmt = strings.ReplaceAll(stmt, "submission_id = '...'", "submission_id = '"+id+"'")
		res := arena(t, "sql", stmt, "--json", "--nats", up.natsURL)
		require.Equal(t, 0, res.code, "%s\n%s", stmt, res.stderr)
		var rep ctl.SQLReply
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &rep))
		if !strings.Contains(stmt, "qualified = 1") { // the FP8 example's tier varies from run to run
			require.NotEmpty(t, rep.Rows, "the SQL page's example finds this arena's rows: %s", stmt)
		}
		require.Contains(t, rep.Engine, "chdb")
	}
	res = arena(t, "sql", "SELECT submission_id, score FROM scores FINAL WHERE submission_id = '"+id+"'", "--nats", up.natsURL)
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `submission_id\s+score\n-+\s+-+\n`+id+`\s+-?[0-9.e+-]+\n\(1 row, `, res.stdout)
	res = arena(t, "sql", "SELECT count() FROM numbers(100000000000)", "--timeout", "1s", "--nats", up.natsURL)
	require.Equal(t, exitFailed, res.code)
	require.Contains(t, res.stderr, "sql_timeout: the query ran past its limit of 1s")
	res = arena(t, "sql", "DROP TABLE scores", "--nats", up.natsURL)
	require.Equal(t, exitFailed, res.code)
	require.Contains(t, res.stderr, "sql_not_read_only: DROP is not read-only")

	bad2 := arena(t, "round", "start", "--campaign", examples.TaskID, "--candidates", "0000000000000000", "--nats", up.natsURL)
	require.Equal(t, exitFailed, bad2.code)
	require.Contains(t, bad2.stderr, "round refused: candidate 0000000000000000: the arena has no submission 0000000000000000")

	// The same record over HTTP: a dev record, so an operator's token
	// reads it and the public does not.
	resp, err := http.Get("http://" + up.http + "/v1/submissions/" + id)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "a dev record is not public")
	opr := arena(t, "operator", "add", "e2e-ops", "--nats", up.natsURL)
	require.Equal(t, 0, opr.code, opr.stderr)
	req, _ := http.NewRequest(http.MethodGet, "http://"+up.http+"/v1/submissions/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+lastWord(opr.stdout))
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var viaHTTP record.Submission
	require.NoError(t, json.Unmarshal(body, &viaHTTP))
	require.Equal(t, rec.ID, viaHTTP.ID)

	// The operator's read-only SQL at the gateway: the query service's
	// answer as arena sql --csv writes it, and its refusals with their
	// codes; a participant's token is refused (the gateway's NATS user
	// may call the service: "nothing refused" below checks it).
	sqlHTTP := func(token, query, stmt string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+up.http+"/v1/sql"+query, strings.NewReader(stmt))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	opToken := lastWord(opr.stdout)
	st, got := sqlHTTP(opToken, "?format=csv", "SELECT submission_id FROM scores FINAL WHERE submission_id = '"+id+"'")
	require.Equal(t, http.StatusOK, st, got)
	require.Equal(t, "submission_id\n"+id+"\n", got)
	cli := arena(t, "sql", "--csv", "SELECT submission_id FROM scores FINAL WHERE submission_id = '"+id+"'", "--nats", up.natsURL)
	require.Equal(t, cli.stdout, got, "the gateway answers what arena sql prints")
	st, got = sqlHTTP(opToken, "", "DROP TABLE scores")
	require.Equal(t, http.StatusBadRequest, st, got)
	require.Contains(t, got, `"code":"sql_not_read_only"`)
	st, got = sqlHTTP(opToken, "?timeout=1", "SELECT count() FROM numbers(100000000000)")
	require.Equal(t, http.StatusBadRequest, st, got)
	require.Contains(t, got, `"code":"sql_timeout"`)
	st, got = sqlHTTP("", "", "SELECT 1")
	require.Equal(t, http.StatusUnauthorized, st, got)

	// --wait follows the record; with no quality service running it gives
	// up at its timeout and says where the submission stands. The same
	// bundle a second time is recognised by its digest.
	r = arena(t, "submit", bundleDir("fp8-w8a8"), "--wait", "--timeout", "5s", "--nats", up.natsURL)
	require.Equal(t, exitFailed, r.code)
	require.Contains(t, r.stderr, "gave up waiting after 5s; still running: ")
	require.Contains(t, r.stderr, "still running")
	m := regexp.MustCompile(`submitted \S+ as (\S+); waiting`).FindStringSubmatch(r.stderr)
	require.NotNil(t, m, r.stderr)
	again := m[1]
	require.Eventually(t, func() bool {
		rec2, _ := showJSON(t, up.natsURL, again)
		return rec2.Bundle != nil && rec2.Bundle.DuplicateOf == id && rec2.Bundle.Digest == rec.Bundle.Digest
	}, 30*time.Second, 200*time.Millisecond, "the second submission of one bundle names the first")

	// A dishonest checkpoint is refused for its reason, and the record
	// keeps its contract block.
	r = arena(t, "submit", bundleDir("bf16-declared-w4"), "--wait", "--timeout", "60s", "--nats", up.natsURL)
	require.Equal(t, exitFailed, r.code, r.stderr)
	require.Contains(t, r.stdout, "FAILED")
	require.Contains(t, r.stdout, "precision_wider_than_declared: W4A16KV8 declared · the service reads W16A16KV8")
	bad, badRaw := showJSON(t, up.natsURL, lastWord(r.stdout))
	require.Equal(t, record.StatusFailed, bad.Status)
	require.Equal(t, "precision_wider_than_declared", bad.Error.Code)
	require.Equal(t, "contract", bad.Error.Stage)
	require.Equal(t, false, badRaw["result"].(map[string]any)["contract"].(map[string]any)["ok"])
	require.Equal(t, record.StatusSkipped, stageOf(t, bad, "quality").Status)

	// A bundle with pickled weights is refused by the build stage.
	pickled := t.TempDir()
	require.NoError(t, os.CopyFS(pickled, os.DirFS(bundleDir("int4-w4a16-g32"))))
	require.NoError(t, os.WriteFile(filepath.Join(pickled, "pytorch_model.bin"), []byte("\x80\x04 a pickle"), 0o644))
	r = arena(t, "submit", pickled, "--wait", "--timeout", "60s", "--nats", up.natsURL)
	require.Equal(t, exitFailed, r.code, r.stderr)
	require.Contains(t, r.stdout, "error       bundle_unsafe_file at build: pytorch_model.bin: pickled weights can run code")

	// Human output and unknown ids.
	r = arena(t, "show", id, "--nats", up.natsURL)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "submission "+id+"  DONE")
	require.Contains(t, r.stdout, "score       ")
	// Every stage the arena serves is done, score done or skipped (the
	// example is a dev submission).
	var line []string
	for _, st := range events.Stages {
		if st == "score" {
			line = append(line, "score (done|skipped)")
			continue
		}
		line = append(line, st+" done")
	}
	require.Regexp(t, strings.Join(line, " · "), r.stdout)
	require.Contains(t, r.stdout, "contract    kept · reads W8A8KV8")
	require.Regexp(t, `unquantized 1 embedding · 1 lm_head · \d+ norms \(BF16, [0-9.]+ [KM]iB\), outside the label`, r.stdout)
	require.Contains(t, r.stdout, "efficiency  speed ")
	require.Contains(t, r.stdout, "figures from a simulation (NVIDIA H200 (simulated))")
	r = arena(t, "show", "0000000000000000", "--nats", up.natsURL)
	require.Equal(t, exitFailed, r.code)
	require.Contains(t, r.stderr, "no such submission: the arena has no submission 0000000000000000")

	// A malformed event published straight to an arena subject (by a
	// service on its own subject: no other user may) is dead-lettered
	// with its reason, not lost and not looping.
	buildNC := connectAs(t, up.natsURL, app.NATSAuth{CredsFile: filepath.Join(credentialsDir(data), access.Build+".nk")}, access.Build)
	buildJS, err := jetstream.New(buildNC)
	require.NoError(t, err)
	_, err = buildJS.Publish(context.Background(), "arena.build.started.junk", []byte("not a cloudevent"))
	require.NoError(t, err)
	buildNC.Close()
	nc := connectAs(t, up.natsURL, app.AuthFromEnv(), access.Operator)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, err := js.Stream(context.Background(), events.StreamDLQ)
		if err != nil {
			return false
		}
		m, err := st.GetLastMsgForSubject(context.Background(), "dlq.>")
		return err == nil && m.Header.Get(bus.HeaderDLQReason) == "malformed_event"
	}, 30*time.Second, 100*time.Millisecond)
	nc.Close()

	// arena up's terminal shows what a person follows, and its structured
	// logs are in its data folder, not on the terminal.
	term := up.stdout()
	require.Contains(t, term, id+"  received: example-team · qwen3-tiny · dev")
	require.Contains(t, term, id+"  contract   completed · reads W8A8KV8")
	require.Regexp(t, id+`  runner     efficiency job completed \(`, term)
	require.Contains(t, term, "submission "+id+"  ")
	require.Regexp(t, `round-\S+  \[#+\.*\] \d+/15 `, term, "the round's steps with their bar")
	require.Contains(t, term, "leaderboard of qwen3-tiny (lowb-score/v1")
	require.NotContains(t, term, "level=")
	require.NotContains(t, up.stderr.String(), "level=INFO")
	require.Regexp(t, `level=INFO msg="HTTP API listening" service=gateway`, up.log(t))

	// The operator's token is in no event, no record and no log line.
	for what, text := range map[string]string{"events": allEvents(t, up.natsURL), "arena up's log": up.log(t),
		"the record": arena(t, "show", refID, "--json", "--nats", up.natsURL).stdout} {
		require.NotEmpty(t, text, what)
		require.NotContains(t, text, token, what)
	}

	// One /metrics serves every service of the process: each stage
	// that ran counts its completed inputs, the bus its consumed
	// messages by consumer; the probes answer.
	metricsLine := regexp.MustCompile(`metrics: (http://\S+)` + app.PathMetrics).FindStringSubmatch(term)
	require.NotNil(t, metricsLine, "arena up prints its metrics address: %s", term)
	fams, err := apptest.Scrape(context.Background(), metricsLine[1]+app.PathMetrics)
	require.NoError(t, err)
	for _, st := range []string{"build", "contract", "quality", "efficiency"} {
		n, _ := fams.Sum("lowbarena_stage_outcomes_total", map[string]string{"stage": st, "outcome": "completed"})
		require.Positive(t, n, "stage %s completed inputs, by /metrics", st)
	}
	consumed, _ := fams.Sum(apptest.ConsumedTotal, map[string]string{"consumer": "score", "outcome": "ack"})
	require.Positive(t, consumed, "score's consumed messages, by /metrics: %v", fams.By(apptest.ConsumedTotal, "consumer"))
	for _, probe := range []string{app.PathHealthz, app.PathReadyz} {
		resp, err := http.Get(metricsLine[1] + probe)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, probe)
	}

	// Restart on the same folder: nothing is lost.
	wcancel()
	_ = watch.Wait()
	up.stop(t)
	up2 := startUp(t, data)
	rec2, _ := showJSON(t, up2.natsURL, id)
	require.Equal(t, rec.ID, rec2.ID)
	require.Equal(t, rec.CreatedAt, rec2.CreatedAt)
	r = arena(t, "submit", bundleDir("int4-w4a16-g32"), "--nats", up2.natsURL)
	require.Equal(t, 0, r.code, r.stderr)
	id2 := lastWord(r.stdout)
	require.NotEqual(t, id, id2)
	require.Eventually(t, func() bool {
		return arena(t, "show", id2, "--json", "--nats", up2.natsURL).code == 0
	}, 30*time.Second, 200*time.Millisecond)

	// A round survives a crash of the whole arena: killed with SIGKILL
	// while an entry's SLA job runs, started again on the same folder,
	// the round ends (resumed to its end, or failed with interrupted and
	// the steps it reached), the pod's lease expires instead of holding
	// the pod forever, and a new round on the same pod completes.
	rid := lastWord(arena(t, "round", "start", "--campaign", examples.TaskID, "--candidates", id, "--nats", up2.natsURL).stdout)
	require.True(t, strings.HasPrefix(rid, "round-"), rid)
	awaitStep(t, up2.natsURL, rid, events.PhaseRunningSLA, events.StepRunning)
	require.NoError(t, up2.cmd.Process.Signal(syscall.SIGKILL))
	<-up2.exited
	up3 := startUp(t, data, "--runner-ack-wait", "5s")
	var ended, last string
	if !assertEventually(func() bool {
		h := arena(t, "history", "--rounds", "--json", "--nats", up3.natsURL)
		last = h.stdout + h.stderr
		if h.code != 0 {
			return false
		}
		var rounds []ctl.Summary
		if json.Unmarshal([]byte(h.stdout), &rounds) != nil {
			return false
		}
		for _, r := range rounds {
			if r.RoundID == rid && r.Status != "running" {
				ended = r.Status + " " + r.Reason
				return true
			}
		}
		return false
	}, 3*time.Minute, time.Second) {
		t.Fatalf("the killed round %s did not end after a restart; rounds: %s\narena up's log, last lines:\n%s", rid, last, tailLines(up3.stderr.String(), 60))
	}
	require.Regexp(t, `^(complete |failed interrupted)`, ended)
	rr = arena(t, "round", "start", "--campaign", examples.TaskID, "--candidates", id, "--wait", "--nats", up3.natsURL)
	require.Equal(t, 0, rr.code, "a new round on the same pod: %s", rr.stderr)
	require.Contains(t, rr.stdout, "Releasing the pod · done")
	up3.stop(t)
}

// awaitStep waits until the round has published a step of phase with
// status (a bound on the wait, not a speed assertion).
func awaitStep(t *testing.T, natsURL, roundID string, phase events.Phase, status events.StepStatus) {
	t.Helper()
	nc := connectAs(t, natsURL, app.AuthFromEnv(), access.Operator)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		c, err := js.OrderedConsumer(context.Background(), events.StreamArena, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{"arena.round.step." + roundID}})
		if err != nil {
			return false
		}
		for {
			m, err := c.Next(jetstream.FetchMaxWait(500 * time.Millisecond))
			if err != nil {
				return false
			}
			var st events.RoundStepData
			if json.Unmarshal(m.Data(), &st) == nil && st.Phase == phase && st.Status == status && st.Role != "baseline" {
				return true
			}
		}
	}, 3*time.Minute, 500*time.Millisecond, "round %s reaches a %s step %s", roundID, phase, status)
}

// stageOf is the record's stage of that name.
func stageOf(t *testing.T, rec record.Submission, name string) record.Stage {
	t.Helper()
	for _, st := range rec.Stages {
		if st.Name == name {
			return st
		}
	}
	require.Failf(t, "no such stage", "the record has no stage %s", name)
	return record.Stage{}
}

// assertEventually polls cond every tick until it holds or wait has passed
// and says whether it held.
func assertEventually(cond func() bool, wait, tick time.Duration) bool {
	deadline := time.Now().Add(wait)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(tick)
	}
}

// tailLines is the last n lines of s.
func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// privateRepository serves the checkpoint files of an example bundle
// (not its submission.json) as a private model repository on loopback:
// every request without the token is answered 401. sawToken says whether
// a request carried it.
func privateRepository(t *testing.T, dir, token string) (*hubtest.Server, func() bool) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	files := map[string]string{}
	for _, e := range entries {
		if e.Name() != "submission.json" {
			files[e.Name()] = filepath.Join(dir, e.Name())
		}
	}
	srv := hubtest.New(files)
	t.Cleanup(srv.Close)
	var mu sync.Mutex
	saw := false
	srv.SetHook(func(w http.ResponseWriter, r *http.Request, path string) bool {
		if r.Header.Get("Authorization") != "Bearer "+token {
			w.WriteHeader(http.StatusUnauthorized)
			return true
		}
		mu.Lock()
		saw = true
		mu.Unlock()
		return false
	})
	return srv, func() bool { mu.Lock(); defer mu.Unlock(); return saw }
}

// watchUntil runs `arena watch --all` until a line matches pattern (or a
// minute passes) and returns that line.
func watchUntil(t *testing.T, natsURL, pattern string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, arenaBin, "watch", "--all", "--nats", natsURL)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { cancel(); _ = cmd.Wait() }()
	re := regexp.MustCompile(pattern)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if re.MatchString(sc.Text()) {
			return sc.Text()
		}
	}
	t.Fatalf("arena watch printed no line matching %s", pattern)
	return ""
}

// allEvents is the data of every event on the arena's stream, one per
// line.
func allEvents(t *testing.T, natsURL string) string {
	t.Helper()
	nc := connectAs(t, natsURL, app.AuthFromEnv(), access.Operator)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	c, err := js.OrderedConsumer(context.Background(), events.StreamArena, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.SubjectRootArena + ".>"}})
	require.NoError(t, err)
	var b strings.Builder
	for {
		m, err := c.Next(jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return b.String()
		}
		b.Write(m.Data())
		b.WriteByte('\n')
	}
}

// connectAs connects to the arena's NATS as user, with auth.
func connectAs(t *testing.T, natsURL string, auth app.NATSAuth, user string) *nats.Conn {
	t.Helper()
	nc, err := app.ConnectNATS(app.NATSClient{URLs: natsURL, Name: "e2e-" + user, User: user, Auth: auth}, nil)
	require.NoError(t, err)
	return nc
}

// docSQL returns every statement of the ```sql blocks of the operators'
// page on SQL, docs/operators/sql.md.
func docSQL(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "operators", "sql.md"))
	require.NoError(t, err)
	var out []string
	var cur strings.Builder
	in := false
	for _, line := range strings.Split(string(raw), "\n") {
		switch {
		case !in && strings.TrimSpace(line) == "```sql":
			in = true
		case in && strings.TrimSpace(line) == "```":
			in = false
			if strings.TrimSpace(cur.String()) != "" {
				out = append(out, cur.String())
			}
			cur.Reset()
		case in:
			cur.WriteString(line + "\n")
			if strings.HasSuffix(strings.TrimSpace(line), ";") {
				out = append(out, cur.String())
				cur.Reset()
			}
		}
	}
	require.GreaterOrEqual(t, len(out), 5, "docs/operators/sql.md shows SQL")
	return out
}
