package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/services/store"
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
