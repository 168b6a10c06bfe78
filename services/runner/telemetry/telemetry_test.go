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

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/services/runner/telemetry"
)

// TestOpenWithoutDriver: on a machine without NVIDIA's library, Open is an
// error, not a crash (the test process surviving is the point).
func TestOpenWithoutDriver(t *testing.T) {
	s, err := telemetry.Open()
	if err == nil {
		s.Close()
		t.Skip("this machine has NVML")
	}
	require.ErrorIs(t, err, telemetry.ErrNoNVML)
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
