// Package store is the arena's telemetry and history store: one interface
// over ClickHouse, with two adapters that take the same SQL.
//
// The embedded default is chDB, the ClickHouse engine in-process (package
// chdb below this one); a ClickHouse server is reached with clickhouse-go
// over the native protocol (package clickhouse below this one). An adapter
// registers itself under a URL scheme when its package is imported, in the
// manner of database/sql drivers, so only a binary that needs the embedded
// engine links it:
//
//	import _ "github.com/lowbarena/lowbarena/platform/store/chdb"
//	st, err := store.Open(ctx, "chdb:///var/lib/lowbarena/chdb")
//
// Every table is written at least once per row: delivery on the event bus is
// at least once, so a redelivered batch may write its rows twice. The tables
// are ReplacingMergeTree keyed on each row's natural key (see
// schemas/clickhouse), so duplicates collapse; a reader that needs exact
// counts reads with FINAL or aggregates idempotently.
package store

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"sync"
)

// Store is one telemetry and history back-end.
//
// Implementations are safe for concurrent use.
type Store interface {
	// Append writes rows into table in one batch. columns names the order of
	// the values in each row; every row has len(columns) values of the Go
	// types that match the column types (uint64 for UInt64, uint32 for
	// UInt32, uint8 for UInt8, float64 for Float64, string for String).
	Append(ctx context.Context, table string, columns []string, rows [][]any) error
	// Select runs query, with each ? bound to the next of args (see Bind),
	// and decodes the rows into dest, a pointer to a slice of structs whose
	// exported fields carry `ch:"column"` tags. Columns without a field are
	// ignored; fields without a column keep their zero value.
	Select(ctx context.Context, dest any, query string, args ...any) error
	// Exec runs a statement that returns no rows, with args bound as in
	// Select.
	Exec(ctx context.Context, query string, args ...any) error
	// Engine names the back-end and the engine's version, for example
	// "chdb 26.7.2.1" or "clickhouse 18.16.1".
	Engine() string
	// Close releases the back-end. Rows already appended are durable.
	Close() error
}

// Opener opens a store from its URL.
type Opener func(ctx context.Context, u *url.URL) (Store, error)

var (
	registryMu sync.Mutex
	registry   = map[string]Opener{}
)

// Register makes an adapter available under a URL scheme. It is called from
// the adapter package's init and panics when the scheme is taken twice.
func Register(scheme string, open Opener) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[scheme]; dup {
		panic("store: Register called twice for scheme " + scheme)
	}
	registry[scheme] = open
}

// ErrUnknownScheme is returned by Open for a URL whose scheme has no
// registered adapter.
var ErrUnknownScheme = errors.New("store: no adapter for this URL scheme")

// ErrClosed is wrapped by the errors of every method of a store that was
// closed, whatever its back-end.
var ErrClosed = errors.New("store: store is closed")

// Open opens the store named by rawURL and applies the schema migrations
// (see Migrate). Known forms:
//
//	chdb:///abs/path/to/dir                 the embedded engine, data in dir
//	clickhouse://user:pass@host:9000/db     a ClickHouse server, native protocol
func Open(ctx context.Context, rawURL string) (Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("store: parse %q: %w", rawURL, err)
	}
	registryMu.Lock()
	open, ok := registry[u.Scheme]
	registryMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: %q (known: %v)", ErrUnknownScheme, u.Scheme, Schemes())
	}
	st, err := open(ctx, u)
	if err != nil {
		return nil, err
	}
	if _, err := Migrate(ctx, st); err != nil {
		_ = st.Close()
		return nil, err
	}
	return st, nil
}

// Schemes lists the URL schemes of the adapters linked into this binary.
func Schemes() []string {
	registryMu.Lock()
	defer registryMu.Unlock()
	out := make([]string, 0, len(registry))
	for s := range registry {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}
