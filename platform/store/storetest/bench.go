package storetest

import (
	"context"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/store"
)

// BatchRows is the batch size of BenchInsertGPUSamples.
const BatchRows = 10_000

// BenchInsertGPUSamples measures store.Insert of GPUSample batches of
// BatchRows rows into st and reports rows/s. Every batch has new keys, so
// nothing collapses.
func BenchInsertGPUSamples(b *testing.B, st store.Store) {
	ctx := context.Background()
	rows := GPUSampleRows(BatchRows)
	var seq uint64
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		for i := range rows {
			rows[i].Seq = seq
			seq++
		}
		require.NoError(b, store.Insert(ctx, st, rows))
	}
	b.ReportMetric(float64(seq)/time.Since(start).Seconds(), "rows/s")
}

// GPUSampleRows returns n gpu_samples rows of one job, as a runner writes
// them (8 GPUs, 10 Hz), their Seq left for the caller to number.
func GPUSampleRows(n int) []store.GPUSample {
	rows := make([]store.GPUSample, n)
	t0 := uint64(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC).UnixMilli())
	for i := range rows {
		rows[i] = store.GPUSample{
			TsMs: t0 + uint64(i/8)*100, Pod: "pod-0", GPU: uint32(i % 8), GPUUUID: "GPU-8c1f0d3e",
			RunID: "run-1", JobID: "job-1", MemUsed: 40<<30 + uint64(i)*4096, MemTotal: 141 << 30, ProcMem: 39<<30 + uint64(i)*4096,
			Util: 0.5 + float64(i%50)/100, Power: 612.5 + float64(i%7), Simulated: 1,
		}
	}
	return rows
}

// BenchInsertVsRaw inserts batches of BatchRows gpu_samples rows through
// arena (store.Insert) and through raw (the driver alone) in turn, each op
// one batch of each, the raw batch before or after the arena's by turns so
// that a load spike hits both. Every batch has new keys. It reports each
// side's rows per second (the median batch), arena over raw, each side's
// allocations per row, and each side's CPU time per row in this process
// (user and system: the driver's and, for chDB, the engine's; a
// clickhouse-server's is its own process's), which a loaded machine moves
// far less than the rates.
func BenchInsertVsRaw(b *testing.B, arena, raw func([]store.GPUSample)) {
	rows := GPUSampleRows(BatchRows)
	var seq uint64
	var arenaCPU, rawCPU time.Duration
	timed := func(insert func([]store.GPUSample), cpu *time.Duration) (time.Duration, uint64) {
		for i := range rows {
			rows[i].Seq = seq
			seq++
		}
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		c0 := cpuTime(b)
		t0 := time.Now()
		insert(rows)
		d := time.Since(t0)
		*cpu += cpuTime(b) - c0
		runtime.ReadMemStats(&m1)
		return d, m1.Mallocs - m0.Mallocs
	}
	timed(arena, &arenaCPU)
	timed(raw, &rawCPU)
	arenaCPU, rawCPU = 0, 0
	var rawT, arenaT []time.Duration
	var mallocs, rawMallocs uint64
	runRaw := func() {
		d, m := timed(raw, &rawCPU)
		rawT = append(rawT, d)
		rawMallocs += m
	}
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			runRaw()
		}
		d, m := timed(arena, &arenaCPU)
		arenaT = append(arenaT, d)
		mallocs += m
		if i%2 == 1 {
			runRaw()
		}
	}
	slices.Sort(rawT)
	slices.Sort(arenaT)
	r := float64(len(rows)) / rawT[len(rawT)/2].Seconds()
	a := float64(len(rows)) / arenaT[len(arenaT)/2].Seconds()
	b.ReportMetric(r, "raw-rows/s")
	b.ReportMetric(a, "arena-rows/s")
	b.ReportMetric(a/r, "ratio")
	b.ReportMetric(float64(mallocs)/float64(len(arenaT)*len(rows)), "arena-allocs/row")
	b.ReportMetric(float64(rawMallocs)/float64(len(rawT)*len(rows)), "raw-allocs/row")
	b.ReportMetric(float64(arenaCPU)/float64(len(arenaT)*len(rows)), "arena-cpu-ns/row")
	b.ReportMetric(float64(rawCPU)/float64(len(rawT)*len(rows)), "raw-cpu-ns/row")
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
