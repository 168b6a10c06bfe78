package telemetry_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/services/runner/telemetry"
)

// TestOpenWithoutDriver: on a machine without NVIDIA's library, Open is an
// error, not a crash (the test process surviving is the point).
func TestOpenWithoutDriver(t *testing.T) {
	s, err := telemetry.Open(0)
	if err == nil {
		s.Close()
		t.Skip("this machine has NVML")
	}
	require.ErrorIs(t, err, telemetry.ErrNoNVML)
}

// TestSourceReadsItsOwnDevice: on a machine of several GPUs (one runner
// each), a source reads, names and sizes only the device it is bound to,
// so a runner's peak and hard cap never count its neighbours' memory; an
// index the machine lacks is refused.
func TestSourceReadsItsOwnDevice(t *testing.T) {
	devs := []*mock.Device{gpuOf("GPU zero", 70<<30, 141<<30), gpuOf("GPU one", 5<<30, 80<<30)}
	lib := &mock.Interface{
		InitFunc:           func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:       func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc: func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(devs) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return devs[i], nvml.SUCCESS
		},
	}
	for _, c := range []struct {
		index       int
		name        string
		used, total uint64
	}{
		{0, "GPU zero", 70 << 30, 141 << 30},
		{1, "GPU one", 5 << 30, 80 << 30},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := telemetry.FromNVML(lib, false, c.index)
			require.NoError(t, err)
			require.Equal(t, c.index, s.Index())
			require.Equal(t, c.name, s.GPU())
			require.Equal(t, "GPU-"+c.name, s.UUID())
			require.Equal(t, c.total, s.TotalBytes())
			smp, err := s.Read(0, true)
			require.NoError(t, err)
			require.Equal(t, c.index, smp.GPU, "one device: the source's own")
			require.Equal(t, c.used, smp.MemUsed)
		})
	}
	for _, bad := range []int{2, -1} {
		_, err := telemetry.FromNVML(lib, false, bad)
		require.ErrorIs(t, err, telemetry.ErrNoDevice, "index %d", bad)
	}
}

func gpuOf(name string, used, total uint64) *mock.Device {
	return &mock.Device{
		GetNameFunc:       func() (string, nvml.Return) { return name, nvml.SUCCESS },
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) { return nvml.Memory{Used: used, Total: total}, nvml.SUCCESS },
		GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) {
			return nvml.Memory_v2{}, nvml.ERROR_NOT_SUPPORTED // an older driver: v1 it is
		},
		GetUUIDFunc: func() (string, nvml.Return) { return "GPU-" + name, nvml.SUCCESS },
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: 50}, nvml.SUCCESS
		},
		GetPowerUsageFunc: func() (uint32, nvml.Return) { return 300000, nvml.SUCCESS },
	}
}

// simEngine serves a simulated device whose used bytes the test sets.
func simEngine(t *testing.T, used *atomic.Uint64) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, telemetry.SimDevicePath, r.URL.Path)
		_ = json.NewEncoder(w).Encode(telemetry.SimDevice{GPU: "NVIDIA H100 (simulated)", Simulated: true,
			TotalBytes: 80 << 30, UsedBytes: used.Load(), ComputeCapability: "9.0", Utilization: 1})
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestSimulatedDevice: the simulated GPU is the engine's /simulated/device,
// read through go-nvml's calls; before its engine answers (or after it
// exits) it is an empty H200, so a baseline read before the start is 0.
func TestSimulatedDevice(t *testing.T) {
	var used atomic.Uint64
	used.Store(20 << 30)
	s, err := telemetry.Simulated(simEngine(t, &used))
	require.NoError(t, err)
	defer s.Close()
	require.True(t, s.Simulated())
	smp, err := s.Read(5<<30, true)
	require.NoError(t, err)
	require.Equal(t, "NVIDIA H100 (simulated)", s.GPU(), "named by its engine once it answers")
	require.Equal(t, uint64(20<<30), smp.MemUsed)
	require.Equal(t, uint64(80<<30), smp.MemTotal)
	require.Equal(t, uint64(15<<30), smp.EngineMem, "the engine's memory is the device's over the baseline")
	require.True(t, smp.Simulated)
	require.Equal(t, 1.0, smp.Util)
	major, minor, ok := s.ComputeCapability()
	require.True(t, ok)
	require.Equal(t, [2]int{9, 0}, [2]int{major, minor})

	gone, err := telemetry.Simulated("http://127.0.0.1:1")
	require.NoError(t, err)
	smp, err = gone.Read(0, false)
	require.NoError(t, err)
	require.Zero(t, smp.MemUsed, "no engine, nothing on its simulated device")
}

// TestMemoryV2LeavesOutTheReservation: NVML's v2 used memory leaves out
// what the driver reserves (v1 counts it in); the source reads v2 where
// the driver has it.
func TestMemoryV2LeavesOutTheReservation(t *testing.T) {
	dev := &mock.Device{
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: 80 << 30, Used: 10<<30 + 512<<20}, nvml.SUCCESS
		},
		GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) {
			return nvml.Memory_v2{Total: 80 << 30, Reserved: 512 << 20, Used: 10 << 30}, nvml.SUCCESS
		},
	}
	s, err := telemetry.FromNVML(oneDevice(dev), false, 0)
	require.NoError(t, err)
	m, err := s.Memory()
	require.NoError(t, err)
	require.Equal(t, telemetry.Memory{Used: 10 << 30, Reserved: 512 << 20, Total: 80 << 30}, m)
}

// oneDevice is a machine of one mock device, named if the test did not.
func oneDevice(dev *mock.Device) *mock.Interface {
	if dev.GetNameFunc == nil {
		dev.GetNameFunc = func() (string, nvml.Return) { return "NVIDIA H100 80GB HBM3", nvml.SUCCESS }
	}
	if dev.GetUUIDFunc == nil {
		dev.GetUUIDFunc = func() (string, nvml.Return) { return "GPU-0", nvml.SUCCESS }
	}
	return &mock.Interface{
		InitFunc:                   func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:               func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, nvml.Return) { return 1, nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(int) (nvml.Device, nvml.Return) { return dev, nvml.SUCCESS },
	}
}

// TestWaitIdle: between two engines the runner waits until the device is
// back at the idle baseline its first wait read (a stopped engine's
// memory takes a moment to go); a device that stays above it for the
// whole wait is ErrNotAtBaseline, and a device that reads lower lowers
// the baseline.
func TestWaitIdle(t *testing.T) {
	var used atomic.Uint64
	used.Store(1 << 30)
	dev := &mock.Device{GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) {
		return nvml.Memory_v2{Total: 80 << 30, Used: used.Load()}, nvml.SUCCESS
	}}
	s, err := telemetry.FromNVML(oneDevice(dev), false, 0)
	require.NoError(t, err)
	ctx := context.Background()
	const slack = 256 << 20
	got, err := s.WaitIdle(ctx, time.Second, 5*time.Millisecond, slack)
	require.NoError(t, err)
	require.Equal(t, uint64(1<<30), got, "the first wait reads the idle baseline")

	// An engine's memory that goes away within the wait.
	used.Store(30 << 30)
	go func() { time.Sleep(50 * time.Millisecond); used.Store(1<<30 + 100<<20) }()
	got, err = s.WaitIdle(ctx, 5*time.Second, 5*time.Millisecond, slack)
	require.NoError(t, err)
	require.Equal(t, uint64(1<<30+100<<20), got, "within the slack counts as back")

	// Memory that stays.
	used.Store(6 << 30)
	_, err = s.WaitIdle(ctx, 50*time.Millisecond, 5*time.Millisecond, slack)
	require.ErrorIs(t, err, telemetry.ErrNotAtBaseline)
	require.Contains(t, err.Error(), "6.00 GiB used, 1.00 GiB when idle")

	// A device that reads lower lowers the baseline.
	used.Store(512 << 20)
	_, err = s.WaitIdle(ctx, time.Second, 5*time.Millisecond, slack)
	require.NoError(t, err)
	used.Store(1 << 30)
	_, err = s.WaitIdle(ctx, 50*time.Millisecond, 5*time.Millisecond, slack)
	require.ErrorIs(t, err, telemetry.ErrNotAtBaseline, "1 GiB is now 512 MiB above idle")
}

func TestSamplerBatchesPeakAndCap(t *testing.T) {
	var used atomic.Uint64
	used.Store(10 << 30)
	s, err := telemetry.Simulated(simEngine(t, &used))
	require.NoError(t, err)
	var mu sync.Mutex
	var got []telemetry.Sample
	var over atomic.Int64
	sm := &telemetry.Sampler{Source: s, Interval: 5 * time.Millisecond, BatchSize: 4, CapBytes: 28 << 30, Baseline: 2 << 30,
		Sink: func(_ context.Context, b []telemetry.Sample) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, b...)
			return nil
		},
		OverCap: func(smp telemetry.Sample) { over.Add(1) }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sm.Run(ctx) }()
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= 8 }, 10*time.Second, 5*time.Millisecond)
	used.Store(35 << 30) // over the cap
	require.Eventually(t, func() bool { return over.Load() == 1 }, 10*time.Second, 5*time.Millisecond)
	used.Store(12 << 30)
	time.Sleep(30 * time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, int64(1), over.Load(), "the cap is reported once")
	require.Equal(t, uint64(33<<30), sm.Peak(), "the peak is the engine's: over the baseline")
	require.GreaterOrEqual(t, sm.Count(), 8)
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(got); i++ {
		require.False(t, got[i].At.Before(got[i-1].At), "samples in time order")
	}
}
