package storetest

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/store"
)

// tableLimits are generous limits for the table cases.
var tableLimits = store.Limits{MaxRows: 100, MaxBytes: 1 << 20, MaxSeconds: 30, ReadOnly: true}

// testTable checks QueryTable: the same JSON for the same values on every
// back-end, rows and bytes cut at their limits, the time limit enforced by
// the engine, and a store that answers every later statement rightly
// after a failed one (chDB hands a failed statement's partial output to the
// next one unless the adapter takes it away).
func testTable(t *testing.T, open Opener) {
	st := open(t)
	tab, ok := st.(store.Tabler)
	require.True(t, ok, "%T answers arbitrary queries as tables", st)
	ctx := ctxFor(t)

	t.Run("values", func(t *testing.T) {
		got, err := tab.QueryTable(ctx, `SELECT toUInt64(18446744073709551615) AS u, toInt32(-5) AS i, 1.5 AS f, nan AS n, -inf AS ni,
 'a"b\'c' AS s, toDate('2026-01-02') AS d, toDateTime(86400, 'UTC') AS t, [1, 2] AS a, NULL AS z, 1 = 1 AS b`, tableLimits)
		require.NoError(t, err)
		var names []string
		for _, c := range got.Columns {
			names = append(names, c.Name)
		}
		require.Equal(t, []string{"u", "i", "f", "n", "ni", "s", "d", "t", "a", "z", "b"}, names)
		require.Equal(t, "UInt64", got.Columns[0].Type)
		require.Equal(t, "Date", got.Columns[6].Type)
		require.Len(t, got.Rows, 1)
		require.Empty(t, got.Cut)
		want := []string{`18446744073709551615`, `-5`, `1.5`, `"nan"`, `"-inf"`, `"a\"b'c"`, `"2026-01-02"`, `"1970-01-02 00:00:00"`, `[1,2]`, `null`, `1`}
		for i, w := range want {
			require.JSONEq(t, w, string(got.Rows[0][i]), "column %s", names[i])
		}
	})

	require.NoError(t, store.Insert(ctx, st, []store.GPUSample{
		{TsMs: tsMs, Pod: "p", JobID: "j", Seq: 1, MemUsed: 10},
		{TsMs: tsMs + 1, Pod: "p", JobID: "j", Seq: 2, MemUsed: 20},
		{TsMs: tsMs + 2, Pod: "p", JobID: "j", Seq: 3, MemUsed: 30},
	}))
	const q = "SELECT seq, mem_used FROM gpu_samples ORDER BY seq"
	cases := []struct {
		name    string
		lim     store.Limits
		rows    int
		cut     string
		lastSeq string
	}{
		{"whole", tableLimits, 3, "", "3"},
		{"rows cut", store.Limits{MaxRows: 2, MaxBytes: 1 << 20, MaxSeconds: 30}, 2, store.CutRows, "2"},
		{"exactly the rows", store.Limits{MaxRows: 3, MaxBytes: 1 << 20, MaxSeconds: 30}, 3, "", "3"},
		{"bytes cut", store.Limits{MaxRows: 100, MaxBytes: 10, MaxSeconds: 30}, 1, store.CutBytes, "1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tab.QueryTable(ctx, q, tc.lim)
			require.NoError(t, err)
			require.Len(t, got.Rows, tc.rows)
			require.Equal(t, tc.cut, got.Cut)
			require.Equal(t, tc.lastSeq, string(got.Rows[len(got.Rows)-1][0]))
		})
	}

	t.Run("no rows still names the columns", func(t *testing.T) {
		got, err := tab.QueryTable(ctx, "SELECT seq FROM gpu_samples WHERE seq > 100", tableLimits)
		require.NoError(t, err)
		require.Equal(t, []store.Column{{Name: "seq", Type: "UInt64"}}, got.Columns)
		require.Empty(t, got.Rows)
		require.NotNil(t, got.Rows)
	})

	t.Run("bad limits", func(t *testing.T) {
		_, err := tab.QueryTable(ctx, "SELECT 1", store.Limits{MaxRows: 1})
		require.ErrorIs(t, err, store.ErrBadLimits)
	})

	t.Run("the engine stops a statement at its time limit", func(t *testing.T) {
		_, err := tab.QueryTable(ctx, "SELECT count() FROM numbers(100000000000)", store.Limits{MaxRows: 10, MaxBytes: 1 << 20, MaxSeconds: 1})
		require.Error(t, err)
		require.Contains(t, err.Error(), "159", "TIMEOUT_EXCEEDED: %v", err)
	})

	t.Run("the statement runs under its limits", func(t *testing.T) {
		const q = "SELECT name, value FROM system.settings WHERE name IN ('readonly', 'max_execution_time') ORDER BY name"
		for _, ro := range []bool{true, false} {
			got, err := tab.QueryTable(ctx, q, store.Limits{MaxRows: 10, MaxBytes: 1 << 20, MaxSeconds: 7, ReadOnly: ro})
			require.NoError(t, err)
			want := `"0"`
			if ro {
				want = `"1"`
			}
			require.Equal(t, [][]json.RawMessage{{json.RawMessage(`"max_execution_time"`), json.RawMessage(`"7"`)},
				{json.RawMessage(`"readonly"`), json.RawMessage(want)}}, got.Rows)
		}
	})

	t.Run("later statements answer rightly after failures", func(t *testing.T) {
		// An exception in the middle of the rows, after some output.
		// The first block of rows is written before the second throws.
		_, err := tab.QueryTable(ctx, "SELECT throwIf(number = 70000) AS x FROM numbers(100000)",
			store.Limits{MaxRows: 100000, MaxBytes: 1 << 20, MaxSeconds: 30, ReadOnly: true})
		require.Error(t, err)
		got, err := tab.QueryTable(ctx, "SELECT 42 AS answer", tableLimits)
		require.NoError(t, err)
		require.Equal(t, []store.Column{{Name: "answer", Type: "UInt8"}}, got.Columns)
		require.Equal(t, [][]json.RawMessage{{json.RawMessage("42")}}, got.Rows)
		_, err = tab.QueryTable(ctx, "SELECT count() FROM numbers(100000000000)", store.Limits{MaxRows: 10, MaxBytes: 1 << 20, MaxSeconds: 1})
		require.Error(t, err)
		require.Equal(t, uint64(3), count(t, st, "SELECT count() AS n FROM gpu_samples"), "Select after a timeout")
		require.NoError(t, st.Exec(ctx, "CREATE TABLE IF NOT EXISTS x_rw (a UInt8) ENGINE = Memory"), "readonly lasted one statement")
		require.NoError(t, st.Exec(ctx, "DROP TABLE x_rw"))
	})
}
