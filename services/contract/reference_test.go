package contract_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
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
	"github.com/lowbarena/lowbarena/domain/safetensors"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/artifact/artifacttest"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/platform/stage"
	"github.com/lowbarena/lowbarena/services/contract"
)

// referenced serves an example bundle's checkpoint like a model hub and
// stores it as the build stage would a checkpoint by reference (see
// storeReference). It returns the server and the build.completed payload.
func referenced(t *testing.T, store artifact.Store, id, dir string) (*hubtest.Server, events.BuildCompletedData) {
	t.Helper()
	srv, err := hubtest.Dir(dir)
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	return srv, storeReference(t, store, id, dir, srv)
}

// storeReference stores, as the build stage would for the checkpoint in
// dir served by srv, its submission.json, a checkpoint.json naming srv,
// and its small files, but not its shards; the manifest lists them all.
func storeReference(t *testing.T, store artifact.Store, id, dir string, srv *hubtest.Server) events.BuildCompletedData {
	t.Helper()
	return storeReferenceAt(t, store, id, dir, srv, hubtest.Revision)
}

// storeReferenceAt is storeReference with checkpoint.json naming rev, as
// a build that resolved it to hubtest.Revision would carry it on.
func storeReferenceAt(t *testing.T, store artifact.Store, id, dir string, srv *hubtest.Server, rev string) events.BuildCompletedData {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	ref := bundle.Reference{Repository: srv.Repository(), Revision: rev}
	bundleDir := t.TempDir()
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		if e.Name() == bundle.DeclarationFile {
			require.NoError(t, os.WriteFile(filepath.Join(bundleDir, e.Name()), data, 0o644))
			continue
		}
		ref.Files = append(ref.Files, bundle.ReferencedFile{Path: e.Name(), Size: int64(len(data)), SHA256: digest(data)})
	}
	require.NoError(t, bundle.WriteReference(bundleDir, ref))
	ctx := context.Background()
	var files []events.FileDigest
	putData := func(name string, data []byte) {
		fd := events.FileDigest{Path: name, Size: int64(len(data)), SHA256: digest(data)}
		_, err := store.PutFile(ctx, fd.SHA256, fd.Size, bytes.NewReader(data))
		require.NoError(t, err)
		files = append(files, fd)
	}
	for _, name := range []string{bundle.DeclarationFile, bundle.CheckpointFile} {
		data, err := os.ReadFile(filepath.Join(bundleDir, name))
		require.NoError(t, err)
		putData(name, data)
	}
	for _, f := range ref.Files {
		if bundle.Remote(f.Path) {
			files = append(files, events.FileDigest{Path: f.Path, Size: f.Size, SHA256: f.SHA256})
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, f.Path))
		require.NoError(t, err)
		putData(f.Path, data)
	}
	m := artifact.NewManifest(files)
	out, err := store.PutManifest(ctx, m)
	require.NoError(t, err)
	return events.BuildCompletedData{SubmissionID: id, BundleDigest: m.Digest, Files: m.Files, Bytes: m.Bytes, Artifact: out,
		Reference: &events.CheckpointReference{Repository: srv.Repository(), Revision: rev, Files: len(ref.Files), Bytes: ref.Bytes(), Commit: hubtest.Revision}}
}

// TestContractReadsTheBuildsCommit: a checkpoint whose checkpoint.json
// names a branch is read at the commit build.completed carries (the one
// the build resolved), on the real hub's shape, although the branch has
// moved since to a commit whose shards are others.
func TestContractReadsTheBuildsCommit(t *testing.T) {
	t.Parallel()
	_, set, exs := writeExamples(t)
	ex := exs["fp8-w8a8"]
	uploaded := artifacttest.NewMemory()
	want, _, err := (&contract.Checker{Artifacts: uploaded, Campaigns: set}).Check(context.Background(), put(t, uploaded, "up", ex.Dir))
	require.NoError(t, err)

	entries, err := os.ReadDir(ex.Dir)
	require.NoError(t, err)
	files, changes := map[string]string{}, map[string]string{}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		files[e.Name()] = filepath.Join(ex.Dir, e.Name())
		if bundle.Remote(e.Name()) {
			data, err := os.ReadFile(files[e.Name()])
			require.NoError(t, err)
			data[len(data)-1] ^= 0xff
			p := filepath.Join(t.TempDir(), e.Name())
			require.NoError(t, os.WriteFile(p, data, 0o644))
			changes[e.Name()] = p
		}
	}
	require.NotEmpty(t, changes)
	srv := hubtest.NewHF(files)
	t.Cleanup(srv.Close)
	store := artifacttest.NewMemory()
	in := storeReferenceAt(t, store, "pinned", ex.Dir, srv, hubtest.Branch)
	srv.Push(changes) // the branch moves after the build

	c := &contract.Checker{Artifacts: store, Campaigns: set, Hub: hub.New(hub.Options{Hosts: []string{srv.Host()}})}
	got, _, err := c.Check(context.Background(), in)
	require.NoError(t, err)
	require.Equal(t, want, got, "the contract of the files the build read")
	var hubAsked int
	for _, r := range srv.Requests() {
		if !r.CDN {
			hubAsked++
			require.Equal(t, hubtest.Revision, r.Revision, "%s read at the build's commit", r.Path)
		}
	}
	require.Positive(t, hubAsked)
}

func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// TestContractByReference: the contract of a checkpoint by reference is
// the contract of the same checkpoint uploaded, read from the
// repository's shards with two Range requests each; the contract block
// records the bytes read, which are the bytes the repository sent.
func TestContractByReference(t *testing.T) {
	t.Parallel()
	_, set, exs := writeExamples(t)
	for _, name := range []string{"fp8-w8a8", "int4-w4a16-g32", "nvfp4-w4a4", "bf16-declared-w4"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ex := exs[name]
			uploaded := artifacttest.NewMemory()
			want, _, err := (&contract.Checker{Artifacts: uploaded, Campaigns: set}).Check(context.Background(), put(t, uploaded, "up", ex.Dir))
			require.NoError(t, err)

			store := artifacttest.NewMemory()
			srv, in := referenced(t, store, "ref", ex.Dir)
			c := &contract.Checker{Artifacts: store, Campaigns: set, Hub: hub.New(hub.Options{Hosts: []string{srv.Host()}})}
			got, read, err := c.Check(context.Background(), in)
			require.NoError(t, err)
			require.Equal(t, want, got, "the same contract, read from the repository")
			require.Positive(t, got.HeaderBytesRead)
			require.Equal(t, got.HeaderBytesRead, read)
			require.Equal(t, read, srv.BytesSent(), "the repository sent the headers and nothing more")
			local, err := safetensors.ReadCheckpoint(ex.Dir)
			require.NoError(t, err)
			for _, r := range srv.Requests() {
				require.True(t, bundle.Remote(r.Path), "only shards are read from the repository: %s", r.Path)
				require.Equal(t, http.StatusPartialContent, r.Status)
			}
			require.Len(t, srv.Requests(), 2*len(local.Files), "two Range requests per shard")

			out, err := c.Run(context.Background(), in)
			if !ex.Honest {
				r := stage.AsRefusal(err)
				require.NotNil(t, r, "%v", err)
				require.Equal(t, ex.Violations[0], string(r.Code))
				return
			}
			require.NoError(t, err)
			require.Equal(t, ex.Detected, out.DetectedPrecision)
			require.Equal(t, &in.Artifact, out.Artifact, "the runner stages the same bundle")
		})
	}
}

// TestContractFetchesHeadersAhead: the headers of a checkpoint by
// reference are fetched several at a time, still two requests per shard,
// so a distant repository costs a few round trips, not two per shard.
func TestContractFetchesHeadersAhead(t *testing.T) {
	t.Parallel()
	_, set, exs := writeExamples(t)
	store := artifacttest.NewMemory()
	srv, in := referenced(t, store, "ref", exs["fp8-w8a8"].Dir)
	var mu sync.Mutex
	inFlight, most := 0, 0
	srv.SetHook(func(w http.ResponseWriter, r *http.Request, path string) bool {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		mu.Unlock()
		time.Sleep(50 * time.Millisecond) // a distant repository
		mu.Lock()
		inFlight--
		mu.Unlock()
		return false
	})
	c := &contract.Checker{Artifacts: store, Campaigns: set, Hub: hub.New(hub.Options{Hosts: []string{srv.Host()}})}
	ct, read, err := c.Check(context.Background(), in)
	require.NoError(t, err)
	require.True(t, ct.OK)
	require.Equal(t, read, srv.BytesSent())
	require.Len(t, srv.Requests(), 4, "two requests for each of the two shards")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 2, most, "both shards' headers in flight at once")
}

// TestContractByReferenceRefusesBadRepositories: a repository that
// misbehaves is refused with its reason, on a loopback server that
// misbehaves on purpose.
func TestContractByReferenceRefusesBadRepositories(t *testing.T) {
	t.Parallel()
	_, set, exs := writeExamples(t)
	dir := exs["fp8-w8a8"].Dir
	const shard = "model-00002-of-00002.safetensors"
	original, err := os.ReadFile(filepath.Join(dir, shard))
	require.NoError(t, err)
	// A shard of the same size whose length prefix says 200 MiB.
	bigHeader := filepath.Join(t.TempDir(), shard)
	data := bytes.Clone(original)
	binary.LittleEndian.PutUint64(data, 200<<20)
	require.NoError(t, os.WriteFile(bigHeader, data, 0o644))
	changed := filepath.Join(t.TempDir(), shard)
	data = bytes.Clone(original)
	data[len(data)-1] ^= 1
	require.NoError(t, os.WriteFile(changed, data, 0o644))

	cases := []struct {
		name  string
		setup func(srv *hubtest.Server)
		hosts []string
		code  string
		check func(t *testing.T, srv *hubtest.Server, msg string)
	}{
		{name: "a 404 for one shard", code: string(reason.ReferenceNotFound),
			setup: func(srv *hubtest.Server) {
				srv.SetHook(func(w http.ResponseWriter, r *http.Request, path string) bool {
					if path == shard {
						http.NotFound(w, r)
						return true
					}
					return false
				})
			},
			check: func(t *testing.T, srv *hubtest.Server, msg string) { require.Contains(t, msg, shard+" is not in ") }},
		{name: "a Range request answered with the whole file", code: string(reason.ReferenceRangeIgnored),
			setup: func(srv *hubtest.Server) {
				srv.SetHook(func(w http.ResponseWriter, r *http.Request, path string) bool {
					r.Header.Del("Range")
					return false
				})
			}},
		{name: "a shard changed since it was declared", code: string(reason.ReferenceDigestMismatch),
			setup: func(srv *hubtest.Server) { srv.SetFile(shard, changed) }},
		{name: "a header length past the limit", code: string(reason.HeaderTooLarge),
			setup: func(srv *hubtest.Server) { srv.SetFile(shard, bigHeader); srv.WithoutDigests() },
			check: func(t *testing.T, srv *hubtest.Server, msg string) {
				var ranges []string
				for _, r := range srv.Requests() {
					if r.Path == shard {
						ranges = append(ranges, r.Range)
					}
				}
				require.Equal(t, []string{"bytes=0-7"}, ranges, "the length prefix, nothing after it")
			}},
		{name: "a server that stalls", code: string(reason.ReferenceTimeout),
			setup: func(srv *hubtest.Server) {
				srv.SetHook(func(w http.ResponseWriter, r *http.Request, path string) bool {
					if path != shard {
						return false
					}
					<-r.Context().Done()
					return true
				})
			}},
		{name: "a host the operator does not list", hosts: []string{"huggingface.co"}, code: string(reason.ReferenceHostNotAllowed),
			check: func(t *testing.T, srv *hubtest.Server, msg string) { require.Empty(t, srv.Requests()) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store := artifacttest.NewMemory()
			srv, in := referenced(t, store, "ref", dir)
			if tc.setup != nil {
				tc.setup(srv)
			}
			hosts := tc.hosts
			if hosts == nil {
				hosts = []string{srv.Host()}
			}
			c := &contract.Checker{Artifacts: store, Campaigns: set, Hub: hub.New(hub.Options{Hosts: hosts, Attempts: 1,
				HeaderTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond})}
			_, err := c.Run(context.Background(), in)
			r := stage.AsRefusal(err)
			require.NotNil(t, r, "a refusal, not a retry: %v", err)
			require.Equal(t, tc.code, string(r.Code), r.Message)
			if tc.check != nil {
				tc.check(t, srv, r.Message)
			}
		})
	}
}

// TestContractNeverShowsTheToken runs the contract service as its
// command runs (its Component, the token and hosts from the environment,
// a debug log) on a private repository: the token reaches the repository
// and appears in no event the stage published and no line it logged.
func TestContractNeverShowsTheToken(t *testing.T) {
	const token = "hf_contract_NeverShow_4242"
	campaigns, _, exs := writeExamples(t)
	srv, err := hubtest.Dir(exs["fp8-w8a8"].Dir)
	require.NoError(t, err)
	defer srv.Close()
	var mu sync.Mutex
	var sawToken bool
	srv.SetHook(func(w http.ResponseWriter, r *http.Request, path string) bool {
		if r.Header.Get("Authorization") != "Bearer "+token {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte("no: " + r.Header.Get("Authorization")))
			return true
		}
		mu.Lock()
		sawToken = true
		mu.Unlock()
		if path == "model-00002-of-00002.safetensors" {
			w.WriteHeader(http.StatusForbidden) // the token may not read this one
			return true
		}
		return false
	})
	t.Setenv(app.EnvRefHosts, srv.Host())
	t.Setenv(app.EnvRefTokens, srv.Host()+"="+token)

	nats := bustest.Server(t, "")
	c := contract.Component()
	cfg := app.DefaultConfig(c.Name)
	fs := c.FlagSet(&cfg)
	require.NoError(t, fs.Parse([]string{"--nats", nats.ClientURL(), "--campaigns", campaigns, "--log-level", "debug"}))
	cfg.Store = ""
	var logs lockedBuffer
	ctx, cancel := context.WithCancel(context.Background())
	rt, err := app.Start(ctx, cfg, app.WithLogOutput(&logs), app.WithoutTelemetry())
	require.NoError(t, err)
	actors, err := c.Build(ctx, rt)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- app.RunActors(ctx, rt.Log, actors...) }()
	defer func() { cancel(); <-done; rt.Close() }()

	// The bundle as the build stage stored it, in the service's own
	// artifact store.
	arts, err := artifact.NewJetStream(ctx, rt.Bus.JetStream(), bus.ObjectArtifacts)
	require.NoError(t, err)
	in := storeReference(t, arts, "private", exs["fp8-w8a8"].Dir, srv)
	_, err = bus.Emit(ctx, rt.Bus, events.Source("build"), events.Build.Completed, in.SubmissionID, in, bus.CausedBy(in.SubmissionID))
	require.NoError(t, err)
	e := bustest.Await(t, rt.Bus, "arena.contract.*.private", events.ContractCompleted, events.ContractFailed)
	var failed events.StageFailedData
	require.NoError(t, json.Unmarshal(e.Data(), &failed))
	require.Equal(t, string(reason.ReferenceUnauthorized), failed.Reason, failed.Message)
	require.Contains(t, failed.Message, "the token the arena's operator configured for "+srv.Host()+" may not read it")

	mu.Lock()
	require.True(t, sawToken, "the token reached its host")
	mu.Unlock()
	var published []string
	for _, m := range bustest.Stored(t, rt.Bus, "arena.>") {
		published = append(published, string(m.Data()))
	}
	require.NotEmpty(t, published)
	for _, s := range append(published, logs.String()) {
		require.NotContains(t, s, token)
	}
	require.Contains(t, logs.String(), "tokens_for="+srv.Host(), "the log says which hosts have a token, not the token")
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestContractWaitsOutARateLimit: a hub that rate-limits the contract
// stage for longer than the client waits in place makes the stage wait
// that long (a *stage.Wait), never a refusal.
func TestContractWaitsOutARateLimit(t *testing.T) {
	t.Parallel()
	_, set, exs := writeExamples(t)
	store := artifacttest.NewMemory()
	srv, in := referenced(t, store, "limited", exs["fp8-w8a8"].Dir)
	srv.SetHook(func(w http.ResponseWriter, r *http.Request, path string) bool {
		w.Header().Set("RateLimit", `"resolvers";r=0;t=120`)
		w.WriteHeader(http.StatusTooManyRequests)
		return true
	})
	c := &contract.Checker{Artifacts: store, Campaigns: set, Hub: hub.New(hub.Options{Hosts: []string{srv.Host()}})}
	_, err := c.Run(context.Background(), in)
	require.Nil(t, stage.AsRefusal(err), "not a refusal: %v", err)
	var w *stage.Wait
	require.ErrorAs(t, err, &w)
	require.Equal(t, 121*time.Second, w.After)
}
