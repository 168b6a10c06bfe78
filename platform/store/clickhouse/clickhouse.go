// Package chstore is the store back-end for a ClickHouse server, reached
// with github.com/ClickHouse/clickhouse-go/v2 over the native protocol.
// Importing it registers the URL scheme "clickhouse":
//
//	import _ "github.com/lowbarena/lowbarena/platform/store/clickhouse"
//	st, err := store.Open(ctx, "clickhouse://user:pass@host:9000/lowbarena")
//
// The port defaults to 9000 and the database to "lowbarena"; the database
// is created when missing. The server may be as old as 18.16 (Debian's
// package): the adapter binds query arguments on the client (store.Bind),
// names the columns of every INSERT, and sends only integer settings, which
// is what that server's protocol revision takes. The HTTP protocol is not
// offered: clickhouse-go's HTTP client does not work against 18.16.
package chstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/lowbarena/lowbarena/platform/store"
	"github.com/lowbarena/lowbarena/platform/store/internal/colconv"
	"github.com/lowbarena/lowbarena/platform/store/internal/rowscan"
)

// Scheme is the URL scheme this adapter registers.
const Scheme = "clickhouse"

// DefaultDatabase is the database used when the URL names none.
const DefaultDatabase = "lowbarena"

// DefaultPort is the native protocol port used when the URL names none.
const DefaultPort = "9000"

// ErrURL is wrapped by the errors about a URL Open cannot use.
var ErrURL = errors.New("store: clickhouse: bad URL")

func init() {
	store.Register(Scheme, func(ctx context.Context, u *url.URL) (store.Store, error) {
		return Open(ctx, u)
	})
}

// Store is a store on a ClickHouse server. It is safe for concurrent use:
// clickhouse-go keeps a pool of connections, and each call takes one.
type Store struct {
	conn    driver.Conn
	db      string
	addr    string
	version string

	// mu guards closed. Calls hold it shared for their whole run, so Close
	// (which takes it exclusively) waits for the calls in flight and no call
	// starts on a closed pool.
	mu     sync.RWMutex
	closed bool
}

var (
	_ store.Store          = (*Store)(nil)
	_ store.ColumnAppender = (*Store)(nil)
)

// config is what a clickhouse URL says.
type config struct {
	addr, user, password, db string
	dialTimeout              time.Duration
}

// parseURL reads clickhouse://[user[:password]@]host[:port][/database]
// [?dial_timeout=5s].
func parseURL(u *url.URL) (config, error) {
	const form = "want clickhouse://[user[:password]@]host[:port][/database]"
	c := config{user: "default", db: DefaultDatabase, dialTimeout: 10 * time.Second}
	if u.Scheme != Scheme {
		return c, fmt.Errorf("%w: scheme %q: %s", ErrURL, u.Scheme, form)
	}
	if u.Host == "" || u.Opaque != "" {
		return c, fmt.Errorf("%w: %q has no host: %s", ErrURL, u.Redacted(), form)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = DefaultPort
	}
	c.addr = net.JoinHostPort(host, port)
	if u.User != nil {
		if n := u.User.Username(); n != "" {
			c.user = n
		}
		c.password, _ = u.User.Password()
	}
	if p := strings.Trim(u.Path, "/"); p != "" {
		c.db = p
	}
	if err := store.CheckIdent(c.db, false); err != nil {
		return c, fmt.Errorf("%w: database: %w", ErrURL, err)
	}
	for k, v := range u.Query() {
		switch k {
		case "dial_timeout":
			d, err := time.ParseDuration(v[len(v)-1])
			if err != nil || d <= 0 {
				return c, fmt.Errorf("%w: dial_timeout %q: want a positive duration such as 5s", ErrURL, v[len(v)-1])
			}
			c.dialTimeout = d
		default:
			return c, fmt.Errorf("%w: unknown parameter %q (known: dial_timeout)", ErrURL, k)
		}
	}
	return c, nil
}

// Open connects to the server named by u, creates the database when it is
// missing, and returns a store on it. It does not apply migrations;
// store.Open does.
func Open(ctx context.Context, u *url.URL) (*Store, error) {
	c, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	// The database may not exist yet, and a connection whose handshake names
	// a missing database is refused: create it over a connection to the
	// server's default database first.
	boot, err := connect(ctx, c, "")
	if err != nil {
		return nil, err
	}
	err = boot.Exec(ctx, "CREATE DATABASE IF NOT EXISTS "+c.db)
	_ = boot.Close()
	if err != nil {
		return nil, fmt.Errorf("store: clickhouse: %s: create database %s: %w", c.addr, c.db, err)
	}
	conn, err := connect(ctx, c, c.db)
	if err != nil {
		return nil, err
	}
	sv, err := conn.ServerVersion()
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("store: clickhouse: %s: server version: %w", c.addr, err)
	}
	v := sv.Version
	return &Store{
		conn:    conn,
		db:      c.db,
		addr:    c.addr,
		version: fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch),
	}, nil
}

// connect opens a pool on db and checks the server answers.
func connect(ctx context.Context, c config, db string) (driver.Conn, error) {
	conn, err := clickhouse.Open(&clickhouse.Options{
		Protocol:    clickhouse.Native,
		Addr:        []string{c.addr},
		Auth:        clickhouse.Auth{Database: db, Username: c.user, Password: c.password},
		DialTimeout: c.dialTimeout,
		Compression: &clickhouse.Compression{Method: clickhouse.CompressionLZ4},
	})
	if err != nil {
		return nil, fmt.Errorf("store: clickhouse: %s: %w", c.addr, err)
	}
	if err := conn.Ping(ctx); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("store: clickhouse: %s: %w", c.addr, err)
	}
	return conn, nil
}

// begin takes the shared lock for one call and fails when the store is
// closed. The caller runs end when done.
func (st *Store) begin() (end func(), err error) {
	st.mu.RLock()
	if st.closed {
		st.mu.RUnlock()
		return nil, fmt.Errorf("store: clickhouse: %w", store.ErrClosed)
	}
	return st.mu.RUnlock, nil
}

// Exec implements store.Store.
func (st *Store) Exec(ctx context.Context, query string, args ...any) error {
	q, err := store.Bind(query, args...)
	if err != nil {
		return err
	}
	end, err := st.begin()
	if err != nil {
		return err
	}
	defer end()
	if err := st.conn.Exec(ctx, q); err != nil {
		return fmt.Errorf("store: clickhouse: %w (statement: %s)", err, head(q))
	}
	return nil
}

// Select implements store.Store. Each column is scanned into a value of the
// type clickhouse-go reports for it and assigned with rowscan.Set, so both
// adapters convert between column and field types alike.
func (st *Store) Select(ctx context.Context, dest any, query string, args ...any) error {
	d, err := rowscan.New(dest)
	if err != nil {
		return err
	}
	q, err := store.Bind(query, args...)
	if err != nil {
		return err
	}
	end, err := st.begin()
	if err != nil {
		return err
	}
	defer end()
	rows, err := st.conn.Query(ctx, q)
	if err != nil {
		return fmt.Errorf("store: clickhouse: %w (statement: %s)", err, head(q))
	}
	defer rows.Close()
	if err := scanRows(d, rows); err != nil {
		return fmt.Errorf("store: clickhouse: %w (statement: %s)", err, head(q))
	}
	d.Finish()
	return nil
}

// scanRows decodes every row of rows into d.
func scanRows(d *rowscan.Dest, rows driver.Rows) error {
	names := rows.Columns()
	types := rows.ColumnTypes()
	plan := d.Plan(names)
	// One scan target per column, reused for every row: a pointer to a value
	// of the column's scan type.
	targets := make([]any, len(names))
	for i, ct := range types {
		targets[i] = reflect.New(ct.ScanType()).Interface()
	}
	for n := 1; rows.Next(); n++ {
		if err := rows.Scan(targets...); err != nil {
			return fmt.Errorf("scan row %d: %w", n, err)
		}
		row := d.Next()
		for i, fi := range plan {
			if fi < 0 {
				continue
			}
			if err := rowscan.Set(row.Field(fi), targets[i]); err != nil {
				return fmt.Errorf("row %d column %s: %w", n, names[i], err)
			}
		}
	}
	return rows.Err()
}

// Append implements store.Store. The rows go in one native batch; each value
// is converted to the Go type of its column first (see colconv.Convert), so a value
// that does not fit its column is an error rather than a wrapped number.
func (st *Store) Append(ctx context.Context, table string, columns []string, rows [][]any) error {
	if err := store.CheckAppend(table, columns, rows); err != nil {
		return err
	}
	if len(rows) == 0 {
		return nil
	}
	end, err := st.begin()
	if err != nil {
		return err
	}
	defer end()
	// 18.16 takes a batch only when the INSERT names its columns.
	q := "INSERT INTO " + table + " (" + strings.Join(columns, ", ") + ")"
	batch, err := st.conn.PrepareBatch(ctx, q)
	if err != nil {
		return fmt.Errorf("store: clickhouse: %s: %w", head(q), err)
	}
	defer batch.Close()
	cols := batch.Columns()
	if len(cols) != len(columns) {
		_ = batch.Abort()
		return fmt.Errorf("store: clickhouse: %s: the server expects %d columns for %d named", table, len(cols), len(columns))
	}
	kinds := make([]string, len(cols))
	for i, c := range cols {
		kinds[i] = string(c.Type())
	}
	vals := make([]any, len(columns))
	for i, row := range rows {
		for j, v := range row {
			cv, err := colconv.Convert(kinds[j], v)
			if err != nil {
				_ = batch.Abort()
				return fmt.Errorf("%w: %s: row %d column %s (%s): %w", store.ErrBadRows, table, i, columns[j], kinds[j], err)
			}
			vals[j] = cv
		}
		if err := batch.Append(vals...); err != nil {
			_ = batch.Abort()
			return fmt.Errorf("%w: %s: row %d: %w", store.ErrBadRows, table, i, err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("store: clickhouse: %s: send %d rows: %w", table, len(rows), err)
	}
	return nil
}

// AppendColumns implements store.ColumnAppender: each typed column goes
// into its column of one native batch as a whole (clickhouse-go's column
// append), without a value boxed. A column whose server type is not its Go
// type's own (UInt64 for []uint64, UInt32, UInt8, Float64, String) takes
// the row path of Append, with its conversions and its errors.
func (st *Store) AppendColumns(ctx context.Context, c *store.Columns) error {
	if err := store.CheckColumns(c); err != nil {
		return err
	}
	if c.Len == 0 {
		return nil
	}
	end, err := st.begin()
	if err != nil {
		return err
	}
	q := "INSERT INTO " + c.Table + " (" + strings.Join(c.Names, ", ") + ")"
	batch, err := st.conn.PrepareBatch(ctx, q)
	if err != nil {
		end()
		return fmt.Errorf("store: clickhouse: %s: %w", head(q), err)
	}
	cols := batch.Columns()
	exact := len(cols) == len(c.Names)
	for j := 0; exact && j < len(cols); j++ {
		exact = colconv.Exact(string(cols[j].Type()), c.Data[j])
	}
	if !exact {
		_ = batch.Abort()
		batch.Close()
		end()
		return st.Append(ctx, c.Table, c.Names, c.Rows())
	}
	defer end()
	defer batch.Close()
	for j, d := range c.Data {
		if err := batch.Column(j).Append(d); err != nil {
			_ = batch.Abort()
			return fmt.Errorf("%w: %s: column %s: %w", store.ErrBadRows, c.Table, c.Names[j], err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("store: clickhouse: %s: send %d rows: %w", c.Table, c.Len, err)
	}
	return nil
}

// Engine implements store.Store: "clickhouse " and the server's version.
func (st *Store) Engine() string { return "clickhouse " + st.version }

// Database returns the name of the store's database.
func (st *Store) Database() string { return st.db }

// Addr returns the host:port the store is connected to.
func (st *Store) Addr() string { return st.addr }

// Close implements store.Store. It waits for the calls in flight, then
// closes the connections. Closing twice is a no-op.
func (st *Store) Close() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return nil
	}
	st.closed = true
	if err := st.conn.Close(); err != nil {
		return fmt.Errorf("store: clickhouse: close: %w", err)
	}
	return nil
}

// head returns the first 200 bytes of a statement, for error messages.
func head(q string) string {
	const n = 200
	if len(q) <= n {
		return q
	}
	return q[:n] + "..."
}
