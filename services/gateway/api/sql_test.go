package api

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/ctl"
	"github.com/lowbarena/lowbarena/platform/store"
	"github.com/lowbarena/lowbarena/platform/store/query"
)

// serveQuery runs the real query service on the fixture's NATS over a
// chDB store holding one score: query.Service behind ctl.SubjectSQL,
// with the refusals mapped as the score component maps them (400 with
// query's reason; 503 when it is busy or has no store).
func serveQuery(t *testing.T, f *fixture) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := store.Open(ctx, "chdb://"+filepath.ToSlash(t.TempDir()))
	require.NoError(t, err)
	require.NoError(t, store.Insert(ctx, st, []store.Score{
		{TsMs: 1_700_000_000_000, SubmissionID: "a1", Policy: "lowb-score/v1", Campaign: "tiny", Participant: "alice", Method: "FP8", Split: "dev", Score: 0.125, Qualified: 1},
	}))
	qs, err := query.New(st, 0)
	require.NoError(t, err)
	svc, err := micro.AddService(f.b.Conn(), micro.Config{Name: ctl.ServiceQuery, Version: "1.0.0"})
	require.NoError(t, err)
	require.NoError(t, ctl.Endpoint(ctx, svc, "sql", ctl.SubjectSQL, query.MaxTimeout+15*time.Second,
		func(ctx context.Context, req ctl.SQLRequest) (ctl.SQLReply, error) {
			res, err := qs.Run(ctx, req.SQL, query.Options{MaxRows: req.MaxRows, Timeout: time.Duration(req.TimeoutSeconds) * time.Second})
			var qe *query.Error
			if errors.As(err, &qe) {
				code := ctl.CodeBadRequest
				if qe.Code == reason.SQLBusy || qe.Code == reason.SQLNoStore {
					code = ctl.CodeUnavailable
				}
				return ctl.SQLReply{}, ctl.RefuseWith(code, qe.Code, "%s", qe.Message)
			}
			if err != nil {
				return ctl.SQLReply{}, err
			}
			rep := ctl.SQLReply{Kind: res.Kind, Rows: res.Table.Rows, Truncated: res.Table.Cut, MaxRows: res.MaxRows,
				TimeoutSeconds: int(res.Timeout / time.Second), Engine: res.Engine}
			for _, c := range res.Table.Columns {
				rep.Columns = append(rep.Columns, ctl.SQLColumn{Name: c.Name, Type: c.Type})
			}
			return rep, nil
		}))
	t.Cleanup(func() { cancel(); _ = svc.Stop(); _ = st.Close() })
}

// postSQL posts body to /v1/sql?query with token and content type ("" for
// none) and returns the status, the Content-Type, the
// Lowbarena-Truncated header and the body.
func (f *fixture) postSQL(t *testing.T, query, token, ctype, body string) (int, string, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+"/v1/sql"+query, strings.NewReader(body))
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Lowbarena-Truncated"), string(raw)
}

// TestSQLEndpoint: an operator's read-only SQL over HTTP, answered by the
// real query service over a chDB store, in JSON, CSV and TSV; every
// refusal with a stable code (the query service's own for the
// statement), and nobody but an operator served.
func TestSQLEndpoint(t *testing.T) {
	f := newFixture(t, nil)

	// No query service yet: said so, never a hang.
	status, _, _, body := f.postSQL(t, "", f.op, "", "SELECT 1")
	require.Equal(t, http.StatusServiceUnavailable, status, body)
	require.Contains(t, body, `"code":"query_unavailable"`)

	serveQuery(t, f)

	t.Run("json, a text body", func(t *testing.T) {
		status, ctype, cut, body := f.postSQL(t, "", f.op, "text/plain", "SELECT submission_id, score FROM scores FINAL")
		require.Equal(t, http.StatusOK, status, body)
		require.Equal(t, "application/json", ctype)
		require.Empty(t, cut)
		var rep ctl.SQLReply
		require.NoError(t, json.Unmarshal([]byte(body), &rep))
		require.Equal(t, query.KindSelect, rep.Kind)
		require.Equal(t, []ctl.SQLColumn{{Name: "submission_id", Type: "String"}, {Name: "score", Type: "Float64"}}, rep.Columns)
		require.Equal(t, [][]json.RawMessage{{json.RawMessage(`"a1"`), json.RawMessage(`0.125`)}}, rep.Rows)
		require.Equal(t, query.DefaultMaxRows, rep.MaxRows)
		require.Contains(t, rep.Engine, "chdb")
	})
	t.Run("csv, a JSON body with its limits", func(t *testing.T) {
		status, ctype, cut, body := f.postSQL(t, "?format=csv", f.op, "application/json",
			`{"sql": "SELECT number, toString(number) || ',x' AS s FROM system.numbers", "max_rows": 3, "timeout_seconds": 5}`)
		require.Equal(t, http.StatusOK, status, body)
		require.True(t, strings.HasPrefix(ctype, "text/csv"), ctype)
		require.Equal(t, "rows", cut, "the rows stop at max_rows")
		recs, err := csv.NewReader(strings.NewReader(body)).ReadAll()
		require.NoError(t, err)
		require.Equal(t, [][]string{{"number", "s"}, {"0", "0,x"}, {"1", "1,x"}, {"2", "2,x"}}, recs)
	})
	t.Run("tsv, limits in the query", func(t *testing.T) {
		status, ctype, cut, body := f.postSQL(t, "?format=tsv&max_rows=2&timeout=5s", f.op, "", "SELECT number, 'a\tb' AS s FROM numbers(10)")
		require.Equal(t, http.StatusOK, status, body)
		require.True(t, strings.HasPrefix(ctype, "text/tab-separated-values"), ctype)
		require.Equal(t, "rows", cut)
		require.Equal(t, "number\ts\n0\ta\\tb\n1\ta\\tb\n", body)
	})

	cases := []struct {
		name, query, token, ctype, body string
		status                          int
		code, says                      string
	}{
		{"no token", "", "", "", "SELECT 1", 401, string(reason.TokenMissing), "operator's token"},
		{"a participant's token", "", f.alice, "", "SELECT 1", 403, string(reason.TokenNotOperator), "for operators"},
		{"a write", "", f.op, "", "DROP TABLE scores", 400, string(reason.SQLNotReadOnly), "DROP is not read-only"},
		{"two statements", "", f.op, "", "SELECT 1; DROP TABLE scores", 400, string(reason.SQLManyStatements), "more than one"},
		{"past its limit", "?timeout=1", f.op, "", "SELECT count() FROM numbers(100000000000)", 400, string(reason.SQLTimeout), "limit of 1s"},
		{"malformed", "", f.op, "", "SELECT 'abc", 400, string(reason.SQLMalformed), "not closed"},
		{"a syntax error", "", f.op, "", "SELECT 1 +", 400, string(reason.SQLSyntaxError), "cannot parse"},
		{"an unknown table", "", f.op, "", "SELECT * FROM no_such_table", 400, string(reason.SQLUnknownName), "SHOW TABLES"},
		{"empty", "", f.op, "", "  ", 400, string(reason.SQLEmpty), ""},
		{"a JSON body that does not decode", "", f.op, "application/json", `{"sql": 1}`, 400, string(reason.RequestMalformed), "does not decode"},
		{"an unknown JSON field", "", f.op, "application/json", `{"query": "SELECT 1"}`, 400, string(reason.RequestMalformed), "unknown field"},
		{"an unknown format", "?format=xml", f.op, "", "SELECT 1", 400, string(reason.InvalidQuery), "json, csv or tsv"},
		{"max_rows out of range", "?max_rows=0", f.op, "", "SELECT 1", 400, string(reason.SQLBadLimits), "1 to 10000"},
		{"a timeout past the largest", "?timeout=61s", f.op, "", "SELECT 1", 400, string(reason.SQLBadLimits), "whole seconds from 1 to 60"},
		{"a JSON limit out of range", "", f.op, "application/json", `{"sql": "SELECT 1", "max_rows": 20000}`, 400, string(reason.SQLBadLimits), "max rows"},
		{"a body past the largest", "", f.op, "", "SELECT '" + strings.Repeat("x", maxSQLBody) + "'", 413, string(reason.SQLTooLong), "at most"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, ctype, _, body := f.postSQL(t, tc.query, tc.token, tc.ctype, tc.body)
			require.Equal(t, tc.status, status, body)
			require.Equal(t, "application/json", ctype)
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(body), &m))
			require.Equal(t, tc.code, code(m), body)
			require.Contains(t, m["error"].(map[string]any)["message"], tc.says)
		})
	}

	// The table the write named is still there.
	status, _, _, body = f.postSQL(t, "?format=tsv", f.op, "", "SELECT count() AS n FROM scores")
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, "n\n1\n", body)
}
