package query_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/store"
	_ "github.com/lowbarena/lowbarena/platform/store/chdb"
	_ "github.com/lowbarena/lowbarena/platform/store/clickhouse"
	"github.com/lowbarena/lowbarena/platform/store/clickhouse/chtest"
	"github.com/lowbarena/lowbarena/platform/store/query"
	"github.com/lowbarena/lowbarena/platform/store/storetest"
)

// backends opens the arena's store on chDB and on a ClickHouse server.
func backends(t *testing.T) map[string]store.Store {
	t.Helper()
	ctx := context.Background()
	out := map[string]store.Store{}
	ch, err := store.Open(ctx, "chdb://"+t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = ch.Close() })
	out["chdb"] = ch
	srv, err := store.Open(ctx, "clickhouse://"+chtest.Start(t)+"/"+storetest.DatabaseName(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	out["clickhouse"] = srv
	for _, st := range out {
		require.NoError(t, store.Insert(ctx, st, []store.Score{
			{TsMs: 1_700_000_000_000, SubmissionID: "a1", Policy: "lowb-score/v1", Campaign: "qwen3-tiny", Participant: "p", Method: "fp8", Split: "dev", Score: 0.16, Qualified: 1},
			{TsMs: 1_700_000_001_000, SubmissionID: "b2", Policy: "lowb-score/v1", Campaign: "qwen3-tiny", Participant: "p", Method: "int4", Split: "dev", Score: 0.21},
		}))
	}
	return out
}

func TestServiceRun(t *testing.T) {
	for name, st := range backends(t) {
		t.Run(name, func(t *testing.T) {
			svc, err := query.New(st, 0)
			require.NoError(t, err)
			ctx := context.Background()

			res, err := svc.Run(ctx, "-- the leaderboard\nSELECT submission_id, score, qualified FROM scores FINAL WHERE policy = 'lowb-score/v1' ORDER BY qualified DESC, score DESC;", query.Options{})
			require.NoError(t, err)
			require.Equal(t, query.KindSelect, res.Kind)
			require.Equal(t, []store.Column{{Name: "submission_id", Type: "String"}, {Name: "score", Type: "Float64"}, {Name: "qualified", Type: "UInt8"}}, res.Table.Columns)
			require.Equal(t, [][]json.RawMessage{{json.RawMessage(`"a1"`), json.RawMessage(`0.16`), json.RawMessage(`1`)},
				{json.RawMessage(`"b2"`), json.RawMessage(`0.21`), json.RawMessage(`0`)}}, res.Table.Rows)
			require.Equal(t, query.DefaultMaxRows, res.MaxRows)
			require.Equal(t, query.DefaultTimeout, res.Timeout)
			require.Equal(t, st.Engine(), res.Engine)

			res, err = svc.Run(ctx, "SELECT number FROM system.numbers", query.Options{MaxRows: 5})
			require.NoError(t, err)
			require.Len(t, res.Table.Rows, 5)
			require.Equal(t, store.CutRows, res.Table.Cut)

			res, err = svc.Run(ctx, "SHOW TABLES", query.Options{})
			require.NoError(t, err)
			require.Equal(t, query.KindShow, res.Kind)
			var tables []string
			for _, r := range res.Table.Rows {
				var s string
				require.NoError(t, json.Unmarshal(r[0], &s))
				tables = append(tables, s)
			}
			require.Subset(t, tables, storetest.Tables)

			res, err = svc.Run(ctx, "DESCRIBE TABLE scores", query.Options{})
			require.NoError(t, err)
			require.Equal(t, query.KindDescribe, res.Kind)
			require.Equal(t, `"ts_ms"`, string(res.Table.Rows[0][0]))
		})
	}
}

func TestServiceRefuses(t *testing.T) {
	for name, st := range backends(t) {
		t.Run(name, func(t *testing.T) {
			svc, err := query.New(st, 0)
			require.NoError(t, err)
			cases := []struct {
				name string
				sql  string
				o    query.Options
				code reason.Code
				says string
			}{
				{"a write", "INSERT INTO scores (submission_id) VALUES ('x')", query.Options{}, reason.SQLNotReadOnly, "not read-only"},
				{"file()", "SELECT * FROM file('/etc/passwd', 'LineAsString')", query.Options{}, reason.SQLExternalFunction, "file()"},
				{"past its limit", "SELECT count() FROM numbers(100000000000)", query.Options{Timeout: time.Second}, reason.SQLTimeout, "limit of 1s"},
				{"a syntax error", "SELECT FROM WHERE", query.Options{}, reason.SQLSyntaxError, "cannot parse"},
				{"an unknown table", "SELECT * FROM no_such_table", query.Options{}, reason.SQLUnknownName, "no_such_table"},
				{"malformed", "SELECT 'abc", query.Options{}, reason.SQLMalformed, "not closed"},
				{"too many rows asked", "SELECT 1", query.Options{MaxRows: query.MaxMaxRows + 1}, reason.SQLBadLimits, "max rows"},
				{"too long a timeout", "SELECT 1", query.Options{Timeout: 2 * query.MaxTimeout}, reason.SQLBadLimits, "timeout"},
				{"a fraction of a second", "SELECT 1", query.Options{Timeout: 1500 * time.Millisecond}, reason.SQLBadLimits, "whole seconds"},
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					_, err := svc.Run(context.Background(), tc.sql, tc.o)
					var qe *query.Error
					require.True(t, errors.As(err, &qe), "a refusal: %v", err)
					require.Equal(t, tc.code, qe.Code, qe.Message)
					require.Contains(t, qe.Message, tc.says)
					require.NotContains(t, qe.Message, "store: chdb", "the sentence is the engine's, not the adapter's")
				})
			}
			// The store still answers, and nothing was written.
			res, err := svc.Run(context.Background(), "SELECT count() AS n FROM scores", query.Options{})
			require.NoError(t, err)
			require.Equal(t, "2", string(res.Table.Rows[0][0]))
		})
	}
}

func TestNewRefusesAStoreWithoutTables(t *testing.T) {
	_, err := query.New(nil, 0)
	var qe *query.Error
	require.True(t, errors.As(err, &qe))
	require.Equal(t, reason.SQLNoStore, qe.Code)
}
