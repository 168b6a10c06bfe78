//go:build !nochdb

package chdbstore

import (
	"context"
	"net/url"
	"strconv"
	"testing"

	"github.com/lowbarena/lowbarena/platform/store"
	"github.com/lowbarena/lowbarena/platform/store/storetest"
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
	storetest.BenchInsertVsRaw(b, func(r []store.GPUSample) {
		if err := store.Insert(ctx, s, r); err != nil {
			b.Fatal(err)
		}
	}, func(r []store.GPUSample) { rawInsert(b, s, r) })
}
