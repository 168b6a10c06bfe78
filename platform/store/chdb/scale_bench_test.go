//go:build !nochdb

package chdbstore

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lowbarena/lowbarena/platform/store"
)

// BenchmarkGPUSamplesScale is the scale curve of gpu_samples on chDB: a
// fleet of 1,000 GPUs (125 pods of 8) sampled at 10 Hz, each pod running
// a job for 10 minutes then the next, written a second of the fleet
// (10,000 rows) per store.Insert, until the table holds 100,000, 1
// million and 10 million rows (36 million, an hour of the fleet, with
// LOWBARENA_BENCH_36M=1). At each size it reports the ingest rate of the
// rows just written and times one job's memory trace, the per-sample peak
// of its process memory over its 8 GPUs, for a job of fixed size (2,000
// samples of 8 GPUs, written first). A flat query time and ingest rate
// are the curve the table's key (job_id first) promises. It logs the
// table's sorting key and, at each size, the trace's EXPLAIN indexes = 1
// (the parts and granules the key selects), and reports the granules read
// as a metric: 8,192 rows each at most.
func BenchmarkGPUSamplesScale(b *testing.B) {
	sizes := []int{100_000, 1_000_000, 10_000_000}
	if os.Getenv("LOWBARENA_BENCH_36M") == "1" {
		sizes = append(sizes, 36_000_000)
	}
	u, err := url.Parse("chdb://" + b.TempDir() + "?database=scale")
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
	t0 := uint64(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC).UnixMilli())
	// The probe job: 8 GPUs, 2,000 samples each, before the fleet.
	probe := make([]store.GPUSample, 0, 16_000)
	for i := range 16_000 {
		probe = append(probe, store.GPUSample{TsMs: t0 + uint64(i/8)*100, Pod: "pod-probe", GPU: uint32(i % 8), GPUUUID: "GPU-probe",
			RunID: "run-probe", JobID: "job-probe", Seq: uint64(i / 8), MemUsed: 40 << 30, MemTotal: 141 << 30, ProcMem: 39<<30 + uint64(i)*4096,
			Util: 0.9, Power: 650, Simulated: 1})
	}
	if err := store.Insert(ctx, st, probe); err != nil {
		b.Fatal(err)
	}
	const gpus, hz = 1000, 10
	batch := make([]store.GPUSample, gpus*hz)
	pods, uuids := make([]string, gpus/8), make([]string, gpus)
	for p := range pods {
		pods[p] = fmt.Sprintf("pod-%03d", p)
	}
	for g := range uuids {
		uuids[g] = fmt.Sprintf("GPU-%08x", g)
	}
	second, held := 0, 0
	write := func() {
		window := second / 600 // a pod's job runs 10 minutes
		for i := range batch {
			g, tick := i%gpus, i/gpus
			job := fmt.Sprintf("job-%s-%d", pods[g/8], window)
			seq := uint64(second%600*hz + tick)
			batch[i] = store.GPUSample{TsMs: t0 + uint64(second*1000+tick*100), Pod: pods[g/8], GPU: uint32(g % 8), GPUUUID: uuids[g],
				RunID: job, JobID: job, Seq: seq, MemUsed: 40<<30 + seq*4096, MemTotal: 141 << 30, ProcMem: 39<<30 + seq*4096,
				Util: 0.5 + float64(g%50)/100, Power: 600 + float64(g%50), Simulated: 1}
		}
		if err := store.Insert(ctx, st, batch); err != nil {
			b.Fatal(err)
		}
		second++
		held += len(batch)
	}
	type point struct {
		TsMs uint64 `ch:"ts_ms"`
		Peak uint64 `ch:"peak"`
	}
	trace := func() {
		var pts []point
		if err := st.Select(ctx, &pts, "SELECT ts_ms, max(proc_mem) AS peak FROM gpu_samples WHERE job_id = ? GROUP BY ts_ms ORDER BY ts_ms", "job-probe"); err != nil {
			b.Fatal(err)
		}
		if len(pts) != 2000 {
			b.Fatalf("the probe's trace has %d points, not 2000", len(pts))
		}
	}
	var key []struct {
		Key string `ch:"sorting_key"`
	}
	if err := st.Select(ctx, &key, "SELECT sorting_key FROM system.tables WHERE database = currentDatabase() AND name = 'gpu_samples'"); err != nil || len(key) != 1 {
		b.Fatalf("the table's sorting key: %v (%d rows)", err, len(key))
	}
	b.Logf("gpu_samples ORDER BY %s", key[0].Key)
	// granules reads the primary key's line of EXPLAIN indexes = 1: the
	// granules the trace reads of those the table holds.
	granules := func() (read, total int) {
		t, err := st.QueryTable(ctx, "EXPLAIN indexes = 1 SELECT ts_ms, max(proc_mem) AS peak FROM gpu_samples WHERE job_id = 'job-probe' GROUP BY ts_ms ORDER BY ts_ms",
			store.Limits{MaxRows: 1000, MaxBytes: 1 << 20, MaxSeconds: 60})
		if err != nil {
			b.Fatal(err)
		}
		var lines []string
		for _, row := range t.Rows {
			var line string
			if json.Unmarshal(row[0], &line) == nil {
				lines = append(lines, line)
			}
		}
		b.Logf("EXPLAIN indexes = 1 at %d rows:\n%s", held, strings.Join(lines, "\n"))
		inKey := false
		for _, l := range lines {
			l = strings.TrimSpace(l)
			if l == "PrimaryKey" {
				inKey = true
			}
			if inKey && strings.HasPrefix(l, "Granules: ") {
				if _, err := fmt.Sscanf(l, "Granules: %d/%d", &read, &total); err == nil {
					return read, total
				}
			}
		}
		b.Fatalf("no Granules line under PrimaryKey in EXPLAIN:\n%s", strings.Join(lines, "\n"))
		return 0, 0
	}
	for _, n := range sizes {
		from, start := held, time.Now()
		for held < n {
			write()
		}
		rate := float64(held-from) / time.Since(start).Seconds()
		read, total := granules()
		b.Run(fmt.Sprintf("rows=%d", n), func(b *testing.B) {
			trace()
			for b.Loop() {
				trace()
			}
			b.ReportMetric(rate, "ingest-rows/s")
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "trace-µs")
			b.ReportMetric(float64(read), "granules-read")
			b.ReportMetric(float64(total), "granules-held")
		})
	}
}
