package chstore

import (
	"context"
	"net/url"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/lowbarena/lowbarena/services/store"
	"github.com/lowbarena/lowbarena/services/store/clickhouse/chtest"
	"github.com/lowbarena/lowbarena/services/store/storetest"
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
	rows := storetest.GPUSampleRows(storetest.BatchRows)
	var seq uint64
	next := func() {
		for i := range rows {
			rows[i].Seq = seq
			seq++
		}
	}
	var rc rawColumns
	arena := func() (time.Duration, uint64) {
		next()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		t0 := time.Now()
		if err := store.Insert(ctx, st, rows); err != nil {
			b.Fatal(err)
		}
		d := time.Since(t0)
		runtime.ReadMemStats(&m1)
		return d, m1.Mallocs - m0.Mallocs
	}
	raw := func() (time.Duration, uint64) {
		next()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		t0 := time.Now()
		rawInsert(b, st, &rc, rows)
		d := time.Since(t0)
		runtime.ReadMemStats(&m1)
		return d, m1.Mallocs - m0.Mallocs
	}
	arena()
	raw()
	var rawT, arenaT []time.Duration
	var mallocs, rawMallocs uint64
	runRaw := func() {
		d, m := raw()
		rawT = append(rawT, d)
		rawMallocs += m
	}
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			runRaw()
		}
		d, m := arena()
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
}
