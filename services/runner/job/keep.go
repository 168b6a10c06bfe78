package job

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/lowbarena/lowbarena/services/runner/engine"
	"github.com/lowbarena/lowbarena/services/runner/telemetry"
)

// Keeper keeps a healthy engine running after the run that started it,
// for a while (For), so that the next run on this GPU with the same
// settings is served by it instead of paying a start of its own: the
// quality job and the efficiency job of one submission (the candidate's
// checkpoint, engine, patch and KV dtype), a BF16 reference answered and
// then measured. On a real GPU a start is minutes of weights, compilation
// and CUDA graphs.
//
// One Keeper per GPU (per runner): the Runner copies made per job share
// it through Runner.Keep.
//
// Invariants:
//   - Only the runs that ask (Launch.Keep: a quality job's, an
//     efficiency job's candidate and reference runs) and are unconstrained
//     (no memory budget, hard cap or KV pool of their own, see keepable)
//     are kept: a budget replay's engine is sized for its one workload,
//     and an SLA job always starts its own (a round compares its entries
//     each on a fresh start: an engine warm from the same prompts would
//     serve them faster).
//   - A run is served by a kept engine only when it asks (Launch.Keep),
//     every setting of its start is equal (launchKey: the rendered command
//     but its port, the checkpoint's folder, the patched engine's folder
//     and its Python path), and the kept engine answers its health probe.
//   - A kept engine is stopped before any other engine starts on the GPU
//     (take, called first by every run, before the wait for the device's
//     idle baseline), when For has passed since it was kept, when it dies,
//     and by Close. So the GPU never holds two engines of this runner.
//
// What a run on a kept engine reports: its Start names the run that paid
// for the start (events.EngineStart.KeptFrom) and costs nothing; its
// start-up report, start-up peak, baseline and device are the start's.
type Keeper struct {
	// For is how long an engine is kept after its run ended; 0 keeps
	// none.
	For time.Duration

	mu     sync.Mutex
	kept   *kept
	timer  *time.Timer
	closed bool
}

// NewKeeper returns a Keeper that keeps an engine for d (0: never).
func NewKeeper(d time.Duration) *Keeper { return &Keeper{For: d} }

// kept is a running engine between runs.
type kept struct {
	key string
	// run is the run that started it.
	run      string
	e        *engine.Engine
	port     int
	src      *telemetry.Source
	tr       *http.Transport
	family   engine.Family
	model    string
	baseline uint64
	// started holds what the start measured (Startup, StartupPeakGiB,
	// BaselineGiB, DeviceTotalGiB, GPU, Simulated).
	started Served
	// release stops the engine and frees what it held: its simulated
	// telemetry, its sandbox's run folder.
	release func()
}

// base is the engine's URL.
func (k *kept) base() string { return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(k.port)) }

// healthy reports whether the kept engine is alive and answers its
// health probe.
func (k *kept) healthy(ctx context.Context) bool {
	select {
	case <-k.e.Exited():
		return false
	default:
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.base()+k.family.HealthPath, nil)
	if err != nil {
		return false
	}
	resp, err := (&http.Client{Transport: k.tr}).Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// take returns the kept engine if its settings are key's, alive and
// healthy (the caller's from then on: it keeps it again or releases it);
// any other kept engine is stopped before take returns. nil when there is
// none to use. A nil Keeper keeps nothing.
func (kp *Keeper) take(ctx context.Context, key string) *kept {
	if kp == nil {
		return nil
	}
	k := kp.detach(false)
	switch {
	case k == nil:
		return nil
	case k.key != key || !k.healthy(ctx):
		k.release()
		return nil
	}
	return k
}

// detach takes the kept engine (nil if none) out of kp and stops its
// timer; close also keeps none from then on. The engine is the caller's.
func (kp *Keeper) detach(close bool) *kept {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	if close {
		kp.closed = true
	}
	k := kp.kept
	kp.kept = nil
	if kp.timer != nil {
		kp.timer.Stop()
		kp.timer = nil
	}
	return k
}

// put keeps k for For (released at once when the Keeper keeps nothing or
// is closed).
func (kp *Keeper) put(k *kept) {
	if kp == nil {
		k.release()
		return
	}
	kp.mu.Lock()
	if kp.closed || kp.For <= 0 {
		kp.mu.Unlock()
		k.release()
		return
	}
	old := kp.kept
	kp.kept = k
	if kp.timer != nil {
		kp.timer.Stop()
	}
	kp.timer = time.AfterFunc(kp.For, func() { kp.expire(k) })
	kp.mu.Unlock()
	if old != nil {
		old.release()
	}
}

// expire stops k when it is still the kept engine.
func (kp *Keeper) expire(k *kept) {
	kp.mu.Lock()
	if kp.kept != k {
		kp.mu.Unlock()
		return
	}
	kp.kept, kp.timer = nil, nil
	kp.mu.Unlock()
	k.release()
}

// Kept names the run whose engine is kept, "" when none is.
func (kp *Keeper) Kept() string {
	if kp == nil {
		return ""
	}
	kp.mu.Lock()
	defer kp.mu.Unlock()
	if kp.kept == nil {
		return ""
	}
	return kp.kept.run
}

// Close stops the kept engine, if any, and keeps none after. Safe on a
// nil Keeper and more than once.
func (kp *Keeper) Close() {
	if kp == nil {
		return
	}
	if k := kp.detach(true); k != nil {
		k.release()
	}
}

// keepable reports whether l's engine may be kept for a later run: an
// unconstrained one (no budget, cap or KV pool of its own).
func keepable(l Launch) bool {
	return l.GPUMemoryGiB == 0 && l.CapGiB == 0 && l.KVCacheBytes == 0 && l.MemFractionStatic == 0
}

// launchKey is what makes two starts the same engine run: the command as
// rendered for them (p: every setting but the port, which each start
// draws), the patched engine's folder and Python path, and the hard cap
// the runner holds it to.
func launchKey(l Launch, p engine.Params) string {
	p.Port = 0
	return fmt.Sprintf("%q\x00%+v\x00%s\x00%s\x00%g", l.Command, p, l.EngineDir, l.PythonPath, l.CapGiB)
}

// releaser is how a started engine's resources are freed.
func releaser(e *engine.Engine, src, nvml *telemetry.Source, box *engine.Box) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			if e != nil {
				e.Stop()
			}
			if src != nil && src != nvml {
				src.Close()
			}
			if box != nil {
				os.RemoveAll(box.Writable[0])
			}
		})
	}
}
