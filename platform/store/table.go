package store

import (
	"context"
	"encoding/json"
	"errors"
)

// Table is the answer to a query whose columns are not known in advance
// (`arena sql`): the columns' names and ClickHouse types, and each row's
// values as JSON, in the manner of ClickHouse's JSON formats with 64-bit
// integers unquoted: numbers as numbers, NaN and infinities as the
// strings "nan", "inf" and "-inf", dates and times as strings
// ("2006-01-02", "2006-01-02 15:04:05[.fff]" in the column's time zone),
// arrays as arrays, NULL as null. Both back-ends give the same JSON for
// the same values.
type Table struct {
	Columns []Column
	Rows    [][]json.RawMessage
	// Cut says why the rows stop before the result's end: CutRows or
	// CutBytes; "" when Rows is the whole result.
	Cut string
}

// Why a Table holds only the first rows of a result.
const (
	CutRows  = "rows"
	CutBytes = "bytes"
)

// Column is one column of a Table.
type Column struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// Limits bound a query run by QueryTable.
type Limits struct {
	// MaxRows is the most rows returned (at least 1); a longer result is
	// cut, with Cut = CutRows.
	MaxRows int
	// MaxBytes bounds the JSON of the rows returned; the row that would
	// pass it is not returned, and Cut = CutBytes.
	MaxBytes int
	// MaxSeconds is the engine's own time limit (max_execution_time); a
	// statement past it fails with ClickHouse's TIMEOUT_EXCEEDED (159).
	MaxSeconds int
	// ReadOnly runs the statement with readonly = 1: the engine refuses
	// writes, settings changes and the table functions that reach outside
	// it (file, url, remote and the like need CREATE TEMPORARY TABLE).
	ReadOnly bool
}

// ErrBadLimits is returned by QueryTable for limits it cannot apply.
var ErrBadLimits = errors.New("store: query limits need MaxRows, MaxBytes and MaxSeconds of at least 1")

// Check returns ErrBadLimits unless every limit is set.
func (l Limits) Check() error {
	if l.MaxRows < 1 || l.MaxBytes < 1 || l.MaxSeconds < 1 {
		return ErrBadLimits
	}
	return nil
}

// Tabler is implemented by the stores that answer arbitrary queries as
// tables (both adapters do).
type Tabler interface {
	// QueryTable runs query, one statement as the engine takes it (no
	// trailing semicolon or comment, no FORMAT, SETTINGS or INTO OUTFILE
	// clause), within limits. It checks nothing about what the statement
	// does: callers check that first (package query). An engine error,
	// a timeout included, comes back as an error that carries the
	// engine's code and message.
	QueryTable(ctx context.Context, query string, limits Limits) (*Table, error)
}

// TableBuilder collects rows under Limits; adapters feed it.
type TableBuilder struct {
	T     Table
	lim   Limits
	bytes int
}

// NewTableBuilder starts a table of the given columns under lim.
func NewTableBuilder(cols []Column, lim Limits) *TableBuilder {
	return &TableBuilder{T: Table{Columns: cols, Rows: [][]json.RawMessage{}}, lim: lim}
}

// Add adds a row and reports whether the table takes more: false once a
// limit cut it (that row then is not in it, and T.Cut says which limit).
func (b *TableBuilder) Add(row []json.RawMessage) bool {
	if b.T.Cut != "" {
		return false
	}
	if len(b.T.Rows) >= b.lim.MaxRows {
		b.T.Cut = CutRows
		return false
	}
	n := 2
	for _, c := range row {
		n += len(c) + 1
	}
	if b.bytes+n > b.lim.MaxBytes {
		b.T.Cut = CutBytes
		return false
	}
	b.bytes += n
	b.T.Rows = append(b.T.Rows, row)
	return true
}
