package main

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
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/domain/bundle"
	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/domain/safetensors"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/services/build"
	"github.com/lowbarena/lowbarena/services/build/unpack"
	"github.com/lowbarena/lowbarena/services/contract"
)

// intakeBundles is how many distinct bundles one round of
// BenchmarkIntakeVsFloor takes through each side; intakeInFlight is how
// many submissions are uploading at once, as 8 participants would.
const (
	intakeBundles  = 48
	intakeInFlight = 8
)

// intakeExample is the example bundle each round's bundles are copies of.
const intakeExample = "fp8-w8a8"

// BenchmarkIntakeVsFloor is intake beside its floor, in one run on the
// same cores.
//
// The arena: intakeBundles distinct bundles (copies of the example's
// fp8-w8a8 submission, each with a few bytes of its weights' data
// changed, so no bundle is a duplicate of another and every file but the
// small shared ones is stored anew) are uploaded into the uploads object
// store and announced with submission.received as `arena submit` does,
// intakeInFlight at a time, through the build and contract services
// running as actors on an embedded nats-server with JetStream. The time
// runs from the first upload to the last contract.completed.
//
// The floor: the same bundles, in one process with no bus, one goroutine
// per core (GOMAXPROCS), each bundle: the digest of the archive, its
// unpacking with the digest of every file, a read of each safetensors
// header, and the artifact writes (each file content addressed and the
// manifest) into a local folder.
//
// It reports floor-bundles/s, arena-bundles/s and their ratio (the
// medians over the rounds, the two sides alternating which goes first).
func BenchmarkIntakeVsFloor(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	dir := b.TempDir()
	exs, err := examples.Write(dir)
	if err != nil {
		b.Fatal(err)
	}
	var src string
	for _, ex := range exs {
		if ex.Name == intakeExample {
			src = ex.Dir
		}
	}
	if src == "" {
		b.Fatalf("no example %s", intakeExample)
	}
	set, err := campaign.LoadDir(filepath.Join(dir, examples.CampaignsDir))
	if err != nil {
		b.Fatal(err)
	}
	bs, _ := bustest.Bus(b)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	bsvc, err := build.New(ctx, bs, log, build.Options{WorkDir: b.TempDir(), Limits: unpack.DefaultLimits(),
		MaxUploadBytes: unpack.DefaultMaxUploadBytes, Campaigns: set})
	if err != nil {
		b.Fatal(err)
	}
	csvc, err := contract.New(ctx, bs, log, contract.Options{Campaigns: set})
	if err != nil {
		b.Fatal(err)
	}
	actors := append(bsvc.Actors(), csvc.Actors()...)
	done := make(chan error, 1)
	go func() { done <- app.RunActors(ctx, log, actors...) }()
	b.Cleanup(func() { cancel(); <-done })

	outcomes := newIntakeOutcomes(b, bs.Conn())
	round := 0
	next := func(n int) []intakeBundle {
		round++
		return intakeCopies(b, src, round, n)
	}
	var uploadShares []float64
	arena := func(bundles []intakeBundle) float64 {
		rate, share := intakeArena(ctx, b, bs, outcomes, bundles)
		uploadShares = append(uploadShares, share)
		return rate
	}
	floor := func(bundles []intakeBundle) float64 {
		return intakeFloor(b, bundles)
	}
	// Warm up both sides (the server's streams, the page cache).
	arena(next(intakeInFlight))
	floor(next(intakeInFlight))

	var floorR, arenaR []float64
	var floorCPU, arenaCPU time.Duration
	timed := func(rates *[]float64, cpu *time.Duration, side func([]intakeBundle) float64, bundles []intakeBundle) {
		c0 := cpuTime(b)
		*rates = append(*rates, side(bundles))
		*cpu += cpuTime(b) - c0
	}
	for i := 0; b.Loop(); i++ {
		fb, ab := next(intakeBundles), next(intakeBundles)
		if i%2 == 0 {
			timed(&floorR, &floorCPU, floor, fb)
			timed(&arenaR, &arenaCPU, arena, ab)
		} else {
			timed(&arenaR, &arenaCPU, arena, ab)
			timed(&floorR, &floorCPU, floor, fb)
		}
	}
	f, a := median(floorR), median(arenaR)
	b.ReportMetric(f, "floor-bundles/s")
	b.ReportMetric(a, "arena-bundles/s")
	b.ReportMetric(a/f, "ratio")
	// The CPU time of the process (the embedded server's included) per
	// bundle: a side that is slower but spends no more CPU waits on
	// something (a round trip, a timer) rather than working.
	per := float64(len(floorR) * intakeBundles)
	b.ReportMetric(floorCPU.Seconds()*1000/per, "floor-cpu-ms/bundle")
	b.ReportMetric(arenaCPU.Seconds()*1000/per, "arena-cpu-ms/bundle")
	// The share of the arena's time its uploads took: near 1, the uploads
	// bound intake; well below, the stages do.
	b.ReportMetric(median(uploadShares[1:]), "arena-upload-share")
	b.ReportMetric(float64(intakeBundles), "bundles")
	b.ReportMetric(float64(runtime.GOMAXPROCS(0)), "cores")
}

// median is the middle value of xs (the mean of the two middle ones for
// an even count).
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// cpuTime is the CPU time this process has spent, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// intakeBundle is one packed bundle of the benchmark, as `arena submit`
// holds it before the upload.
type intakeBundle struct {
	id      string
	archive []byte
	sum     bundle.Summary
	decl    *bundle.Declaration
}

// intakeCopies packs n copies of the bundle in src, copy i of round r
// with the last 8 bytes of its largest safetensors file's data set to a
// number of its own: every copy has a digest of its own, and its headers
// are the example's.
func intakeCopies(b *testing.B, src string, r, n int) []intakeBundle {
	b.Helper()
	entries, err := os.ReadDir(src)
	if err != nil {
		b.Fatal(err)
	}
	target, largest := "", int64(-1)
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			b.Fatal(err)
		}
		if strings.HasSuffix(e.Name(), ".safetensors") && info.Size() > largest {
			target, largest = e.Name(), info.Size()
		}
	}
	declData, err := os.ReadFile(filepath.Join(src, bundle.DeclarationFile))
	if err != nil {
		b.Fatal(err)
	}
	decl, err := bundle.ParseDeclaration(declData)
	if err != nil {
		b.Fatal(err)
	}
	out := make([]intakeBundle, n)
	for i := range n {
		dir := filepath.Join(b.TempDir(), "bundle")
		if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
			b.Fatal(err)
		}
		f, err := os.OpenFile(filepath.Join(dir, target), os.O_WRONLY, 0)
		if err != nil {
			b.Fatal(err)
		}
		var mark [8]byte
		binary.LittleEndian.PutUint64(mark[:], uint64(r)<<32|uint64(i))
		if _, err := f.WriteAt(mark[:], largest-8); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
		var buf bytes.Buffer
		sum, err := bundle.Pack(dir, &buf)
		if err != nil {
			b.Fatal(err)
		}
		if err := os.RemoveAll(dir); err != nil {
			b.Fatal(err)
		}
		out[i] = intakeBundle{id: fmt.Sprintf("%08x%08x", r, i), archive: buf.Bytes(), sum: sum, decl: decl}
	}
	return out
}

// intakeOutcomes counts the contract stage's outcomes as they are
// published, and fails the benchmark on any refusal.
type intakeOutcomes struct {
	mu   sync.Mutex
	want map[string]bool
	left int
	done chan struct{}
	bad  string
}

func newIntakeOutcomes(b *testing.B, nc *nats.Conn) *intakeOutcomes {
	b.Helper()
	o := &intakeOutcomes{}
	for _, subject := range []string{"arena.contract.completed.*", "arena.contract.failed.*", "arena.build.failed.*"} {
		sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
			id := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
			o.mu.Lock()
			defer o.mu.Unlock()
			if !o.want[id] {
				return
			}
			delete(o.want, id)
			if !strings.HasPrefix(m.Subject, "arena.contract.completed.") && o.bad == "" {
				o.bad = m.Subject + ": " + string(m.Data)
			}
			if o.left--; o.left == 0 {
				close(o.done)
			}
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
	return o
}

// expect arms the count for the ids of bundles and returns the channel
// closed once each has an outcome.
func (o *intakeOutcomes) expect(bundles []intakeBundle) chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.want, o.left, o.done = map[string]bool{}, len(bundles), make(chan struct{})
	for _, bd := range bundles {
		o.want[bd.id] = true
	}
	return o.done
}

// intakeArena submits bundles as `arena submit` does, intakeInFlight at
// a time, and returns the bundles per second from the first upload to
// the last contract outcome, and the share of that time the uploads took.
func intakeArena(ctx context.Context, b *testing.B, bs *bus.Bus, o *intakeOutcomes, bundles []intakeBundle) (rate, uploadShare float64) {
	b.Helper()
	done := o.expect(bundles)
	var next atomic.Int64
	t0 := time.Now()
	var wg sync.WaitGroup
	for range intakeInFlight {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(bundles) {
					return
				}
				if err := intakeSubmit(ctx, bs, bundles[i]); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	uploaded := time.Since(t0)
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatal("the bundles were not all checked")
	}
	elapsed := time.Since(t0)
	o.mu.Lock()
	bad := o.bad
	o.mu.Unlock()
	if bad != "" {
		b.Fatal(bad)
	}
	return float64(len(bundles)) / elapsed.Seconds(), uploaded.Seconds() / elapsed.Seconds()
}

// intakeSubmit is `arena submit`'s upload and event (tools/arena
// submit.go) for one packed bundle.
func intakeSubmit(ctx context.Context, bs *bus.Bus, bd intakeBundle) error {
	obj := bd.id + ".tar.gz"
	meta := jetstream.ObjectMeta{Name: obj, Description: "bundle " + bd.id,
		Headers: map[string][]string{"Lowbarena-Sha256": {bd.sum.SHA256}}}
	if _, err := bus.PutObject(ctx, bs.JetStream(), bus.ObjectUploads, meta, bytes.NewReader(bd.archive), bus.PutRetry{}); err != nil {
		return err
	}
	d := bd.decl
	data := events.SubmissionReceivedData{SubmissionID: bd.id, Participant: d.Participant, Agent: d.Agent, TaskID: d.TaskID,
		Split: d.Split, Track: d.Track, Solution: d.Solution, SubmittedAt: time.Now().UTC(),
		Bundle: events.BundleRef{Store: "jetstream", Bucket: bus.ObjectUploads, Object: obj, Size: bd.sum.Size, SHA256: bd.sum.SHA256, Files: bd.sum.Files}}
	_, err := bus.Emit(ctx, bs, events.Source("cli"), events.Submission.Received, bd.id, data, bus.CausedBy(bd.id))
	return err
}

// intakeFloor does the arena's intake work in this process with no bus,
// GOMAXPROCS bundles at a time, and returns the bundles per second.
func intakeFloor(b *testing.B, bundles []intakeBundle) float64 {
	b.Helper()
	work, store := b.TempDir(), b.TempDir()
	if err := os.MkdirAll(filepath.Join(store, "files"), 0o755); err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	t0 := time.Now()
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(bundles) {
					return
				}
				if err := intakeFloorOne(bundles[i], work, store); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return float64(len(bundles)) / time.Since(t0).Seconds()
}

// intakeFloorOne is the floor's work for one bundle.
func intakeFloorOne(bd intakeBundle, work, store string) error {
	dir, err := os.MkdirTemp(work, bd.id)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	h := sha256.New()
	files, err := unpack.Unpack(io.TeeReader(bytes.NewReader(bd.archive), h), dir, unpack.DefaultLimits())
	if err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != bd.sum.SHA256 {
		return fmt.Errorf("archive digest %s, want %s", got, bd.sum.SHA256)
	}
	if _, err := safetensors.ReadCheckpoint(dir); err != nil {
		return err
	}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(f.Path)))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(store, "files", f.SHA256), data, 0o644); err != nil {
			return err
		}
	}
	m, err := json.Marshal(artifact.NewManifest(files))
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(store, bd.id+".json"), m, 0o644)
}
