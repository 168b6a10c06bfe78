package runner_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/domain/suite"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/platform/store"
	_ "github.com/lowbarena/lowbarena/platform/store/chdb"
	"github.com/lowbarena/lowbarena/services/runner"
	"github.com/lowbarena/lowbarena/services/runner/engine"
	"github.com/lowbarena/lowbarena/services/runner/job"
)

// simengine and runnerBin are built once for the package.
var simengine, runnerBin string

func TestMain(m *testing.M) {
	// The runners of these tests sandbox patched engines and their
	// builds with the test binary as their helper, as cmd/runner does.
	engine.RunHelper()
	dir, err := os.MkdirTemp("", "runner-bins-")
	if err != nil {
		panic(err)
	}
	simengine, runnerBin = filepath.Join(dir, "simengine"), filepath.Join(dir, "runner")
	for bin, pkg := range map[string]string{simengine: "../../tools/simengine", runnerBin: "./cmd/runner"} {
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			panic(fmt.Sprintf("build %s: %v\n%s", pkg, err, out))
		}
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func command(extra string) string {
	return simengine + " --checkpoint {{.Checkpoint}} --port {{.Port}} --kv-cache-dtype {{.KVCacheDType}} --max-num-seqs {{.MaxNumSeqs}} --gpu-memory-gib {{.GPUMemoryGiB}} --scale 8192 --kv-scale 64 --startup-seconds 0.2 " + extra
}

// putCheckpoint stores a one-tensor checkpoint in the artifact store.
func putCheckpoint(t *testing.T, ctx context.Context, b *bus.Bus, dtype string, size int) events.BundleRef {
	t.Helper()
	cfg := []byte(`{"architectures":["Qwen3ForCausalLM"],"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":64,"hidden_size":256,"max_position_embeddings":32768}`)
	elem := map[string]int{"BF16": 2, "U8": 1}[dtype]
	hdr := fmt.Sprintf(`{"w":{"dtype":%q,"shape":[%d],"data_offsets":[0,%d]}}`, dtype, size/elem, size)
	for len(hdr)%8 != 0 {
		hdr += " "
	}
	st := make([]byte, 8, 8+len(hdr)+size)
	binary.LittleEndian.PutUint64(st, uint64(len(hdr)))
	st = append(append(st, hdr...), make([]byte, size)...)
	arts, err := artifact.NewJetStream(ctx, b.JetStream(), bus.ObjectArtifacts)
	require.NoError(t, err)
	var files []events.FileDigest
	for name, data := range map[string][]byte{"config.json": cfg, "model.safetensors": st} {
		sum := sha256.Sum256(data)
		f := events.FileDigest{Path: name, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
		_, err := arts.PutFile(ctx, f.SHA256, f.Size, bytes.NewReader(data))
		require.NoError(t, err)
		files = append(files, f)
	}
	ref, err := arts.PutManifest(ctx, artifact.NewManifest(files))
	require.NoError(t, err)
	return ref
}

// chdbStore opens a chDB store in a temporary folder, closed after the
// test.
func chdbStore(t *testing.T, ctx context.Context) store.Store {
	t.Helper()
	st, err := store.Open(ctx, "chdb://"+t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// putSuite stores suite s in the artifact store, as the quality stage
// does, and returns its reference.
func putSuite(t *testing.T, ctx context.Context, b *bus.Bus, s *suite.Suite) events.BundleRef {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, suite.Write(dir, s))
	arts, err := artifact.NewJetStream(ctx, b.JetStream(), bus.ObjectArtifacts)
	require.NoError(t, err)
	ref, err := artifact.PutDir(ctx, arts, dir)
	require.NoError(t, err)
	return ref
}

func request(t *testing.T, ctx context.Context, b *bus.Bus, id string, cand, ref events.BundleRef, cmd string, wl events.WorkloadSpec) {
	t.Helper()
	p, err := json.Marshal(events.EfficiencyJobParams{Campaign: "tiny", Engine: events.EngineSpec{MaxNumSeqs: 256}, Workload: wl,
		KVCacheDType: "fp8", Reference: ref, BudgetFactor: 1.02})
	require.NoError(t, err)
	req := events.RunnerJobRequestedData{JobID: id, Kind: events.JobEfficiency, SubmissionID: "sub-" + id, Engine: cmd, Checkpoint: cand, Params: p}
	_, err = bus.Emit(ctx, b, events.Source("test"), events.Job.Requested, id, req, bus.WithID("job-"+id))
	require.NoError(t, err)
}

func small() events.WorkloadSpec {
	return events.WorkloadSpec{RequestsPerSlot: 1, MaxTokens: 16, PromptWords: 32, LongPromptWords: 256}
}

func startRunner(t *testing.T, ctx context.Context, b *bus.Bus, st store.Store, pod string) {
	t.Helper()
	s, err := runner.New(ctx, b, slog.New(slog.NewTextHandler(io.Discard, nil)), runner.Options{Pod: pod, WorkDir: t.TempDir(), AckWait: 3 * time.Second, Store: st, RefusalDelay: 50 * time.Millisecond,
		Job: job.Runner{SampleInterval: 20 * time.Millisecond, HealthTimeout: 20 * time.Second, IdleTimeout: 5 * time.Second, StopGrace: 2 * time.Second}})
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Actors()[0].Run(rctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// outcomes is the subject filter of a job's completed and failed events,
// which carry its kind: arena.runner.job.{completed,failed}.<kind>.<job>.
func outcomes(kind, id string) string { return "arena.runner.job.*." + kind + "." + id }

func completed(t *testing.T, b *bus.Bus, id string) (events.RunnerJobCompletedData, events.EfficiencyJobResult) {
	t.Helper()
	e := bustest.Await(t, b, outcomes(events.JobEfficiency, id), events.RunnerJobCompleted, events.RunnerJobFailed)
	require.Equal(t, string(events.RunnerJobCompleted), e.Type(), "%s", e.Data())
	d, err := events.Job.Completed.Decode(e)
	require.NoError(t, err)
	var r events.EfficiencyJobResult
	require.NoError(t, json.Unmarshal(d.Result, &r))
	return d, r
}

func TestRunnerRunsJobsAndCachesTheReference(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st, err := store.Open(ctx, "chdb://"+t.TempDir())
	require.NoError(t, err)
	defer st.Close()
	ref := putCheckpoint(t, ctx, b, "BF16", 4<<20)
	cand := putCheckpoint(t, ctx, b, "U8", 1<<20)
	startRunner(t, ctx, b, st, "pod-a")

	request(t, ctx, b, "j1", cand, ref, command(""), small())
	d, r := completed(t, b, "j1")
	// The outcome's subject carries the job's kind, so efficiency
	// consumes only its own jobs' outcomes.
	stored := bustest.Stored(t, b, "arena.runner.job.completed.efficiency.j1")
	require.Len(t, stored, 1)
	require.Equal(t, string(events.RunnerJobCompleted), stored[0].Type())
	require.Equal(t, "pod-a", d.Pod)
	require.Greater(t, d.GPUHours, 0.0)
	require.True(t, r.Simulated)
	require.False(t, r.Cached)
	require.Greater(t, r.Candidate.Workloads["serve"].Rate, r.Reference.Workloads["serve"].Rate)
	require.Len(t, r.Budget, 3)

	// Rows: 10 Hz (here 50 Hz) samples of the simulated device, and one
	// row per measured request: each workload (one request per slot, so
	// as many as its concurrency) is run by the candidate, the reference
	// and each budget replay (a second one when the first held but lost
	// rate on a loaded machine): 9 workload runs of 32+4+64 requests on a
	// quiet one.
	type n struct {
		N uint64 `ch:"n"`
	}
	var rows []n
	require.NoError(t, st.Select(ctx, &rows, "SELECT count() AS n FROM gpu_samples WHERE job_id = ? AND simulated = 1", "j1"))
	require.Greater(t, rows[0].N, uint64(10))
	type perWorkload struct {
		Workload  string `ch:"workload"`
		Candidate uint64 `ch:"candidate"`
		N         uint64 `ch:"n"`
	}
	var per []perWorkload
	require.NoError(t, st.Select(ctx, &per, "SELECT workload, countIf(endsWith(run_id, '/candidate')) AS candidate, count() AS n FROM requests WHERE job_id = ? AND output_tokens = 16 GROUP BY workload ORDER BY workload", "j1"))
	require.Len(t, per, len(r.Budget))
	var total, candidate uint64
	for _, w := range per {
		// A replay's key (and run id) is the workload at its factor.
		var v record.Budget
		for key, b := range r.Budget {
			if strings.HasPrefix(key, w.Workload+"@") {
				v = b
			}
		}
		require.GreaterOrEqual(t, v.Attempts, 1, w.Workload)
		require.Equal(t, w.Candidate*uint64(2+v.Attempts), w.N, w.Workload)
		total, candidate = total+w.N, candidate+w.Candidate
	}
	require.Equal(t, uint64(32+4+64), candidate)
	require.GreaterOrEqual(t, total, uint64(3*(32+4+64)))

	// The second job on the pod reuses the reference.
	request(t, ctx, b, "j2", cand, ref, command(""), small())
	_, r2 := completed(t, b, "j2")
	require.True(t, r2.Cached)
	require.Equal(t, r.Reference.Workloads["serve"].Rate, r2.Reference.Workloads["serve"].Rate)

	// A job whose engine dies fails with its classified reason; the
	// runner takes the next job.
	request(t, ctx, b, "j3", cand, ref, command("--fault crash-on-start"), small())
	e := bustest.Await(t, b, outcomes(events.JobEfficiency, "j3"), events.RunnerJobCompleted, events.RunnerJobFailed)
	var f events.RunnerJobFailedData
	require.NoError(t, json.Unmarshal(e.Data(), &f))
	require.Equal(t, string(reason.EngineCrashed), f.Reason)
	require.Contains(t, f.Message, "container log tail")
	require.Contains(t, f.LogTail, "crash-on-start")

	// Each job's GPU time, by phase, in gpu_seconds (written before its
	// outcome): j1 paid for the reference's start, j2 reused it, j3's
	// engine failed its one start and held the GPU for it.
	type gpuRow struct {
		JobID        string  `ch:"job_id"`
		Status       string  `ch:"status"`
		Held         float64 `ch:"held_s"`
		Serving      float64 `ch:"serving_s"`
		Start        float64 `ch:"engine_start_s"`
		Starts       uint32  `ch:"starts"`
		CachedStarts uint32  `ch:"cached_starts"`
	}
	var gpu []gpuRow
	require.NoError(t, st.Select(ctx, &gpu, "SELECT job_id, status, held_s, serving_s, engine_start_s, starts, cached_starts FROM gpu_seconds FINAL WHERE job_id IN ('j1', 'j2', 'j3') ORDER BY job_id"))
	require.Len(t, gpu, 3)
	for i, res := range []events.EfficiencyJobResult{r, r2} {
		p := res.Phases()
		require.Equal(t, gpuRow{JobID: []string{"j1", "j2"}[i], Status: "completed", Held: p.Held, Serving: p.Serving, Start: p.EngineStart,
			Starts: uint32(p.Starts), CachedStarts: uint32(i)}, gpu[i])
		runs := 2 - i // the reference (j1 only) and the candidate
		for _, v := range res.Budget {
			runs += 1 + 2*(v.Attempts-1) // each replay, and each further pair's two runs
		}
		require.Equal(t, runs, p.Starts, "one start per engine run")
	}
	require.Equal(t, "failed", gpu[2].Status)
	require.Equal(t, uint32(1), gpu[2].Starts, "j3's candidate start, failed")
	require.Equal(t, uint32(1), gpu[2].CachedStarts)
	require.Positive(t, gpu[2].Held)

	// A real engine on this runner, which has no NVML: refused, handed
	// back, and failed with the refusal's reason once the tries are
	// spent, never measured on a simulated device.
	request(t, ctx, b, "j5", cand, ref, "vllm serve {{.Checkpoint}} --port {{.Port}}", small())
	e = bustest.Await(t, b, outcomes(events.JobEfficiency, "j5"), events.RunnerJobCompleted, events.RunnerJobFailed)
	require.NoError(t, json.Unmarshal(e.Data(), &f))
	require.Equal(t, string(reason.NoGPUTelemetry), f.Reason, f.Message)
	require.Contains(t, f.Message, "not measured on a simulated device")
	require.Len(t, bustest.Stored(t, b, "arena.runner.job.started.j5"), 3, "three deliveries, each refused")

	request(t, ctx, b, "j4", events.BundleRef{Store: "jetstream", Bucket: bus.ObjectArtifacts, Object: "bundles/x.json", SHA256: strings.Repeat("0", 64)}, ref, command(""), small())
	e = bustest.Await(t, b, outcomes(events.JobEfficiency, "j4"), events.RunnerJobCompleted, events.RunnerJobFailed)
	require.NoError(t, json.Unmarshal(e.Data(), &f))
	require.Equal(t, string(reason.ArtifactMissing), f.Reason)
}

// TestKilledRunnerLeavesNoEngineAndTheJobMovesOn kills a runner process
// mid-job: its engine dies with it, and the job is redelivered to another
// runner, which completes it.
func TestKilledRunnerLeavesNoEngineAndTheJobMovesOn(t *testing.T) {
	b, srv := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ref := putCheckpoint(t, ctx, b, "BF16", 4<<20)
	cand := putCheckpoint(t, ctx, b, "U8", 1<<20)

	work := t.TempDir()
	proc := exec.Command(runnerBin, "--nats", srv.ClientURL(), "--pod", "pod-k", "--work", work, "--ack-wait", "3s", "--health-timeout", "20s")
	var logs bytes.Buffer
	proc.Stdout, proc.Stderr = &logs, &logs
	require.NoError(t, proc.Start())
	defer func() { _ = proc.Process.Kill(); _ = proc.Wait() }()

	// A job long enough to be killed in: slow steps.
	request(t, ctx, b, "k1", cand, ref, command("--step-overhead-ms 5"), events.WorkloadSpec{RequestsPerSlot: 1, MaxTokens: 32, PromptWords: 32, LongPromptWords: 64})
	bustest.Await(t, b, "arena.runner.job.progress.k1", events.RunnerJobProgress)
	var enginePID int
	require.Eventually(t, func() bool {
		enginePID = childOf(proc.Process.Pid)
		return enginePID > 0
	}, 20*time.Second, 50*time.Millisecond, "the runner starts an engine")

	require.NoError(t, proc.Process.Signal(syscall.SIGKILL))
	_, _ = proc.Process.Wait()
	require.Eventually(t, func() bool { return !alive(enginePID) }, 10*time.Second, 50*time.Millisecond,
		"the engine %d dies with its runner", enginePID)

	// Another runner gets the job once its ack deadline passes.
	startRunner(t, ctx, b, nil, "pod-k")
	d, r := completed(t, b, "k1")
	require.Greater(t, r.Candidate.Workloads["serve"].Rate, 0.0)
	require.Equal(t, "pod-k", d.Pod)
	started := 0
	for _, e := range bustest.Stored(t, b, "arena.runner.job.started.k1") {
		var s events.RunnerJobStartedData
		require.NoError(t, json.Unmarshal(e.Data(), &s))
		started++
	}
	require.Equal(t, 2, started, "the job started twice: once on the killed runner, once on the next")

	// The work-queue holds nothing once the job is acked.
	info, err := b.JetStream().Stream(ctx, events.StreamRunnerJobs)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		si, err := info.Info(ctx)
		return err == nil && si.State.Msgs == 0
	}, 10*time.Second, 100*time.Millisecond)
	_ = jetstream.ErrKeyNotFound
}

// childOf returns a child process of pid, or 0.
func childOf(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err == nil {
		for f := range strings.FieldsSeq(string(data)) {
			var c int
			if _, err := fmt.Sscan(f, &c); err == nil {
				return c
			}
		}
	}
	// Children of other threads of the process.
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, tk := range tasks {
		data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, tk.Name()))
		for f := range strings.FieldsSeq(string(data)) {
			var c int
			if _, err := fmt.Sscan(f, &c); err == nil {
				return c
			}
		}
	}
	return 0
}

// alive reports whether pid runs (a zombie counts as gone).
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
