// Package telemetry samples GPUs through NVML while a job runs and hands
// the samples, in batches, to a sink (the gpu_samples table).
//
// NVML rule: nvml.Init returns an error when the driver library is
// missing, but any other call without a loaded library crashes the
// process. So every call goes through a Source that exists only after a
// successful Init. Without a GPU the runner uses Simulated: an
// nvml.Interface (go-nvml's mock type) whose one device reports the memory
// of the simulated engine, read from its memory endpoint; every sample of
// it is marked simulated.
package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"syscall"
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
	s := &Source{lib: lib, simulated: simulated, index: index}
	if d, ret := lib.DeviceGetHandleByIndex(index); ret == nvml.SUCCESS {
		if name, ret := d.GetName(); ret == nvml.SUCCESS {
			s.gpu = name
		}
		if uuid, ret := d.GetUUID(); ret == nvml.SUCCESS {
			s.uuid = uuid
		}
	}
	return s, nil
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
// simulation).
func (s *Source) GPU() string { return s.gpu }

// TotalBytes is the device's memory (0 when NVML does not say).
func (s *Source) TotalBytes() uint64 {
	d, ret := s.lib.DeviceGetHandleByIndex(s.index)
	if ret != nvml.SUCCESS {
		return 0
	}
	mem, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return 0
	}
	return mem.Total
}

// Sample is one reading of one device.
type Sample struct {
	At       time.Time
	GPU      int
	UUID     string
	MemUsed  uint64
	MemTotal uint64
	// ProcMem is the memory of the watched engine's processes: every
	// process NVML lists on the device whose process group is the
	// engine's (vLLM's engine core and workers are children of the
	// server it starts); 0 when unknown.
	ProcMem   uint64
	Util      float64
	PowerW    float64
	Simulated bool
}

// Read reads the source's device once. pid, when not zero, is the
// engine's process and process group (the runner starts it as a group
// leader): the memory of every process of that group is reported in
// ProcMem.
func (s *Source) Read(pid int) ([]Sample, error) {
	now := time.Now()
	out := make([]Sample, 0, 1)
	for _, i := range []int{s.index} {
		d, ret := s.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("telemetry: device %d: %s", i, nvml.ErrorString(ret))
		}
		mem, ret := d.GetMemoryInfo()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("telemetry: device %d memory: %s", i, nvml.ErrorString(ret))
		}
		smp := Sample{At: now, GPU: i, MemUsed: mem.Used, MemTotal: mem.Total, Simulated: s.simulated}
		if uuid, ret := d.GetUUID(); ret == nvml.SUCCESS {
			smp.UUID = uuid
		}
		if u, ret := d.GetUtilizationRates(); ret == nvml.SUCCESS {
			smp.Util = float64(u.Gpu) / 100
		}
		if p, ret := d.GetPowerUsage(); ret == nvml.SUCCESS {
			smp.PowerW = float64(p) / 1000
		}
		if pid > 0 {
			if procs, ret := d.GetComputeRunningProcesses(); ret == nvml.SUCCESS {
				smp.ProcMem = GroupMemory(procs, pid)
			}
		}
		out = append(out, smp)
	}
	return out, nil
}

// GroupMemory sums the GPU memory of the processes of process group pgid
// among procs (NVML's compute processes of one device). A process that
// has exited since NVML listed it is not counted. NVML reports PIDs of
// the host's namespace; the runner and its engines share one.
func GroupMemory(procs []nvml.ProcessInfo, pgid int) uint64 {
	var n uint64
	for _, p := range procs {
		if int(p.Pid) == pgid {
			n += p.UsedGpuMemory
			continue
		}
		if g, err := syscall.Getpgid(int(p.Pid)); err == nil && g == pgid {
			n += p.UsedGpuMemory
		}
	}
	return n
}

// SimMemory is the simulated engine's memory report.
type SimMemory struct {
	GPU        string `json:"gpu"`
	TotalBytes uint64 `json:"total_bytes"`
	UsedBytes  uint64 `json:"used_bytes"`
	Running    int    `json:"running"`
}

// Simulated returns a Source whose one device is the simulated engine at
// baseURL: its memory is what the engine's memory endpoint reports, its
// process the engine's pid. It is go-nvml's mock.Interface, so the runner
// reads it through the same calls as a real GPU.
func Simulated(baseURL string, pid func() int) (*Source, error) {
	client := &http.Client{Timeout: 2 * time.Second}
	var mu sync.Mutex
	last := SimMemory{GPU: "NVIDIA H200 (simulated)", TotalBytes: 141 << 30}
	// read fetches the engine's report; GetMemoryInfo calls it once per
	// sample, and the other device calls of that sample use what it got
	// (Source.Read asks for memory first), so a sample costs one request.
	read := func() SimMemory {
		mu.Lock()
		defer mu.Unlock()
		resp, err := client.Get(baseURL + "/v1/lowbarena/memory")
		if err == nil {
			var m SimMemory
			if resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&m) == nil {
				last = m
			}
			resp.Body.Close()
		} else {
			last.UsedBytes = 0 // the engine is gone: its memory is free
		}
		return last
	}
	cached := func() SimMemory {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
	dev := &mock.Device{
		GetNameFunc: func() (string, nvml.Return) { return read().GPU, nvml.SUCCESS },
		GetUUIDFunc: func() (string, nvml.Return) { return "GPU-simulated-0", nvml.SUCCESS },
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			m := read()
			return nvml.Memory{Total: m.TotalBytes, Used: m.UsedBytes, Free: m.TotalBytes - min(m.UsedBytes, m.TotalBytes)}, nvml.SUCCESS
		},
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
			if cached().Running > 0 {
				return nvml.Utilization{Gpu: 100}, nvml.SUCCESS
			}
			return nvml.Utilization{}, nvml.SUCCESS
		},
		GetPowerUsageFunc: func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED },
		GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
			p := pid()
			if p == 0 {
				return nil, nvml.SUCCESS
			}
			return []nvml.ProcessInfo{{Pid: uint32(p), UsedGpuMemory: cached().UsedBytes}}, nvml.SUCCESS
		},
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
type Sampler struct {
	Source *Source
	// Interval between readings; default 100 ms (10 Hz).
	Interval time.Duration
	// PID is the watched engine process (0: none).
	PID func() int
	// Sink receives batches; its error is kept and returned by Run.
	Sink func(ctx context.Context, batch []Sample) error
	// BatchSize is how many samples make a batch; default 50.
	BatchSize int
	// OverCap, when set, is called once with the first sample whose used
	// memory exceeds CapBytes.
	CapBytes uint64
	OverCap  func(Sample)

	mu       sync.Mutex
	peak     uint64
	procPeak uint64
}

// Peak returns the highest used memory seen on the source's device.
func (s *Sampler) Peak() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

// ProcPeak returns the most memory the engine's processes held on one
// device (0 when NVML listed none of them).
func (s *Sampler) ProcPeak() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.procPeak
}

// ResetPeak forgets the highest used memory (device and processes) seen so
// far and returns the device's, so that each workload of an engine run
// gets its own peaks.
func (s *Sampler) ResetPeak() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.peak
	s.peak, s.procPeak = 0, 0
	return p
}

// Run samples until ctx ends, then flushes what is left.
func (s *Sampler) Run(ctx context.Context) error {
	iv := s.Interval
	if iv <= 0 {
		iv = 100 * time.Millisecond
	}
	bs := s.BatchSize
	if bs <= 0 {
		bs = 50
	}
	pid := s.PID
	if pid == nil {
		pid = func() int { return 0 }
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
			smps, err := s.Source.Read(pid())
			if err != nil {
				continue // a failed reading is a gap, not the end of the job
			}
			for _, smp := range smps {
				s.mu.Lock()
				s.peak = max(s.peak, smp.MemUsed)
				s.procPeak = max(s.procPeak, smp.ProcMem)
				s.mu.Unlock()
				if !capped && s.CapBytes > 0 && smp.MemUsed > s.CapBytes && s.OverCap != nil {
					capped = true
					s.OverCap(smp)
				}
			}
			batch = append(batch, smps...)
			if len(batch) >= bs {
				flush(ctx)
			}
		}
	}
}
