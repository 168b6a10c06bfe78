package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/ctl"
	"github.com/lowbarena/lowbarena/platform/store/query"
)

// maxSQLBody bounds the body of POST /v1/sql: a statement of the query
// service's largest size, written as JSON with every byte escaped, fits.
// A larger body is refused before it reaches the service.
const maxSQLBody = 8 * query.MaxStatementBytes

// sqlFormats are the answers POST /v1/sql gives, by ?format.
var sqlFormats = map[string]string{
	"json": "application/json",
	"csv":  "text/csv; charset=utf-8; header=present",
	"tsv":  "text/tab-separated-values; charset=utf-8",
}

// sql answers one read-only statement to an operator: it forwards the
// statement to the query service (ctl.SubjectSQL), the very service
// `arena sql` asks, so the read-only check, the time limit and the row
// cap are the same. The body is the statement as text, or JSON
// {"sql", "max_rows", "timeout_seconds"} (Content-Type
// application/json); ?max_rows and ?timeout (seconds, "10" or "10s") set
// the limits of a text body. ?format is json (ctl.SQLReply, as
// `arena sql --json` prints it), csv or tsv (a header row, then the
// rows; Lowbarena-Truncated says when the rows stop at a limit). A
// refusal of the service answers 400 (503 when it is busy) with its
// stable code (sql_not_read_only, sql_timeout, sql_malformed, ...).
//
// Only operators: the store holds every participant's dev scores, which
// the HTTP API shows a participant only for its own submissions.
func (a *API) sql(w http.ResponseWriter, r *http.Request) {
	v, ok := a.viewer(w, r)
	if !ok {
		return
	}
	switch {
	case v.Kind == "":
		a.refuse(w, r, http.StatusUnauthorized, reason.TokenMissing,
			"SQL on the arena's store takes an operator's token: send Authorization: Bearer <token>")
		return
	case !v.Operator():
		a.refuse(w, r, http.StatusForbidden, reason.TokenNotOperator,
			"SQL on the arena's store is for operators: the store holds every participant's dev scores. Read your own with GET /v1/history?participant="+v.Name)
		return
	}
	q := r.URL.Query()
	format := q.Get("format")
	if format == "" {
		format = "json"
	}
	ctype, ok := sqlFormats[format]
	if !ok {
		a.refuse(w, r, http.StatusBadRequest, reason.InvalidQuery, fmt.Sprintf("format %q: choose json, csv or tsv", format))
		return
	}
	req, status, code, msg := readSQLRequest(r)
	if code != "" {
		a.refuse(w, r, status, code, msg)
		return
	}
	if a.o.NC == nil {
		a.refuse(w, r, http.StatusServiceUnavailable, reason.QueryUnavailable, "this gateway does not reach the arena's query service")
		return
	}
	// The request waits for the statement's own limit (the service's
	// largest when it asks none), then for the answer to come back.
	wait := query.MaxTimeout
	if req.TimeoutSeconds > 0 {
		wait = time.Duration(req.TimeoutSeconds) * time.Second
	}
	ctx, cancel := context.WithTimeout(r.Context(), wait+15*time.Second)
	defer cancel()
	rep, err := ctl.Call[ctl.SQLReply](ctx, a.o.NC, ctl.SubjectSQL, req)
	var ce *ctl.Error
	switch {
	case errors.Is(err, ctl.ErrNoService):
		w.Header().Set("Retry-After", "5")
		a.refuse(w, r, http.StatusServiceUnavailable, reason.QueryUnavailable,
			"no query service answers; the arena's score stage holds it: try again when it is up")
		return
	case errors.As(err, &ce) && ce.Reason != "":
		status := http.StatusBadRequest
		if ce.Code == ctl.CodeUnavailable {
			status = http.StatusServiceUnavailable
			w.Header().Set("Retry-After", "5")
		}
		a.refuse(w, r, status, ce.Reason, ce.Message)
		return
	case errors.As(err, &ce) && ce.Code == ctl.CodeBadRequest:
		a.refuse(w, r, http.StatusBadRequest, reason.InvalidQuery, ce.Message)
		return
	case err != nil:
		a.unavailable(w, r, err)
		return
	}
	w.Header().Set("Content-Type", ctype)
	if rep.Truncated != "" {
		w.Header().Set("Lowbarena-Truncated", rep.Truncated)
	}
	switch format {
	case "csv":
		err = ctl.WriteCSV(w, rep)
	case "tsv":
		err = ctl.WriteTSV(w, rep)
	default:
		err = json.NewEncoder(w).Encode(rep)
	}
	if err != nil {
		a.o.Log.Info("sql: the answer was not written whole", "request_id", requestID(r.Context()), "err", err)
	}
}

// readSQLRequest reads POST /v1/sql's statement and limits, or the
// refusal of a body or parameter that cannot be one (a non-empty code).
func readSQLRequest(r *http.Request) (req ctl.SQLRequest, status int, code reason.Code, msg string) {
	raw, err := io.ReadAll(io.LimitReader(r.Body, maxSQLBody+1))
	if err != nil {
		return req, http.StatusBadRequest, reason.RequestMalformed, "the body could not be read whole: " + err.Error()
	}
	if len(raw) > maxSQLBody {
		return req, http.StatusRequestEntityTooLarge, reason.SQLTooLong,
			fmt.Sprintf("the body is over %d bytes; a statement is at most %d", maxSQLBody, query.MaxStatementBytes)
	}
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt == "application/json" {
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return req, http.StatusBadRequest, reason.RequestMalformed,
				`the JSON body does not decode: ` + err.Error() + `; send {"sql": "SELECT ...", "max_rows": 100, "timeout_seconds": 10}, or the statement as text`
		}
		if dec.More() {
			return req, http.StatusBadRequest, reason.RequestMalformed, "the JSON body holds more than one value; send one object"
		}
		return req, 0, "", ""
	}
	req.SQL = string(raw)
	q := r.URL.Query()
	if s := q.Get("max_rows"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > query.MaxMaxRows {
			return req, http.StatusBadRequest, reason.SQLBadLimits, fmt.Sprintf("max_rows %q: give a whole number from 1 to %d", s, query.MaxMaxRows)
		}
		req.MaxRows = n
	}
	if s := q.Get("timeout"); s != "" {
		d, err := time.ParseDuration(s)
		if n, aerr := strconv.Atoi(s); aerr == nil {
			d, err = time.Duration(n)*time.Second, nil
		}
		if err != nil || d < time.Second || d > query.MaxTimeout || d%time.Second != 0 {
			return req, http.StatusBadRequest, reason.SQLBadLimits, fmt.Sprintf("timeout %q: give whole seconds from 1 to %d, for example 10 or 10s", s, int(query.MaxTimeout/time.Second))
		}
		req.TimeoutSeconds = int(d / time.Second)
	}
	return req, 0, "", ""
}
