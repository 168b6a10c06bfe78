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
	rows := make([]store.GPUSample, BatchRows)
	for i := range rows {
		rows[i] = store.GPUSample{
			TsMs: uint64(time.Now().UnixMilli()), Pod: "pod-0", GPU: uint32(i % 8), GPUUUID: "GPU-8c1f0d3e",
			RunID: "run-1", JobID: "job-1", MemUsed: 40 << 30, MemTotal: 141 << 30, ProcMem: 39 << 30,
			Util: 0.93, Power: 612.5, Simulated: 1,
		}
	}
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
