package chstore

import (
	"context"
	"net/url"
	"testing"

	"github.com/lowbarena/lowbarena/platform/store"
	"github.com/lowbarena/lowbarena/platform/store/clickhouse/chtest"
	"github.com/lowbarena/lowbarena/platform/store/storetest"
)

// rawColumns holds a batch as a program that writes gpu_samples with
// clickhouse-go alone would: one slice per column, reused from batch to
// batch.
type rawColumns struct {
	tsMs, seq, memUsed, memTotal, procMem []uint64
	gpu                                   []uint32
	pod, uuid, runID, jobID               []string
	util, power                           []float64
	simulated                             []uint8
}

// rawInsert is the floor: the rows copied into the columns by hand and
// appended column by column to one batch of the same connection pool
// (clickhouse-go's column append), with nothing of the store around it.
func rawInsert(b testing.TB, st *Store, c *rawColumns, rows []store.GPUSample) {
	ctx := context.Background()
	c.tsMs, c.seq, c.memUsed, c.memTotal, c.procMem = c.tsMs[:0], c.seq[:0], c.memUsed[:0], c.memTotal[:0], c.procMem[:0]
	c.gpu, c.pod, c.uuid, c.runID, c.jobID = c.gpu[:0], c.pod[:0], c.uuid[:0], c.runID[:0], c.jobID[:0]
	c.util, c.power, c.simulated = c.util[:0], c.power[:0], c.simulated[:0]
	for i := range rows {
		r := &rows[i]
		c.tsMs, c.pod, c.gpu, c.uuid = append(c.tsMs, r.TsMs), append(c.pod, r.Pod), append(c.gpu, r.GPU), append(c.uuid, r.GPUUUID)
		c.runID, c.jobID, c.seq = append(c.runID, r.RunID), append(c.jobID, r.JobID), append(c.seq, r.Seq)
		c.memUsed, c.memTotal, c.procMem = append(c.memUsed, r.MemUsed), append(c.memTotal, r.MemTotal), append(c.procMem, r.ProcMem)
		c.util, c.power, c.simulated = append(c.util, r.Util), append(c.power, r.Power), append(c.simulated, r.Simulated)
	}
	batch, err := st.conn.PrepareBatch(ctx, "INSERT INTO gpu_samples (ts_ms, pod, gpu, gpu_uuid, run_id, job_id, seq, mem_used, mem_total, proc_mem, util, power, simulated)")
	if err != nil {
		b.Fatal(err)
	}
	for j, col := range []any{c.tsMs, c.pod, c.gpu, c.uuid, c.runID, c.jobID, c.seq, c.memUsed, c.memTotal, c.procMem, c.util, c.power, c.simulated} {
		if err := batch.Column(j).Append(col); err != nil {
			b.Fatal(err)
		}
	}
	if err := batch.Send(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkInsertVsRaw inserts batches of storetest.BatchRows gpu_samples
// rows into a clickhouse-server on loopback with store.Insert and with
// rawInsert in turn: each op is one batch of each. It reports each side's
// rows per second, the store over raw, and the store's allocations per
// row (the driver's own included).
func BenchmarkInsertVsRaw(b *testing.B) {
	u, err := url.Parse("clickhouse://" + chtest.Start(b) + "/bench")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	st, err := Open(ctx, u)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	if _, err := store.Migrate(ctx, st); err != nil {
		b.Fatal(err)
	}
	var rc rawColumns
	storetest.BenchInsertVsRaw(b, func(r []store.GPUSample) {
		if err := store.Insert(ctx, st, r); err != nil {
			b.Fatal(err)
		}
	}, func(r []store.GPUSample) { rawInsert(b, st, &rc, r) })
}
