package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/store"
	"github.com/lowbarena/lowbarena/platform/store/clickhouse/chtest"
	"github.com/lowbarena/lowbarena/platform/store/retention"
)

// TestRetentionVerb runs `arena retention` against a ClickHouse server:
// the dry run lists the old day and drops nothing, the run drops it and
// keeps today's rows. (The job's own cases run on both engines in the
// store contract suite.)
func TestRetentionVerb(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := "clickhouse://" + chtest.Start(t) + "/retention_verb"
	st, err := store.Open(ctx, url)
	require.NoError(t, err)
	defer st.Close()
	now := time.Now()
	old := now.Add(-40 * 24 * time.Hour)
	require.NoError(t, store.Insert(ctx, st, []store.GPUSample{
		{TsMs: uint64(old.UnixMilli()), JobID: "old", Seq: 1},
		{TsMs: uint64(old.UnixMilli()) + 1, JobID: "old", Seq: 2},
		{TsMs: uint64(now.UnixMilli()), JobID: "new", Seq: 3},
	}))
	require.NoError(t, store.Insert(ctx, st, []store.Request{{TsMs: uint64(old.UnixMilli()), JobID: "old", Seq: 1}}))
	rows := func(table string) uint64 {
		var n []struct {
			N uint64 `ch:"n"`
		}
		require.NoError(t, st.Select(ctx, &n, "SELECT count() AS n FROM "+table))
		return n[0].N
	}
	day := old.UTC().Format("20060102")

	var out, errOut bytes.Buffer
	require.NoError(t, run(ctx, []string{"retention", "--older-than", "30d", "--dry-run", "--store", url}, &out, &errOut), errOut.String())
	require.Contains(t, out.String(), "gpu_samples  "+day)
	require.Contains(t, out.String(), "gpu_samples: would drop (dry run) 1 partitions, 2 rows")
	require.Contains(t, out.String(), "requests: would drop (dry run) 1 partitions, 1 rows")
	require.Equal(t, uint64(3), rows("gpu_samples"), "a dry run drops nothing")

	t.Setenv(app.EnvStore, url)
	out.Reset()
	require.NoError(t, run(ctx, []string{"retention", "--older-than", "30d", "--json"}, &out, &errOut), errOut.String())
	var rep retention.Report
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	require.False(t, rep.DryRun)
	require.Equal(t, uint64(2), rep.Rows("gpu_samples"))
	require.Equal(t, uint64(1), rep.Rows("requests"))
	require.Equal(t, uint64(1), rows("gpu_samples"), "today's row stays")
	require.Equal(t, uint64(0), rows("requests"))
}

func TestRetentionUsage(t *testing.T) {
	t.Setenv(app.EnvStore, "")
	tests := []struct {
		name string
		args []string
	}{
		{"no store", []string{"--older-than", "30d"}},
		{"age too short", []string{"--older-than", "1h", "--store", "clickhouse://127.0.0.1:1/x"}},
		{"not an age", []string{"--older-than", "month", "--store", "clickhouse://127.0.0.1:1/x"}},
		{"an argument", []string{"now", "--store", "clickhouse://127.0.0.1:1/x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(context.Background(), append([]string{"retention"}, tt.args...), &out, &errOut)
			var ee *exitError
			require.ErrorAs(t, err, &ee)
			require.Equal(t, exitUsage, ee.code, "%v", err)
		})
	}
}
