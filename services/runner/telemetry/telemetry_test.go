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
			smps, err := s.Read(0)
			require.NoError(t, err)
			require.Len(t, smps, 1, "one device: the source's own")
			require.Equal(t, c.index, smps[0].GPU)
			require.Equal(t, c.used, smps[0].MemUsed)
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
		GetUUIDFunc:       func() (string, nvml.Return) { return "GPU-" + name, nvml.SUCCESS },
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: 50}, nvml.SUCCESS
		},
		GetPowerUsageFunc: func() (uint32, nvml.Return) { return 300000, nvml.SUCCESS },
	}
}

// simEngine serves a memory report whose used bytes the test sets.
func simEngine(t *testing.T, used *atomic.Uint64) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "/v1/lowbarena/memory", r.URL.Path)
		_ = json.NewEncoder(w).Encode(map[string]any{"gpu": "NVIDIA H200 (simulated)", "simulated": true,
			"total_bytes": uint64(141) << 30, "used_bytes": used.Load(), "running": 1})
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestSimulatedDevice(t *testing.T) {
	var used atomic.Uint64
	used.Store(20 << 30)
	s, err := telemetry.Simulated(simEngine(t, &used), func() int { return 4242 })
	require.NoError(t, err)
	defer s.Close()
	require.True(t, s.Simulated())
	require.Equal(t, "NVIDIA H200 (simulated)", s.GPU())
	smps, err := s.Read(4242)
	require.NoError(t, err)
	require.Len(t, smps, 1)
	require.Equal(t, uint64(20<<30), smps[0].MemUsed)
	require.Equal(t, uint64(141<<30), smps[0].MemTotal)
	require.Equal(t, uint64(20<<30), smps[0].ProcMem, "the engine's process holds the memory")
	require.True(t, smps[0].Simulated)
	require.Equal(t, 1.0, smps[0].Util)
}

func TestSamplerBatchesPeakAndCap(t *testing.T) {
	var used atomic.Uint64
	used.Store(10 << 30)
	s, err := telemetry.Simulated(simEngine(t, &used), func() int { return 0 })
	require.NoError(t, err)
	var mu sync.Mutex
	var got []telemetry.Sample
	var over atomic.Int64
	sm := &telemetry.Sampler{Source: s, Interval: 5 * time.Millisecond, BatchSize: 4, CapBytes: 30 << 30,
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
	require.Equal(t, uint64(35<<30), sm.Peak())
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(got); i++ {
		require.False(t, got[i].At.Before(got[i-1].At), "samples in time order")
	}
}
