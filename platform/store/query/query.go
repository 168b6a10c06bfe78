// Package query answers read-only SQL against the arena's store, for
// people (`arena sql`, over NATS; an HTTP handler can call the same
// Service): it checks that a statement only reads (Check), runs it under a
// time limit, a row cap and readonly = 1 (store.Tabler), and turns engine
// failures into refusals with a stable code and a sentence.
//
// Two defences stand between a statement and the store: Check, which
// reads the statement's tokens as ClickHouse's lexer does and refuses
// anything but one SELECT, SHOW, DESCRIBE or EXPLAIN, INTO OUTFILE,
// SETTINGS and FORMAT clauses and calls that reach outside the store; and
// the engine's own readonly = 1, which refuses writes and settings
// changes. The engine's setting is not enough alone: chDB under
// readonly = 1 still runs a scalar file() and INTO OUTFILE
// (TestEngineRunsWhatCheckAccepts shows both), which only Check refuses.
package query

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/store"
)

// Codes lists every refusal code.
func Codes() []reason.Code {
	return []reason.Code{
		reason.SQLEmpty, reason.SQLTooLong, reason.SQLMalformed, reason.SQLManyStatements,
		reason.SQLNotReadOnly, reason.SQLIntoOutfile, reason.SQLClauseNotAllowed,
		reason.SQLExternalFunction, reason.SQLBadLimits, reason.SQLTimeout, reason.SQLSyntaxError,
		reason.SQLUnknownName, reason.SQLEngineError, reason.SQLBusy, reason.SQLNoStore,
	}
}

// Error is a refused query: a stable code and a sentence to act on.
type Error struct {
	Code    reason.Code
	Message string
	// Err is the engine's error, when the engine refused.
	Err error
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }
func (e *Error) Unwrap() error { return e.Err }

func refuse(code reason.Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

func malformed(pos int, format string, args ...any) *Error {
	return refuse(reason.SQLMalformed, "at offset %d: %s", pos, fmt.Sprintf(format, args...))
}

// Limits of a query run.
const (
	DefaultMaxRows = 1000
	MaxMaxRows     = 10000
	DefaultTimeout = 10 * time.Second
	MaxTimeout     = 60 * time.Second
	// DefaultMaxBytes bounds the JSON of the rows of one answer: it must
	// fit a NATS message (1 MiB by default on a server; the embedded
	// arena takes 2 MiB) with its columns and envelope.
	DefaultMaxBytes = 768 << 10
	// concurrent is how many queries one service runs at once; on the
	// embedded default they run one after another in any case, beside the
	// services' own statements.
	concurrent = 2
)

// Options of one query; zero values take the defaults.
type Options struct {
	// MaxRows caps the rows returned (1 to MaxMaxRows).
	MaxRows int
	// Timeout is the engine's time limit, in whole seconds (1 s to
	// MaxTimeout).
	Timeout time.Duration
}

// Result is a query's answer.
type Result struct {
	Kind   string
	Table  *store.Table
	Engine string
	// Elapsed is the time the statement took, as measured here.
	Elapsed time.Duration
	// Limits are those it ran under.
	MaxRows int
	Timeout time.Duration
}

// Service runs queries on one store.
type Service struct {
	st       store.Tabler
	engine   string
	maxBytes int
	slots    chan struct{}
}

// New returns a service over st; maxBytes bounds each answer's rows (0:
// DefaultMaxBytes). A store that cannot answer tables is refused.
func New(st store.Store, maxBytes int) (*Service, error) {
	tab, ok := st.(store.Tabler)
	if !ok || st == nil {
		return nil, refuse(reason.SQLNoStore, "the store %T does not answer queries", st)
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	return &Service{st: tab, engine: st.Engine(), maxBytes: maxBytes, slots: make(chan struct{}, concurrent)}, nil
}

// Run checks sql and runs it under o's limits. Every refusal is an *Error.
func (s *Service) Run(ctx context.Context, sql string, o Options) (*Result, error) {
	if o.MaxRows == 0 {
		o.MaxRows = DefaultMaxRows
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxRows < 1 || o.MaxRows > MaxMaxRows {
		return nil, refuse(reason.SQLBadLimits, "max rows %d: choose from 1 to %d", o.MaxRows, MaxMaxRows)
	}
	if o.Timeout < time.Second || o.Timeout > MaxTimeout || o.Timeout%time.Second != 0 {
		return nil, refuse(reason.SQLBadLimits, "timeout %s: choose whole seconds from 1s to %s", o.Timeout, MaxTimeout)
	}
	stmt, err := Check(sql)
	if err != nil {
		return nil, err
	}
	select {
	case s.slots <- struct{}{}:
		defer func() { <-s.slots }()
	case <-ctx.Done():
		return nil, refuse(reason.SQLBusy, "%d queries were running and none ended in time; try again", concurrent)
	}
	start := time.Now()
	t, err := s.st.QueryTable(ctx, stmt.SQL, store.Limits{MaxRows: o.MaxRows, MaxBytes: s.maxBytes, MaxSeconds: int(o.Timeout / time.Second), ReadOnly: true})
	elapsed := time.Since(start)
	if err != nil {
		return nil, engineRefusal(err, o.Timeout)
	}
	return &Result{Kind: stmt.Kind, Table: t, Engine: s.engine, Elapsed: elapsed, MaxRows: o.MaxRows, Timeout: o.Timeout}, nil
}

// engineCode reads ClickHouse's error code out of an engine's message:
// "Code: 159. DB::Exception: ..." (chDB) or "code: 159, message: ..."
// (clickhouse-go).
var engineCode = regexp.MustCompile(`(?i)\bcode: (\d+)[.,]`)

// engineRefusal turns an engine's error into a refusal.
func engineRefusal(err error, timeout time.Duration) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return &Error{Code: reason.SQLTimeout, Message: fmt.Sprintf("the query ran past its limit of %s and was stopped; narrow it (WHERE, LIMIT) or allow more time, up to %s", timeout, MaxTimeout), Err: err}
	}
	msg := err.Error()
	code := 0
	if m := engineCode.FindStringSubmatch(msg); m != nil {
		code, _ = strconv.Atoi(m[1])
	}
	// The engine's own sentence, without the adapter's prefix and the
	// statement it repeats.
	text := msg
	if i := strings.Index(text, "(statement:"); i > 0 {
		text = strings.TrimSpace(text[:i])
	}
	text = strings.TrimPrefix(strings.TrimPrefix(text, "store: chdb: "), "store: clickhouse: ")
	switch code {
	case 159: // TIMEOUT_EXCEEDED
		return &Error{Code: reason.SQLTimeout, Message: fmt.Sprintf("the query ran past its limit of %s and the engine stopped it; narrow it (WHERE, LIMIT) or allow more time, up to %s", timeout, MaxTimeout), Err: err}
	case 62: // SYNTAX_ERROR
		return &Error{Code: reason.SQLSyntaxError, Message: "ClickHouse cannot parse the statement: " + text, Err: err}
	case 60, 47, 46, 81, 16, 36: // UNKNOWN_TABLE, UNKNOWN_IDENTIFIER, UNKNOWN_FUNCTION, UNKNOWN_DATABASE, NO_SUCH_COLUMN_IN_TABLE, BAD_ARGUMENTS
		return &Error{Code: reason.SQLUnknownName, Message: "ClickHouse does not know a name in the statement (SHOW TABLES lists the tables): " + text, Err: err}
	case 164: // READONLY
		return &Error{Code: reason.SQLNotReadOnly, Message: "the engine refused a write or a setting in read-only mode: " + text, Err: err}
	}
	return &Error{Code: reason.SQLEngineError, Message: "ClickHouse refused the query: " + text, Err: err}
}
