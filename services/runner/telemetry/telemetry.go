// Package telemetry samples the runner's GPU through NVML while an engine
// starts and serves, and hands the samples, in batches, to a sink (the
// gpu_samples table).
//
// The engine's memory is the device's count: NVML's v2 used memory over
// the baseline read before the engine started. One runner owns one GPU
// and runs one engine at a time, so that difference is the engine's; the
// driver's per-process list cannot say it in a container, where it
// reports host PIDs the runner cannot see (NVIDIA/nvidia-docker#1483).
//
// NVML rule: nvml.Init returns an error when the driver library is
// missing, but any other call without a loaded library crashes the
// process. So every call goes through a Source that exists only after a
// successful Init. Without a GPU the runner watches simengine through
// Simulated: an nvml.Interface (go-nvml's mock type) whose one device is
// the simulated engine's simulated GPU; every sample of it is marked
// simulated.
package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// ErrNoNVML is returned by Open when NVML cannot be initialised (no driver,
// no GPU).
var ErrNoNVML = errors.New("telemetry: NVML is not available")

// Source is an initialised NVML, bound to one device: a runner drives
// one GPU, and on a machine of several (one runner per GPU) it must
// neither read nor cap on its neighbours' memory.
type Source struct {
	lib       nvml.Interface
	simulated bool
	index     int
	gpu       string
	uuid      string
	// minor is the device node's number (Minor).
	minor int

	idleMu  sync.Mutex
	idle    uint64
	idleSet bool
}

// Open initialises the machine's NVML and binds it to the device of the
// given index (NVML's order, as nvidia-smi lists them). Only after Init
// succeeded is any other NVML call made. An index the machine does not
// have is an error (ErrNoDevice).
func Open(index int) (*Source, error) {
	return open(nvml.New(), false, index)
}

// ErrNoDevice is returned by Open for a device index the machine does
// not have.
var ErrNoDevice = errors.New("telemetry: no such GPU")

// FromNVML initialises lib (any nvml.Interface: the machine's, or
// go-nvml's mock in tests) and returns its Source, bound to device index.
func FromNVML(lib nvml.Interface, simulated bool, index int) (*Source, error) {
	return open(lib, simulated, index)
}

func open(lib nvml.Interface, simulated bool, index int) (*Source, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: %s", ErrNoNVML, nvml.ErrorString(ret))
	}
	if index < 0 {
		_ = lib.Shutdown()
		return nil, fmt.Errorf("%w: index %d", ErrNoDevice, index)
	}
	if n, ret := lib.DeviceGetCount(); ret == nvml.SUCCESS && index >= n {
		_ = lib.Shutdown()
		return nil, fmt.Errorf("%w: index %d, the machine has %d (0 to %d)", ErrNoDevice, index, n, n-1)
	}
	s := &Source{lib: lib, simulated: simulated, index: index, minor: -1}
	if d, ret := lib.DeviceGetHandleByIndex(index); ret == nvml.SUCCESS {
		if name, ret := d.GetName(); ret == nvml.SUCCESS {
			s.gpu = name
		}
		if uuid, ret := d.GetUUID(); ret == nvml.SUCCESS {
			s.uuid = uuid
		}
		s.minor = minorNumber(d)
	}
	return s, nil
}

// minorNumber is d's minor number (/dev/nvidiaN), or -1 when NVML does
// not say (a mock without it panics: that is -1 too).
func minorNumber(d nvml.Device) (minor int) {
	defer func() {
		if recover() != nil {
			minor = -1
		}
	}()
	if m, ret := d.GetMinorNumber(); ret == nvml.SUCCESS {
		return m
	}
	return -1
}

// Minor is the device's minor number, N of its node /dev/nvidiaN (the
// engine sandbox binds that node alone: engine.GPUDevices); -1 when
// unknown or simulated.
func (s *Source) Minor() int {
	if s.simulated {
		return -1
	}
	return s.minor
}

// Close shuts NVML down.
func (s *Source) Close() { _ = s.lib.Shutdown() }

// Simulated reports whether the devices are simulated.
func (s *Source) Simulated() bool { return s.simulated }

// Index is the device the source reads (NVML's index).
func (s *Source) Index() int { return s.index }

// UUID is the device's NVML UUID ("GPU-..."; empty when NVML does not
// say). CUDA_VISIBLE_DEVICES accepts it, and unlike an index it names
// the same device in NVML's order (PCI bus) and CUDA's (fastest first).
func (s *Source) UUID() string { return s.uuid }

// GPU names the source's device ("NVIDIA H200 (simulated)" for a
// simulation, named by its engine once it answers).
func (s *Source) GPU() string {
	if s.simulated {
		if d, ret := s.lib.DeviceGetHandleByIndex(s.index); ret == nvml.SUCCESS {
			if name, ret := d.GetName(); ret == nvml.SUCCESS {
				return name
			}
		}
	}
	return s.gpu
}

// TotalBytes is the device's memory (0 when NVML does not say).
func (s *Source) TotalBytes() uint64 {
	mem, err := s.Memory()
	if err != nil {
		return 0
	}
	return mem.Total
}

// Memory is the device's memory as NVML's v2 query counts it: Used
// leaves out what the driver and firmware reserve (Reserved), which v1's
// used counts in. When the driver answers only v1, Used is v1's and
// Reserved 0.
type Memory struct {
	Used, Reserved, Total uint64
}

// Memory reads the device's memory (v2, else v1).
func (s *Source) Memory() (Memory, error) {
	d, ret := s.lib.DeviceGetHandleByIndex(s.index)
	if ret != nvml.SUCCESS {
		return Memory{}, fmt.Errorf("telemetry: device %d: %s", s.index, nvml.ErrorString(ret))
	}
	if m, ret := d.GetMemoryInfo_v2(); ret == nvml.SUCCESS {
		return Memory{Used: m.Used, Reserved: m.Reserved, Total: m.Total}, nil
	}
	m, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return Memory{}, fmt.Errorf("telemetry: device %d memory: %s", s.index, nvml.ErrorString(ret))
	}
	return Memory{Used: m.Used, Total: m.Total}, nil
}

// ComputeCapability is the device's CUDA compute capability (9.0 for
// Hopper, 10.0 for Blackwell); ok is false when NVML does not say.
func (s *Source) ComputeCapability() (major, minor int, ok bool) {
	d, ret := s.lib.DeviceGetHandleByIndex(s.index)
	if ret != nvml.SUCCESS {
		return 0, 0, false
	}
	major, minor, ret = d.GetCudaComputeCapability()
	return major, minor, ret == nvml.SUCCESS && major > 0
}

// Sample is one reading of one device.
type Sample struct {
	At   time.Time
	GPU  int
	UUID string
	// MemUsed is the device's used memory (NVML v2: without the
	// driver's reservation); MemTotal its size.
	MemUsed  uint64
	MemTotal uint64
	// EngineMem is the engine's memory by the device's count: MemUsed
	// over the baseline read before the engine started. One runner owns
	// its GPU and runs one engine at a time, so everything above the
	// idle device is the engine's. (The driver lists processes by the
	// host's PIDs, which a runner in a container cannot match with its
	// engine's, so a per-process figure is never available there.)
	EngineMem uint64
	// Util and PowerW are read once a second (NVML averages them over
	// about a second anyway) and carried in the samples between.
	Util      float64
	PowerW    float64
	Simulated bool
}

// Read reads the source's device once: memory always, utilisation and
// power when activity is set. baseline is the device's used memory
// before the engine started (EngineMem is what is above it).
func (s *Source) Read(baseline uint64, activity bool) (Sample, error) {
	mem, err := s.Memory()
	if err != nil {
		return Sample{}, err
	}
	smp := Sample{At: time.Now(), GPU: s.index, UUID: s.uuid, MemUsed: mem.Used, MemTotal: mem.Total, Simulated: s.simulated}
	if mem.Used > baseline {
		smp.EngineMem = mem.Used - baseline
	}
	if !activity {
		return smp, nil
	}
	d, ret := s.lib.DeviceGetHandleByIndex(s.index)
	if ret != nvml.SUCCESS {
		return smp, nil
	}
	if u, ret := d.GetUtilizationRates(); ret == nvml.SUCCESS {
		smp.Util = float64(u.Gpu) / 100
	}
	if p, ret := d.GetPowerUsage(); ret == nvml.SUCCESS {
		smp.PowerW = float64(p) / 1000
	}
	return smp, nil
}

// ErrNotAtBaseline is returned by WaitIdle when the device stays above
// its idle baseline for the whole wait.
var ErrNotAtBaseline = errors.New("telemetry: the device did not return to its idle baseline")

// WaitIdle waits until the device's used memory is back at its idle
// baseline (within slack), polling every poll, for at most wait, and
// returns the used memory it saw last: the baseline of the next engine.
// The idle baseline is the used memory of the source's first WaitIdle
// (a runner calls it before its first engine), lowered whenever the
// device reads lower. A device still above it when the wait ends (an
// engine's process outliving its stop, another tenant) is
// ErrNotAtBaseline.
func (s *Source) WaitIdle(ctx context.Context, wait, poll time.Duration, slackBytes uint64) (uint64, error) {
	deadline := time.Now().Add(wait)
	for {
		mem, err := s.Memory()
		if err != nil {
			return 0, err
		}
		s.idleMu.Lock()
		if !s.idleSet || mem.Used < s.idle {
			s.idle, s.idleSet = mem.Used, true
		}
		idle := s.idle
		s.idleMu.Unlock()
		if mem.Used <= idle+slackBytes {
			return mem.Used, nil
		}
		if !time.Now().Before(deadline) {
			return mem.Used, fmt.Errorf("%w: %.2f GiB used, %.2f GiB when idle, after %s", ErrNotAtBaseline,
				float64(mem.Used)/(1<<30), float64(idle)/(1<<30), wait)
		}
		select {
		case <-ctx.Done():
			return mem.Used, ctx.Err()
		case <-time.After(poll):
		}
	}
}

// SimDevice is a simulated engine's simulated GPU (simengine's GET
// /simulated/device): the device's memory as NVML would count it with
// that one engine on it.
type SimDevice struct {
	GPU               string  `json:"gpu"`
	Simulated         bool    `json:"simulated"`
	TotalBytes        uint64  `json:"total_bytes"`
	UsedBytes         uint64  `json:"used_bytes"`
	ComputeCapability string  `json:"compute_capability"`
	Utilization       float64 `json:"utilization"`
}

// SimDevicePath is where simengine serves its simulated device.
const SimDevicePath = "/simulated/device"

// Simulated returns a Source whose one device is the simulated GPU of the
// simulated engine at baseURL (its /simulated/device). Before the engine
// listens and after it exits the device reads as empty: a simulated GPU
// exists only with its engine. It is go-nvml's mock.Interface, so the
// runner reads it through the same calls as a real GPU, and every sample
// of it is marked simulated.
func Simulated(baseURL string) (*Source, error) {
	return SimulatedVia(baseURL, nil)
}

// SimulatedVia is Simulated reaching the engine through rt (a sandboxed
// engine's socket: engine.Box.Transport); nil is the default transport.
func SimulatedVia(baseURL string, rt http.RoundTripper) (*Source, error) {
	client := &http.Client{Timeout: 2 * time.Second, Transport: rt}
	var mu sync.Mutex
	last := SimDevice{GPU: "NVIDIA H200 (simulated)", TotalBytes: 141 << 30, ComputeCapability: "9.0"}
	// read fetches the device; GetMemoryInfo_v2 calls it once per
	// sample, and the other calls use what it got.
	read := func() SimDevice {
		mu.Lock()
		defer mu.Unlock()
		resp, err := client.Get(baseURL + SimDevicePath)
		if err != nil {
			last.UsedBytes, last.Utilization = 0, 0 // no engine: nothing on the device
			return last
		}
		defer resp.Body.Close()
		var d SimDevice
		if resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&d) == nil && d.TotalBytes > 0 {
			last = d
		} else {
			last.UsedBytes, last.Utilization = 0, 0
		}
		return last
	}
	cached := func() SimDevice {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
	dev := &mock.Device{
		GetNameFunc: func() (string, nvml.Return) { return cached().GPU, nvml.SUCCESS },
		GetUUIDFunc: func() (string, nvml.Return) { return "GPU-simulated-0", nvml.SUCCESS },
		GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) {
			m := read()
			return nvml.Memory_v2{Total: m.TotalBytes, Used: m.UsedBytes, Free: m.TotalBytes - min(m.UsedBytes, m.TotalBytes)}, nvml.SUCCESS
		},
		GetCudaComputeCapabilityFunc: func() (int, int, nvml.Return) {
			var major, minor int
			if _, err := fmt.Sscanf(cached().ComputeCapability, "%d.%d", &major, &minor); err != nil {
				return 0, 0, nvml.ERROR_NOT_SUPPORTED
			}
			return major, minor, nvml.SUCCESS
		},
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: uint32(100 * cached().Utilization)}, nvml.SUCCESS
		},
		GetPowerUsageFunc: func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED },
	}
	lib := &mock.Interface{
		InitFunc:                   func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:               func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, nvml.Return) { return 1, nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(int) (nvml.Device, nvml.Return) { return dev, nvml.SUCCESS },
	}
	return open(lib, true, 0)
}

// Sampler reads a Source at an interval and flushes batches to Sink.
// It runs from before the engine starts to after it stops, so the
// start-up (weights, profiling, the KV pool, CUDA graphs) is sampled
// and capped like the serving.
type Sampler struct {
	Source *Source
	// Interval between memory readings; default 100 ms (10 Hz).
	Interval time.Duration
	// ActivityInterval between utilisation and power readings; default
	// 1 s (NVML averages both over about a second).
	ActivityInterval time.Duration
	// Baseline is the device's used memory before the engine started.
	Baseline uint64
	// Sink receives batches; its error is kept and returned by Run.
	Sink func(ctx context.Context, batch []Sample) error
	// BatchSize is how many samples make a batch; default 50.
	BatchSize int
	// OverCap, when set, is called once with the first sample whose
	// engine memory (over Baseline) exceeds CapBytes.
	CapBytes uint64
	OverCap  func(Sample)

	mu    sync.Mutex
	peak  uint64
	count int
}

// Peak returns the most engine memory (device used over the baseline)
// seen since the last ResetPeak.
func (s *Sampler) Peak() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

// Count is how many readings the sampler has taken.
func (s *Sampler) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count
}

// ResetPeak forgets the peak seen so far and returns it, so that the
// start-up and each workload of an engine run get their own.
func (s *Sampler) ResetPeak() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.peak
	s.peak = 0
	return p
}

// Run samples until ctx ends, then flushes what is left.
func (s *Sampler) Run(ctx context.Context) error {
	iv := s.Interval
	if iv <= 0 {
		iv = 100 * time.Millisecond
	}
	aiv := s.ActivityInterval
	if aiv <= 0 {
		aiv = time.Second
	}
	bs := s.BatchSize
	if bs <= 0 {
		bs = 50
	}
	var batch []Sample
	var sinkErr error
	flush := func(ctx context.Context) {
		if len(batch) == 0 || s.Sink == nil {
			batch = batch[:0]
			return
		}
		if err := s.Sink(ctx, batch); err != nil && sinkErr == nil {
			sinkErr = err
		}
		batch = nil
	}
	capped := false
	var lastActivity time.Time
	var util, power float64
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			flush(fctx)
			cancel()
			return sinkErr
		case <-t.C:
			activity := time.Since(lastActivity) >= aiv
			smp, err := s.Source.Read(s.Baseline, activity)
			if err != nil {
				continue // a failed reading is a gap, not the end of the job
			}
			if activity {
				util, power, lastActivity = smp.Util, smp.PowerW, smp.At
			}
			smp.Util, smp.PowerW = util, power
			s.mu.Lock()
			s.peak = max(s.peak, smp.EngineMem)
			s.count++
			s.mu.Unlock()
			if !capped && s.CapBytes > 0 && smp.EngineMem > s.CapBytes && s.OverCap != nil {
				capped = true
				s.OverCap(smp)
			}
			batch = append(batch, smp)
			if len(batch) >= bs {
				flush(ctx)
			}
		}
	}
}
