// Package storetest is the contract every store back-end keeps: one suite,
// run by each adapter's tests against a real engine (chDB in-process, a
// ClickHouse server on loopback), so both take the same SQL and the same
// rows and answer them the same way.
package storetest

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/store"
	"github.com/lowbarena/lowbarena/schemas"
)

// Opener opens a store for a test. It returns a store opened with
// store.Open (so migrated) on a database of t's own, named with
// DatabaseName(t); calling it again with the same t opens the same database
// again, which is how the suite checks what a reopen sees. The opener closes
// what it opened when t ends (a store closed earlier is closed again, which
// must be a no-op).
type Opener func(t *testing.T) store.Store

// Run runs the contract suite against the back-end that open opens.
func Run(t *testing.T, open Opener) {
	tests := []struct {
		name string
		run  func(t *testing.T, open Opener)
	}{
		{"Migrations", testMigrations},
		{"RoundTrip", testRoundTrip},
		{"Bind", testBind},
		{"Dedup", testDedup},
		{"BadAppend", testBadAppend},
		{"Columns", testColumns},
		{"BadQuery", testBadQuery},
		{"BadDest", testBadDest},
		{"Concurrent", testConcurrent},
		{"Closed", testClosed},
		{"Table", testTable},
		{"Retention", testRetention},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, open) })
	}
}

// DatabaseName returns a database name for t: a plain identifier, the same
// for the same test and distinct across the tests of one run.
func DatabaseName(t testing.TB) string {
	name := t.Name()
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	var b strings.Builder
	b.WriteString("t_")
	for _, r := range strings.ToLower(name) {
		if b.Len() >= 40 {
			break
		}
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	fmt.Fprintf(&b, "_%08x", h.Sum32())
	return b.String()
}

// Tables are the tables of the arena's DDL.
var Tables = []string{"gpu_samples", "requests", "quality_items", "quality_answers", "stage_results", "scores", "round_steps", "gpu_seconds"}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

type versionRow struct {
	Version uint32 `ch:"version"`
	Name    string `ch:"name"`
}

type countRow struct {
	N uint64 `ch:"n"`
}

func count(t *testing.T, st store.Store, query string, args ...any) uint64 {
	t.Helper()
	var out []countRow
	require.NoError(t, st.Select(ctxFor(t), &out, query, args...))
	require.Len(t, out, 1)
	return out[0].N
}

func testMigrations(t *testing.T, open Opener) {
	ctx := ctxFor(t)
	migrations, err := schemas.Migrations()
	require.NoError(t, err)
	require.NotEmpty(t, migrations)
	var want []versionRow
	for _, m := range migrations {
		want = append(want, versionRow{uint32(m.Version), m.Name})
	}

	recorded := func(st store.Store) []versionRow {
		var got []versionRow
		require.NoError(t, st.Select(ctx, &got, "SELECT version, name FROM schema_migrations ORDER BY version"))
		return got
	}

	st := open(t)
	require.Equal(t, want, recorded(st), "store.Open records each migration once")

	var tables []struct {
		Name string `ch:"name"`
	}
	require.NoError(t, st.Select(ctx, &tables, "SELECT name FROM system.tables WHERE database = currentDatabase() ORDER BY name"))
	var names []string
	for _, tb := range tables {
		names = append(names, tb.Name)
	}
	wantNames := append([]string{"schema_migrations"}, Tables...)
	sort.Strings(wantNames)
	require.Equal(t, wantNames, names)

	again, err := store.Migrate(ctx, st)
	require.NoError(t, err)
	require.Empty(t, again, "a second Migrate applies nothing")
	require.NoError(t, st.Close())

	reopened := open(t)
	require.Equal(t, want, recorded(reopened), "a reopen neither reapplies nor re-records migrations")
}

// roundTrip inserts rows and reads them back in the order of orderBy.
func roundTrip[R store.Row](t *testing.T, st store.Store, rows []R, orderBy string) {
	t.Helper()
	ctx := ctxFor(t)
	require.NoError(t, store.Insert(ctx, st, rows))
	var zero R
	var got []R
	require.NoError(t, st.Select(ctx, &got, "SELECT * FROM "+zero.TableName()+" ORDER BY "+orderBy))
	require.Equal(t, rows, got)
}

// Values that test the edges of each type.
const (
	maxU64   = uint64(math.MaxUint64)
	maxU32   = uint32(math.MaxUint32)
	tsMs     = uint64(1767225600123) // 2026-01-01T00:00:00.123Z
	unicode  = "GPU ü — 日本語 🚀"
	quotes   = `it's "quoted" \ back\slash; '' -- not a comment ? /* */`
	controls = "tab\tnew\nline\rcr\x00nul\x01"
)

func testRoundTrip(t *testing.T, open Opener) {
	st := open(t)
	tests := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"gpu_samples", func(t *testing.T) {
			roundTrip(t, st, []store.GPUSample{
				{TsMs: tsMs, Pod: "pod-0", GPU: 0, GPUUUID: "GPU-0", RunID: "r1", JobID: "j1", Seq: 0,
					MemUsed: 0, MemTotal: 0, ProcMem: 0, Util: 0, Power: 0, Simulated: 0},
				{TsMs: tsMs + 1, Pod: unicode, GPU: maxU32, GPUUUID: quotes, RunID: controls, JobID: "j1", Seq: maxU64,
					MemUsed: maxU64 - 1, MemTotal: maxU64, ProcMem: 1 << 53, Util: 0.1, Power: 699.99, Simulated: 1},
				{TsMs: maxU64, Pod: "", GPU: 7, JobID: "j2", Seq: 1,
					MemUsed: 1<<53 + 1, MemTotal: 141 << 30, Util: math.SmallestNonzeroFloat64, Power: math.MaxFloat64, Simulated: 255},
			}, "job_id, gpu, seq")
		}},
		{"requests", func(t *testing.T) {
			roundTrip(t, st, []store.Request{
				{TsMs: tsMs, SubmissionID: "s1", JobID: "j1", RunID: "r1", Workload: "chat", Seq: 1, PromptTokens: 512,
					OutputTokens: 128, TTFTMs: 12.5, ITLP50Ms: 3.25, ITLP99Ms: 9.875, E2EMs: 1234.5678, OK: 1},
				{TsMs: tsMs, SubmissionID: "s1", JobID: "j1", RunID: "r1", Workload: "chat", Seq: maxU32,
					TTFTMs: -0.5, ITLP50Ms: 1e-9, ITLP99Ms: 1e300, E2EMs: 2.0 / 3.0, OK: 0, Error: quotes + controls, Simulated: 1},
			}, "job_id, workload, seq")
		}},
		{"quality_items", func(t *testing.T) {
			roundTrip(t, st, []store.QualityItem{
				{TsMs: tsMs, Campaign: "c1", Suite: "gsm8k", SuiteVersion: "v1", SubmissionID: "s1", Role: "bf16",
					Domain: "Arith", ItemID: "q-1", Sample: 0, Score: 1, Formatted: 1, OutputTokens: 300},
				{TsMs: tsMs, Campaign: "c1", Suite: "gsm8k", SuiteVersion: "v1", SubmissionID: "s1", Role: "candidate",
					Domain: unicode, ItemID: quotes, Sample: maxU32, Score: 0.3333333333333333, Simulated: 1},
			}, "campaign, suite_version, submission_id, domain, item_id, sample")
		}},
		{"stage_results", func(t *testing.T) {
			roundTrip(t, st, []store.StageResult{
				{TsMs: tsMs, SubmissionID: "s1", Stage: "build", Status: "ok", EventID: "e1",
					StartedMs: tsMs - 5000, FinishedMs: tsMs, Payload: `{"a":1,"b":"x'y\"z"}`},
				{TsMs: maxU64, SubmissionID: "s1", Stage: "quality", Status: "failed", Reason: "timeout",
					Message: unicode + controls, EventID: "e2", StartedMs: maxU64, FinishedMs: 0, Payload: "{}"},
			}, "submission_id, stage, event_id")
		}},
		{"scores", func(t *testing.T) {
			roundTrip(t, st, []store.Score{
				{TsMs: tsMs, SubmissionID: "s1", Policy: "p1", Campaign: "c1", TaskID: "t1", Participant: unicode,
					Method: "awq", Split: "dev", Score: 87.125, EfficiencyGain: 1.9999999999999998, Drift: -0.015625,
					Qualified: 1, Ranked: 1, Payload: `{"dev_score":87.125}`},
				{TsMs: tsMs, SubmissionID: "s2", Policy: "p1", Participant: quotes, Score: 0, Drift: 1e-308, Reason: controls},
			}, "submission_id, policy")
		}},
		{"round_steps", func(t *testing.T) {
			roundTrip(t, st, []store.RoundStep{
				{TsMs: tsMs, RoundID: "r1", Step: 0, Name: "open", Phase: "intake", Role: "host", EntryID: "",
					Status: "done", StartedMs: tsMs, FinishedMs: tsMs + 1, Detail: unicode},
				{TsMs: tsMs, RoundID: "r1", Step: maxU32, Name: quotes, Phase: "score", Role: "scorer", EntryID: "e1",
					Status: "running", StartedMs: maxU64, Detail: controls},
			}, "round_id, step")
		}},
		{"gpu_seconds", func(t *testing.T) {
			roundTrip(t, st, []store.GPUSeconds{
				{TsMs: tsMs, SubmissionID: "s1", JobID: "j1", Attempt: 1, Kind: "efficiency", Pod: "pod-0", Status: "completed",
					HeldS: 441.125, ServingS: 31.5, EngineStartS: 400.25, LoadingS: 160.1, GraphCaptureS: 100, OtherStartS: 140.15,
					Starts: 5, CachedStarts: 1, Simulated: 1},
				{TsMs: maxU64, SubmissionID: "s2", RoundID: unicode, JobID: quotes, Attempt: maxU32, Kind: "quality", Status: "failed",
					HeldS: 1e-9, ServingS: 0, EngineStartS: 2.0 / 3.0, OtherStartS: 2.0 / 3.0, Starts: maxU32},
			}, "submission_id, job_id, attempt")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, tt.run)
	}
}

func testBind(t *testing.T, open Opener) {
	st := open(t)
	ctx := ctxFor(t)
	evil := `x' OR 1=1 OR '' = '`
	rows := []store.StageResult{
		{TsMs: tsMs, SubmissionID: "plain", Stage: "build", Status: "ok", EventID: "e1"},
		{TsMs: tsMs, SubmissionID: evil, Stage: "build", Status: "ok", EventID: "e2"},
		{TsMs: tsMs, SubmissionID: quotes, Stage: "build", Status: "failed", EventID: "e3"},
		{TsMs: tsMs, SubmissionID: unicode + controls, Stage: "build", Status: "ok", EventID: "e4"},
	}
	require.NoError(t, store.Insert(ctx, st, rows))

	type idRow struct {
		EventID string `ch:"event_id"`
	}
	tests := []struct {
		name  string
		query string
		args  []any
		want  []string
	}{
		{"plain", "SELECT event_id FROM stage_results WHERE submission_id = ? ORDER BY event_id", []any{"plain"}, []string{"e1"}},
		{"injection is a value", "SELECT event_id FROM stage_results WHERE submission_id = ? ORDER BY event_id", []any{evil}, []string{"e2"}},
		{"injection prefix matches nothing", "SELECT event_id FROM stage_results WHERE submission_id = ? ORDER BY event_id", []any{"x"}, nil},
		{"quotes and comments", "SELECT event_id FROM stage_results WHERE submission_id = ? ORDER BY event_id", []any{quotes}, []string{"e3"}},
		{"unicode and control bytes", "SELECT event_id FROM stage_results WHERE submission_id = ? ORDER BY event_id", []any{unicode + controls}, []string{"e4"}},
		{"two args", "SELECT event_id FROM stage_results WHERE status = ? AND ts_ms = ? ORDER BY event_id", []any{"ok", tsMs}, []string{"e1", "e2", "e4"}},
		{"time as unix ms", "SELECT event_id FROM stage_results WHERE ts_ms = ? AND status = 'failed'", []any{time.UnixMilli(int64(tsMs))}, []string{"e3"}},
		{"slice with IN", "SELECT event_id FROM stage_results WHERE has(?, submission_id) ORDER BY event_id", []any{[]string{"plain", evil, "nope"}}, []string{"e1", "e2"}},
		{"? inside a literal is text", "SELECT event_id FROM stage_results WHERE submission_id != '?' AND submission_id = ? ORDER BY event_id", []any{"plain"}, []string{"e1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []idRow
			require.NoError(t, st.Select(ctx, &got, tt.query, tt.args...))
			var ids []string
			for _, r := range got {
				ids = append(ids, r.EventID)
			}
			require.Equal(t, tt.want, ids)
		})
	}

	// Exec binds the same way: the evil value is stored as it is.
	require.NoError(t, st.Exec(ctx,
		"INSERT INTO stage_results (ts_ms, submission_id, stage, status, event_id) SELECT ?, ?, 'build', 'ok', ?",
		tsMs, evil, "e5"))
	require.Equal(t, uint64(len(rows)+1), count(t, st, "SELECT count() AS n FROM stage_results"))
	require.Equal(t, uint64(2), count(t, st, "SELECT count() AS n FROM stage_results WHERE submission_id = ?", evil))
}

func testDedup(t *testing.T, open Opener) {
	st := open(t)
	ctx := ctxFor(t)
	var batch []store.GPUSample
	for i := range 100 {
		batch = append(batch, store.GPUSample{TsMs: tsMs + uint64(i), Pod: "p", GPU: uint32(i % 4), JobID: "j", Seq: uint64(i), MemUsed: uint64(i)})
	}
	require.NoError(t, store.Insert(ctx, st, batch))
	require.NoError(t, store.Insert(ctx, st, batch), "a redelivered batch")
	require.Equal(t, uint64(len(batch)), count(t, st, "SELECT count() AS n FROM gpu_samples FINAL"))
	require.GreaterOrEqual(t, count(t, st, "SELECT count() AS n FROM gpu_samples"), uint64(len(batch)))
	require.Equal(t, uint64(len(batch)), count(t, st, "SELECT uniqExact(job_id, gpu, seq) AS n FROM gpu_samples"))

	// A versioned table keeps the row with the highest version (ts_ms).
	first := store.Score{TsMs: tsMs, SubmissionID: "s1", Policy: "p1", Score: 1}
	second := store.Score{TsMs: tsMs + 1000, SubmissionID: "s1", Policy: "p1", Score: 2}
	require.NoError(t, store.Insert(ctx, st, []store.Score{second}))
	require.NoError(t, store.Insert(ctx, st, []store.Score{first, first}))
	var got []store.Score
	require.NoError(t, st.Select(ctx, &got, "SELECT * FROM scores FINAL WHERE submission_id = ?", "s1"))
	require.Equal(t, []store.Score{second}, got)
}

func testBadAppend(t *testing.T, open Opener) {
	st := open(t)
	ctx := ctxFor(t)
	gpuCols := []string{"ts_ms", "pod", "seq"}
	good := []any{tsMs, "p", uint64(1)}
	type weird struct{ A int }
	tests := []struct {
		name    string
		table   string
		columns []string
		rows    [][]any
		badRows bool // the error wraps store.ErrBadRows (checked before the engine sees it)
	}{
		{"unknown table", "no_such_table", gpuCols, [][]any{good}, false},
		{"unknown column", "gpu_samples", []string{"ts_ms", "no_such_column"}, [][]any{{tsMs, "x"}}, false},
		{"too few values", "gpu_samples", gpuCols, [][]any{good, {tsMs, "p"}}, true},
		{"too many values", "gpu_samples", gpuCols, [][]any{{tsMs, "p", uint64(1), uint64(2)}}, true},
		{"no columns", "gpu_samples", nil, [][]any{{}}, true},
		{"duplicate column", "gpu_samples", []string{"seq", "seq"}, [][]any{{uint64(1), uint64(2)}}, true},
		{"table is SQL", "gpu_samples; DROP TABLE scores", gpuCols, [][]any{good}, true},
		{"column is SQL", "gpu_samples", []string{"ts_ms) SELECT 1 --"}, [][]any{{tsMs}}, true},
		{"NaN", "gpu_samples", []string{"ts_ms", "util"}, [][]any{{tsMs, math.NaN()}}, true},
		{"infinity", "gpu_samples", []string{"ts_ms", "power"}, [][]any{{tsMs, math.Inf(1)}}, true},
		{"string into UInt64", "gpu_samples", gpuCols, [][]any{{"not a number", "p", uint64(1)}}, false},
		{"struct into String", "gpu_samples", gpuCols, [][]any{{tsMs, weird{1}, uint64(1)}}, false},
		{"negative into UInt64", "gpu_samples", gpuCols, [][]any{{-1, "p", uint64(1)}}, false},
		{"overflow into UInt32", "gpu_samples", []string{"ts_ms", "gpu"}, [][]any{{tsMs, uint64(1) << 40}}, false},
		{"fraction into UInt64", "gpu_samples", gpuCols, [][]any{{1.5, "p", uint64(1)}}, false},
		{"number into String", "gpu_samples", gpuCols, [][]any{{tsMs, 42, uint64(1)}}, false},
		{"nil into UInt64", "gpu_samples", gpuCols, [][]any{{nil, "p", uint64(1)}}, false},
		{"map into UInt64", "gpu_samples", gpuCols, [][]any{{tsMs, "p", map[string]int{"a": 1}}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			require.NotPanics(t, func() { err = st.Append(ctx, tt.table, tt.columns, tt.rows) })
			require.Error(t, err)
			if tt.badRows {
				require.ErrorIs(t, err, store.ErrBadRows)
			}
		})
	}
	require.Zero(t, count(t, st, "SELECT count() AS n FROM gpu_samples"), "no bad batch wrote a row")
	require.Len(t, tablesOf(t, st), len(Tables)+1, "no table was dropped")
	// The store still works after the errors.
	require.NoError(t, st.Append(ctx, "gpu_samples", gpuCols, [][]any{good}))
	require.Equal(t, uint64(1), count(t, st, "SELECT count() AS n FROM gpu_samples"))
	require.NoError(t, st.Append(ctx, "gpu_samples", gpuCols, nil), "no rows is not an error")
}

// testColumns holds AppendColumns, the path store.Insert takes, to what
// Append does: typed columns round-trip, a column whose table type is
// another (gpu is UInt32) is converted as Append converts it and refused
// when it does not fit, and bad batches are refused whole with
// ErrBadRows before anything is written.
func testColumns(t *testing.T, open Opener) {
	st := open(t)
	ctx := ctxFor(t)
	ca, ok := st.(store.ColumnAppender)
	require.True(t, ok, "the back-end takes columns")
	gpu := func(tsMs uint64, gpus any) *store.Columns {
		n := 2
		return &store.Columns{Table: "gpu_samples", Names: []string{"ts_ms", "pod", "job_id", "gpu", "seq", "util"}, Len: n,
			Data: []any{[]uint64{tsMs, tsMs}, []string{"p\t\"x\"", "p\n2"}, []string{"j", "j"}, gpus, []uint64{1, 2}, []float64{0.25, 1e-9}}}
	}
	require.NoError(t, ca.AppendColumns(ctx, gpu(tsMs, []uint32{3, 4294967295})))
	require.NoError(t, ca.AppendColumns(ctx, gpu(tsMs+1, []uint64{5, 6})), "uint64 values that fit a UInt32 column")
	var got []struct {
		Pod  string  `ch:"pod"`
		GPU  uint32  `ch:"gpu"`
		Util float64 `ch:"util"`
	}
	require.NoError(t, st.Select(ctx, &got, "SELECT pod, gpu, util FROM gpu_samples ORDER BY ts_ms, seq"))
	require.Len(t, got, 4)
	require.Equal(t, "p\t\"x\"", got[0].Pod, "strings come back byte for byte")
	require.Equal(t, "p\n2", got[1].Pod)
	require.Equal(t, []uint32{3, 4294967295, 5, 6}, []uint32{got[0].GPU, got[1].GPU, got[2].GPU, got[3].GPU})
	require.InDelta(t, 1e-9, got[1].Util, 1e-18)

	bad := []struct {
		name string
		c    *store.Columns
	}{
		{"a value past its column", gpu(tsMs+2, []uint64{7, 1 << 40})},
		{"NaN", &store.Columns{Table: "gpu_samples", Names: []string{"ts_ms", "util"}, Len: 1, Data: []any{[]uint64{tsMs}, []float64{math.NaN()}}}},
		{"a short column", &store.Columns{Table: "gpu_samples", Names: []string{"ts_ms", "seq"}, Len: 2, Data: []any{[]uint64{tsMs, tsMs}, []uint64{1}}}},
		{"a column of another type", &store.Columns{Table: "gpu_samples", Names: []string{"ts_ms"}, Len: 1, Data: []any{[]int{1}}}},
		{"data for fewer columns than named", &store.Columns{Table: "gpu_samples", Names: []string{"ts_ms", "seq"}, Len: 1, Data: []any{[]uint64{1}}}},
		{"a table name that is no identifier", &store.Columns{Table: "gpu_samples; DROP TABLE scores", Names: []string{"ts_ms"}, Len: 1, Data: []any{[]uint64{1}}}},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			err := ca.AppendColumns(ctx, tc.c)
			require.ErrorIs(t, err, store.ErrBadRows)
		})
	}
	require.Error(t, ca.AppendColumns(ctx, &store.Columns{Table: "gpu_samples", Names: []string{"no_such_column"}, Len: 1, Data: []any{[]uint64{1}}}))
	require.Equal(t, uint64(4), count(t, st, "SELECT count() AS n FROM gpu_samples"), "no bad batch wrote a row")
	require.Len(t, tablesOf(t, st), len(Tables)+1, "no table was dropped")
}

func tablesOf(t *testing.T, st store.Store) []string {
	var rows []struct {
		Name string `ch:"name"`
	}
	require.NoError(t, st.Select(ctxFor(t), &rows, "SELECT name FROM system.tables WHERE database = currentDatabase()"))
	var out []string
	for _, r := range rows {
		out = append(out, r.Name)
	}
	return out
}

func testBadQuery(t *testing.T, open Opener) {
	st := open(t)
	ctx := ctxFor(t)
	var dest []countRow
	tests := []struct {
		name    string
		run     func() error
		bindErr bool
	}{
		{"select syntax error", func() error { return st.Select(ctx, &dest, "SELEKT 1") }, false},
		{"select unknown table", func() error { return st.Select(ctx, &dest, "SELECT count() AS n FROM no_such_table") }, false},
		{"exec syntax error", func() error { return st.Exec(ctx, "CREATE TABLE (") }, false},
		{"too few args", func() error { return st.Select(ctx, &dest, "SELECT ? AS n, ? AS m", 1) }, true},
		{"too many args", func() error { return st.Exec(ctx, "SELECT 1", 1) }, true},
		{"NaN arg", func() error {
			return st.Select(ctx, &dest, "SELECT count() AS n FROM scores WHERE score = ?", math.NaN())
		}, true},
		{"unsupported arg", func() error { return st.Select(ctx, &dest, "SELECT ? AS n", struct{}{}) }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			require.NotPanics(t, func() { err = tt.run() })
			require.Error(t, err)
			if tt.bindErr {
				require.ErrorIs(t, err, store.ErrBind)
			} else {
				require.NotErrorIs(t, err, store.ErrBind)
			}
		})
	}
	require.Equal(t, uint64(0), count(t, st, "SELECT count() AS n FROM scores"), "the store still answers")
}

func testBadDest(t *testing.T, open Opener) {
	st := open(t)
	ctx := ctxFor(t)
	require.NoError(t, store.Insert(ctx, st, []store.GPUSample{{TsMs: tsMs, Pod: "p", JobID: "j", Seq: 1, MemUsed: maxU64}}))
	const q = "SELECT pod, mem_used, util FROM gpu_samples"

	var (
		ints     []int
		notSlice struct{ Pod string }
		nilPtr   *[]store.GPUSample
		podAsInt []struct {
			Pod uint32 `ch:"pod"`
		}
		memAsU8 []struct {
			MemUsed uint8 `ch:"mem_used"`
		}
		memAsStr []struct {
			MemUsed string `ch:"mem_used"`
		}
	)
	tests := []struct {
		name string
		dest any
		dst  bool // the error wraps rowscan's ErrDest (checked before the query runs)
	}{
		{"nil", nil, true},
		{"nil pointer", nilPtr, true},
		{"not a pointer", []store.GPUSample{}, true},
		{"pointer to a struct", &notSlice, true},
		{"pointer to a slice of ints", &ints, true},
		{"string column into a uint field", &podAsInt, false},
		{"UInt64 max into a uint8 field", &memAsU8, false},
		{"UInt64 into a string field", &memAsStr, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			require.NotPanics(t, func() { err = st.Select(ctx, tt.dest, q) })
			require.Error(t, err)
			if tt.dst {
				require.ErrorContains(t, err, "bad Select destination")
			}
		})
	}
	require.Empty(t, podAsInt, "a failed Select leaves the destination as it was")

	// Fields without a column keep their zero value; columns without a
	// field are ignored; the destination's old rows are replaced.
	partial := []struct {
		Pod     string  `ch:"pod"`
		Missing string  `ch:"missing"`
		Util    float64 // untagged: never set
		MemUsed uint64  `ch:"mem_used"`
	}{{Pod: "old"}, {Pod: "older"}}
	require.NoError(t, st.Select(ctx, &partial, q))
	require.Len(t, partial, 1)
	require.Equal(t, "p", partial[0].Pod)
	require.Equal(t, maxU64, partial[0].MemUsed)
	require.Empty(t, partial[0].Missing)
	require.Zero(t, partial[0].Util)

	var none []store.GPUSample
	require.NoError(t, st.Select(ctx, &none, "SELECT * FROM gpu_samples WHERE pod = ?", "nobody"))
	require.Empty(t, none)
}

func testConcurrent(t *testing.T, open Opener) {
	st := open(t)
	ctx := ctxFor(t)
	const workers, perWorker = 6, 50
	var wg sync.WaitGroup
	errs := make(chan error, 2*workers)
	for w := range workers {
		wg.Add(2)
		go func() {
			defer wg.Done()
			rows := make([]store.GPUSample, perWorker)
			for i := range rows {
				rows[i] = store.GPUSample{TsMs: tsMs, JobID: fmt.Sprintf("job-%d", w), GPU: uint32(w), Seq: uint64(i)}
			}
			errs <- store.Insert(ctx, st, rows)
		}()
		go func() {
			defer wg.Done()
			var out []countRow
			errs <- st.Select(ctx, &out, "SELECT count() AS n FROM gpu_samples WHERE gpu = ?", w)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, uint64(workers*perWorker), count(t, st, "SELECT count() AS n FROM gpu_samples FINAL"))
	require.Equal(t, uint64(workers), count(t, st, "SELECT uniqExact(job_id) AS n FROM gpu_samples"))
}

func testClosed(t *testing.T, open Opener) {
	st := open(t)
	ctx := ctxFor(t)
	require.NotEmpty(t, st.Engine())
	require.NoError(t, st.Close())
	require.NoError(t, st.Close(), "closing twice is a no-op")
	var out []countRow
	tests := []struct {
		name string
		run  func() error
	}{
		{"Append", func() error {
			return st.Append(ctx, "gpu_samples", []string{"ts_ms"}, [][]any{{tsMs}})
		}},
		{"Select", func() error { return st.Select(ctx, &out, "SELECT 1 AS n") }},
		{"Exec", func() error { return st.Exec(ctx, "SELECT 1") }},
		{"Migrate", func() error { _, err := store.Migrate(ctx, st); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			require.NotPanics(t, func() { err = tt.run() })
			require.ErrorIs(t, err, store.ErrClosed)
		})
	}
	require.NotEmpty(t, st.Engine(), "Engine still answers after Close")
}
