//go:build !nochdb

package chdbstore

import (
	"context"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/lowbarena/lowbarena/services/store"
	"github.com/lowbarena/lowbarena/services/store/storetest"
)

// rawInsert is the floor: the same rows written by hand into the same
// text (JSONCompactEachRow, the values with strconv, the strings known to
// need no escaping) and run on the same chDB session, with nothing of the
// store around it.
func rawInsert(b testing.TB, st *Store, rows []store.GPUSample) {
	buf := make([]byte, 0, 64+len(rows)*160)
	buf = append(buf, "INSERT INTO "+st.db+".gpu_samples (ts_ms, pod, gpu, gpu_uuid, run_id, job_id, seq, mem_used, mem_total, proc_mem, util, power, simulated) FORMAT JSONCompactEachRow\n"...)
	for i := range rows {
		r := &rows[i]
		buf = append(buf, '[')
		buf = strconv.AppendUint(buf, r.TsMs, 10)
		buf = append(append(append(buf, `,"`...), r.Pod...), `",`...)
		buf = strconv.AppendUint(buf, uint64(r.GPU), 10)
		buf = append(append(append(buf, `,"`...), r.GPUUUID...), `","`...)
		buf = append(append(buf, r.RunID...), `","`...)
		buf = append(append(buf, r.JobID...), `",`...)
		buf = strconv.AppendUint(buf, r.Seq, 10)
		buf = append(buf, ',')
		buf = strconv.AppendUint(buf, r.MemUsed, 10)
		buf = append(buf, ',')
		buf = strconv.AppendUint(buf, r.MemTotal, 10)
		buf = append(buf, ',')
		buf = strconv.AppendUint(buf, r.ProcMem, 10)
		buf = append(buf, ',')
		buf = strconv.AppendFloat(buf, r.Util, 'g', -1, 64)
		buf = append(buf, ',')
		buf = strconv.AppendFloat(buf, r.Power, 'g', -1, 64)
		buf = append(buf, ',')
		buf = strconv.AppendUint(buf, uint64(r.Simulated), 10)
		buf = append(buf, "]\n"...)
	}
	st.s.mu.Lock()
	defer st.s.mu.Unlock()
	res, err := st.s.conn.Query(string(buf), "TabSeparated")
	if err != nil {
		b.Fatal(err)
	}
	defer res.Free()
	if err := res.Error(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkInsertVsRaw inserts batches of storetest.BatchRows gpu_samples
// rows with store.Insert and with rawInsert in turn, on the same session:
// each op is one batch of each. It reports each side's rows per second,
// the store over raw, and the store's allocations per row.
func BenchmarkInsertVsRaw(b *testing.B) {
	u, err := url.Parse("chdb://" + b.TempDir() + "?database=bench")
	if err != nil {
		b.Fatal(err)
	}
	s, err := Open(context.Background(), u)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	if _, err := store.Migrate(context.Background(), s); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	rows := storetest.GPUSampleRows(storetest.BatchRows)
	var seq uint64
	next := func() {
		for i := range rows {
			rows[i].Seq = seq
			seq++
		}
	}
	arena := func() (time.Duration, uint64) {
		next()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		t0 := time.Now()
		if err := store.Insert(ctx, s, rows); err != nil {
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
		rawInsert(b, s, rows)
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
