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
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/adapters/hub"
	"github.com/lowbarena/lowbarena/adapters/hub/hubtest"
	"github.com/lowbarena/lowbarena/domain/bundle"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/services/runner"
	"github.com/lowbarena/lowbarena/services/runner/job"
)

const runnerToken = "hf_runner_NeverShow_777"

// remoteCheckpoint writes a one-tensor checkpoint of size bytes of U8
// data (its bytes differ with seed) served like a model hub, and stores
// it in the artifact store as the build stage stores a checkpoint by
// reference: checkpoint.json and config.json, the shard listed only.
func remoteCheckpoint(t *testing.T, ctx context.Context, b *bus.Bus, size int, seed byte) (*hubtest.Server, events.BundleRef, string) {
	t.Helper()
	dir := t.TempDir()
	cfg := []byte(`{"architectures":["Qwen3ForCausalLM"],"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":64,"hidden_size":256,"max_position_embeddings":32768}`)
	hdr := fmt.Sprintf(`{"w":{"dtype":"U8","shape":[%d],"data_offsets":[0,%d]}}`, size, size)
	for len(hdr)%8 != 0 {
		hdr += " "
	}
	st := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	st = append(append(st, hdr...), bytes.Repeat([]byte{seed}, size)...)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "model.safetensors"), st, 0o644))
	srv, err := hubtest.Dir(dir)
	require.NoError(t, err)
	t.Cleanup(srv.Close)

	arts, err := artifact.NewJetStream(ctx, b.JetStream(), bus.ObjectArtifacts)
	require.NoError(t, err)
	digest := func(d []byte) string { s := sha256.Sum256(d); return hex.EncodeToString(s[:]) }
	ref := bundle.Reference{Repository: srv.Repository(), Revision: hubtest.Revision, Files: []bundle.ReferencedFile{
		{Path: "config.json", Size: int64(len(cfg)), SHA256: digest(cfg)},
		{Path: "model.safetensors", Size: int64(len(st)), SHA256: digest(st)},
	}}
	refData, err := json.Marshal(ref)
	require.NoError(t, err)
	var files []events.FileDigest
	for name, data := range map[string][]byte{"config.json": cfg, bundle.CheckpointFile: refData} {
		f := events.FileDigest{Path: name, Size: int64(len(data)), SHA256: digest(data)}
		_, err := arts.PutFile(ctx, f.SHA256, f.Size, bytes.NewReader(data))
		require.NoError(t, err)
		files = append(files, f)
	}
	files = append(files, events.FileDigest{Path: "model.safetensors", Size: int64(len(st)), SHA256: digest(st)})
	out, err := arts.PutManifest(ctx, artifact.NewManifest(files))
	require.NoError(t, err)
	return srv, out, dir
}

func startStagingRunner(t *testing.T, ctx context.Context, b *bus.Bus, work string, hosts []string, cacheBytes int64, logs io.Writer, edit ...func(*runner.Options)) {
	t.Helper()
	o := runner.Options{Pod: "pod-s", WorkDir: work,
		AckWait: 3 * time.Second, CacheBytes: cacheBytes,
		Hub: hub.Options{Hosts: hosts, Tokens: map[string]string{hosts[0]: runnerToken}, Attempts: 1, IdleTimeout: time.Second},
		Job: job.Runner{SampleInterval: 20 * time.Millisecond, HealthTimeout: 20 * time.Second, IdleTimeout: 5 * time.Second, StopGrace: 2 * time.Second}}
	for _, e := range edit {
		e(&o)
	}
	s, err := runner.New(ctx, b, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), o)
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Actors()[0].Run(rctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func slaJob(t *testing.T, ctx context.Context, b *bus.Bus, id string, cand events.BundleRef) {
	t.Helper()
	p, err := json.Marshal(events.SLAJobParams{Engine: events.EngineSpec{MaxNumSeqs: 64}, KVCacheDType: "fp8", Entry: "candidate-1",
		Workload: events.WorkloadSpec{RequestsPerSlot: 1, MaxTokens: 8, PromptWords: 16, LongPromptWords: 64}})
	require.NoError(t, err)
	req := events.RunnerJobRequestedData{JobID: id, Kind: events.JobSLA, SubmissionID: "sub-" + id, Engine: command(""), Checkpoint: cand, Params: p}
	_, err = bus.Emit(ctx, b, events.Source("test"), events.Job.Requested, id, req, bus.WithID("job-"+id))
	require.NoError(t, err)
}

func outcome(t *testing.T, b *bus.Bus, id string) (events.RunnerJobFailedData, bool) {
	t.Helper()
	e := bustest.Await(t, b, outcomes(events.JobSLA, id), events.RunnerJobCompleted, events.RunnerJobFailed)
	var f events.RunnerJobFailedData
	require.NoError(t, json.Unmarshal(e.Data(), &f))
	return f, e.Type() == string(events.RunnerJobCompleted)
}

// stagingProgress is the job's staging progress events, in order.
func stagingProgress(t *testing.T, b *bus.Bus, id string) []events.RunnerJobProgressData {
	t.Helper()
	var out []events.RunnerJobProgressData
	for _, m := range bustest.Stored(t, b, "arena.runner.job.progress."+id) {
		var p events.RunnerJobProgressData
		require.NoError(t, json.Unmarshal(m.Data(), &p))
		if p.Phase == events.PhaseStaging {
			out = append(out, p)
		}
	}
	return out
}

// TestStagesACheckpointByReference: a job's checkpoint by reference is
// staged onto the pod once, its broken download resumed from the bytes on
// disk, its progress in bytes on runner.job.progress, and the engine
// serves it; the next job on the pod downloads nothing.
func TestStagesACheckpointByReference(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, cand, dir := remoteCheckpoint(t, ctx, b, 2<<20, 7)
	whole, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
	require.NoError(t, err)
	const cut = 700_000
	var once sync.Once
	srv.SetHook(func(w http.ResponseWriter, r *http.Request, path string) bool {
		broke := false
		once.Do(func() {
			w.Header().Set("Content-Length", fmt.Sprint(len(whole)))
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(whole[:cut])
			broke = true
		})
		return broke
	})
	var logs bytes.Buffer
	work := t.TempDir()
	startStagingRunner(t, ctx, b, work, []string{srv.Host()}, 1<<30, &logs)

	slaJob(t, ctx, b, "s1", cand)
	f, ok := outcome(t, b, "s1")
	require.True(t, ok, "%s: %s", f.Reason, f.Message)
	reqs := srv.Requests()
	require.Len(t, reqs, 2, "the shard only (config.json comes from the artifact store), once broken, once resumed")
	require.Equal(t, fmt.Sprintf("bytes=%d-", cut), reqs[1].Range)
	require.Equal(t, "Bearer "+runnerToken, reqs[1].Authorization)
	require.Equal(t, int64(len(whole)), srv.BytesSent(), "each byte sent once")
	prog := stagingProgress(t, b, "s1")
	require.NotEmpty(t, prog)
	last := prog[len(prog)-1]
	require.Equal(t, events.UnitBytes, last.Unit)
	require.Equal(t, len(whole), last.Done)
	require.Equal(t, len(whole), last.Total)
	sum, err := hubtest.Digest(filepath.Join(work, "cache", "blobs", sha(whole)))
	require.NoError(t, err)
	require.Equal(t, sha(whole), sum)

	srv.Reset()
	slaJob(t, ctx, b, "s2", cand)
	f, ok = outcome(t, b, "s2")
	require.True(t, ok, "%s: %s", f.Reason, f.Message)
	require.Empty(t, srv.Requests(), "the pod holds the checkpoint already")
	require.NotContains(t, logs.String(), runnerToken)
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// TestStagingFailures: a checkpoint by reference that cannot be staged
// fails its job with its reason before any engine starts, and the runner
// takes the next job; no failure shows the operator's token.
func TestStagingFailures(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cases := []struct {
		name  string
		setup func(t *testing.T, srv *hubtest.Server, dir string)
		cache int64
		hosts func(srv *hubtest.Server) []string
		code  string
	}{
		{name: "a shard changed since it was declared", code: string(reason.ReferenceDigestMismatch),
			setup: func(t *testing.T, srv *hubtest.Server, dir string) {
				p := filepath.Join(t.TempDir(), "model.safetensors")
				data, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
				require.NoError(t, err)
				data[len(data)-1] ^= 1
				require.NoError(t, os.WriteFile(p, data, 0o644))
				srv.SetFile("model.safetensors", p)
				srv.WithoutDigests()
			}},
		{name: "a 404 for the shard", code: string(reason.ReferenceNotFound),
			setup: func(t *testing.T, srv *hubtest.Server, dir string) {
				srv.SetHook(func(w http.ResponseWriter, r *http.Request, path string) bool { http.NotFound(w, r); return true })
			}},
		{name: "a private repository the token may not read", code: string(reason.ReferenceUnauthorized),
			setup: func(t *testing.T, srv *hubtest.Server, dir string) {
				srv.SetHook(func(w http.ResponseWriter, r *http.Request, path string) bool {
					w.WriteHeader(http.StatusForbidden)
					_, _ = w.Write([]byte(r.Header.Get("Authorization")))
					return true
				})
			}},
		{name: "a cache smaller than the checkpoint", cache: 1 << 20, code: string(reason.StagingCacheFull)},
		{name: "a host the operator does not list", hosts: func(*hubtest.Server) []string { return []string{"huggingface.co"} }, code: string(reason.ReferenceHostNotAllowed)},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, cand, dir := remoteCheckpoint(t, ctx, b, 2<<20, byte(i+10))
			if tc.setup != nil {
				tc.setup(t, srv, dir)
			}
			hosts := []string{srv.Host()}
			if tc.hosts != nil {
				hosts = tc.hosts(srv)
			}
			cache := tc.cache
			if cache == 0 {
				cache = 1 << 30
			}
			rctx, stop := context.WithCancel(ctx)
			defer stop()
			var logs bytes.Buffer
			startStagingRunner(t, rctx, b, t.TempDir(), hosts, cache, &logs)
			id := fmt.Sprintf("bad%d", i)
			slaJob(t, ctx, b, id, cand)
			f, ok := outcome(t, b, id)
			require.False(t, ok)
			require.Equal(t, tc.code, f.Reason, f.Message)
			require.Contains(t, f.Message, "the checkpoint by reference: ")
			require.Empty(t, f.LogTail, "no engine started")
			require.NotContains(t, f.Message, runnerToken)
			stop()
		})
	}
}

// TestStagingWaitsOutARateLimit: a repository that rate-limits the runner
// for longer than its client waits in place (a 2 s window, RateLimit:
// r=0;t=2, beside a 100 ms MaxWait) does not fail the job: the job is
// handed back for the wait the host asked, then staged and run.
func TestStagingWaitsOutARateLimit(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, cand, _ := remoteCheckpoint(t, ctx, b, 1<<20, 3)
	// A window that ends 2 s after the first request: every request
	// before then is refused (the staging's own quick retries too).
	var mu sync.Mutex
	var ends time.Time
	srv.SetHook(func(w http.ResponseWriter, r *http.Request, path string) bool {
		mu.Lock()
		if ends.IsZero() {
			ends = time.Now().Add(2 * time.Second)
		}
		left := time.Until(ends)
		mu.Unlock()
		if left <= 0 {
			return false
		}
		w.Header().Set("RateLimit", fmt.Sprintf(`"resolvers";r=0;t=%d`, int(left.Seconds()+0.999)))
		w.Header().Set("RateLimit-Policy", `"fixed window";"resolvers";q=3000;w=300`)
		w.WriteHeader(http.StatusTooManyRequests)
		return true
	})
	var logs bytes.Buffer
	startStagingRunner(t, ctx, b, t.TempDir(), []string{srv.Host()}, 1<<30, &logs, func(o *runner.Options) { o.Hub.MaxWait = 100 * time.Millisecond })
	slaJob(t, ctx, b, "rl1", cand)
	f, ok := outcome(t, b, "rl1")
	require.True(t, ok, "%s: %s", f.Reason, f.Message)
	reqs := srv.Requests()
	require.Len(t, reqs, 2, "limited once, waited out, then read")
	require.Equal(t, http.StatusTooManyRequests, reqs[0].Status)
	require.Equal(t, http.StatusOK, reqs[1].Status)
}
