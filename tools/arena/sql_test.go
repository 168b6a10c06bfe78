package main

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/platform/ctl"
	"github.com/lowbarena/lowbarena/platform/store"
	_ "github.com/lowbarena/lowbarena/platform/store/clickhouse"
	"github.com/lowbarena/lowbarena/platform/store/clickhouse/chtest"
	"github.com/lowbarena/lowbarena/services/score"
)

// reply is an answer with the awkward values: quotes, commas, tabs and
// line breaks in strings, NULL, a 64-bit integer, NaN, an array.
func reply() ctl.SQLReply {
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	return ctl.SQLReply{Kind: "select",
		Columns: []ctl.SQLColumn{{Name: "id", Type: "String"}, {Name: "n", Type: "UInt64"}, {Name: "score", Type: "Nullable(Float64)"}, {Name: "tags", Type: "Array(String)"}},
		Rows: [][]json.RawMessage{
			{raw(`"a,\"b\""`), raw(`18446744073709551615`), raw(`0.1661`), raw(`["x", "y"]`)},
			{raw(`"tab\there\nline"`), raw(`7`), raw(`null`), raw(`[]`)},
			{raw(`"é"`), raw(`0`), raw(`"nan"`), raw(`["z"]`)},
		}, MaxRows: 1000, TimeoutSeconds: 10, ElapsedMs: 1.5, Engine: "chdb 26.7.2.1"}
}

func TestSQLOutput(t *testing.T) {
	t.Run("aligned", func(t *testing.T) {
		var b bytes.Buffer
		require.NoError(t, writeAligned(&b, reply()))
		want := "" +
			"id" + strings.Repeat(" ", 13+2+19) + "n   score  tags\n" +
			"---------------  --------------------  ------  ---------\n" +
			`a,"b"            18446744073709551615  0.1661  ["x","y"]` + "\n" +
			`tab\there\nline                     7    NULL  []` + "\n" +
			"é                                   0     nan  [\"z\"]\n"
		require.Equal(t, want, b.String())
	})
	t.Run("a long value is cut in the table only", func(t *testing.T) {
		long := strings.Repeat("x", 100)
		rep := ctl.SQLReply{Columns: []ctl.SQLColumn{{Name: "s", Type: "String"}}, Rows: [][]json.RawMessage{{json.RawMessage(`"` + long + `"`)}}}
		var b bytes.Buffer
		require.NoError(t, writeAligned(&b, rep))
		require.Contains(t, b.String(), strings.Repeat("x", maxCell-1)+"…\n")
		b.Reset()
		require.NoError(t, ctl.WriteCSV(&b, rep))
		require.Contains(t, b.String(), long)
	})
}

// liveQueryService runs what `arena up` runs for `arena sql`, without the
// embedded engine: a NATS server with the arena's streams and the query
// service over a ClickHouse server. It returns the NATS URL and the store.
func liveQueryService(t *testing.T) (string, store.Store, *bus.Bus) {
	t.Helper()
	b, srv := bustest.Bus(t)
	ctx, cancel := context.WithCancel(context.Background())
	st, err := store.Open(ctx, "clickhouse://"+chtest.Start(t)+"/light")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { _ = score.ServeSQL(ctx, b.Conn(), st, quietLog()); close(done) }()
	t.Cleanup(func() { cancel(); <-done; _ = st.Close() })
	return srv.ClientURL(), st, b
}

// TestLightCLIWithoutLibchdb runs the participant's arena, built without
// tags, where no libchdb.so can be found (CHDB_LIB_PATH names a missing
// file, and the working folder has no .deps above it): it links neither
// chdb-go nor purego, and sql and show answer from a running arena. The
// arena-up beside it, which links the engine, stops at once with the
// loader's status 3 in the same place: the case the light build avoids.
func TestLightCLIWithoutLibchdb(t *testing.T) {
	info, err := buildinfo.ReadFile(arenaBin)
	require.NoError(t, err)
	for _, d := range info.Deps {
		require.NotContains(t, []string{"github.com/chdb-io/chdb-go", "github.com/ebitengine/purego", "github.com/nats-io/nats-server/v2"}, d.Path,
			"the light arena links %s", d.Path)
	}
	upInfo, err := buildinfo.ReadFile(upBin)
	require.NoError(t, err)
	linked := false
	for _, d := range upInfo.Deps {
		linked = linked || d.Path == "github.com/chdb-io/chdb-go"
	}
	require.True(t, linked, "arena-up links the engine")

	natsURL, st, b := liveQueryService(t)
	ctx := context.Background()
	require.NoError(t, store.Insert(ctx, st, []store.Score{{TsMs: 1_700_000_000_000, SubmissionID: "light01", Policy: "lowb-score/v1",
		Campaign: "qwen3-tiny", Participant: "example-team", Method: "fp8", Split: "dev", Score: 0.25, Qualified: 1}}))
	kv, err := b.JetStream().KeyValue(ctx, bus.BucketSubmissions)
	require.NoError(t, err)
	_, err = kv.Put(ctx, "light01", []byte(`{"id":"light01","status":"running","participant":"example-team","stages":[]}`))
	require.NoError(t, err)

	empty := t.TempDir()
	env := []string{"CHDB_LIB_PATH=" + filepath.Join(empty, "missing", "libchdb.so"), "PATH=/usr/bin:/bin", "HOME=" + empty}
	run := func(bin string, args ...string) (string, string, int) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Dir, cmd.Env = empty, env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		return out.String(), errb.String(), code
	}

	out, errs, code := run(arenaBin, "sql", "SELECT submission_id, score FROM scores FINAL WHERE participant = 'example-team'", "--nats", natsURL)
	require.Equal(t, 0, code, errs)
	require.Equal(t, "submission_id  score\n-------------  -----\nlight01         0.25\n", out[:strings.Index(out, "(")])
	require.Regexp(t, `^\(1 row, [0-9.]+ ms, clickhouse \d+\.\d+\.\d+\)$`, strings.TrimSpace(out[strings.Index(out, "("):]))

	out, errs, code = run(arenaBin, "show", "light01", "--json", "--nats", natsURL)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, `"participant": "example-team"`)

	_, errs, code = run(arenaBin, "sql", "DELETE FROM scores WHERE 1", "--nats", natsURL)
	require.Equal(t, exitFailed, code)
	require.Contains(t, errs, "arena: sql_not_read_only: DELETE is not read-only")

	// up needs arena-up, which is neither beside this copy nor on PATH.
	lone := filepath.Join(empty, "arena")
	raw, err := os.ReadFile(arenaBin)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(lone, raw, 0o755))
	_, errs, code = run(lone, "up", "--data", empty)
	require.Equal(t, exitNoUp, code, errs)
	require.Contains(t, errs, "arena up runs the arena itself, with its embedded ClickHouse engine, which this light arena leaves out")
	require.Contains(t, errs, "make build")

	_, errs, code = run(upBin, "sql", "SELECT 1", "--nats", natsURL)
	require.Equal(t, 3, code, "arena-up needs the library for any verb: %s", errs)
	require.Contains(t, errs, "libchdb.so was not found")
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestSQLArguments(t *testing.T) {
	for _, tc := range []struct {
		name        string
		args        []string
		flags, rest []string
	}{
		{"statement then flags", []string{"SELECT 1", "--json", "--nats", "nats://x:4222"}, []string{"--json", "--nats", "nats://x:4222"}, []string{"SELECT 1"}},
		{"a comment first", []string{"-- the leaderboard\nSELECT 1", "--csv"}, []string{"--csv"}, []string{"-- the leaderboard\nSELECT 1"}},
		{"flags with =", []string{"--timeout=5s", "--max-rows=3", "SHOW TABLES"}, []string{"--timeout=5s", "--max-rows=3"}, []string{"SHOW TABLES"}},
		{"stdin", []string{"-", "--tsv"}, []string{"--tsv"}, []string{"-"}},
		{"after --", []string{"--json", "--", "--max-rows"}, []string{"--json"}, []string{"--max-rows"}},
		{"a negative number", []string{"-1"}, nil, []string{"-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFlagSet("sql", io.Discard)
			natsFlag(fs)
			fs.Bool("json", false, "")
			fs.Bool("csv", false, "")
			fs.Bool("tsv", false, "")
			fs.Int("max-rows", 0, "")
			fs.Duration("timeout", 0, "")
			flags, rest := splitStatement(fs, tc.args)
			require.Equal(t, tc.flags, flags)
			require.Equal(t, tc.rest, rest)
		})
	}
}
