package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"syscall"
	"time"
)

// ErrUnavailable is wrapped by the error of a call that gave up waiting
// for a store that could not be reached (code store_unavailable).
var ErrUnavailable = errors.New("store_unavailable: the store could not be reached")

// Unreachable says whether err is the store being out of reach (refused,
// reset or closed connections, a dial that timed out) rather than an
// answer (a syntax error, a missing table): the first passes when the
// server is back, the second never.
func Unreachable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, ErrClosed) {
		return false
	}
	var op *net.OpError
	return errors.As(err, &op) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, net.ErrClosed)
}

// RetryOptions shape Retrying.
type RetryOptions struct {
	// MaxWait bounds how long one call waits for the store to come back;
	// default 5 min. The caller's context bounds it too.
	MaxWait time.Duration
	// First is the first pause; each pause doubles, up to 10 s. Default
	// 250 ms.
	First time.Duration
	// Log is told when a call starts waiting and when the store answers
	// again; nil says nothing.
	Log *slog.Logger
}

// Retrying wraps st so that a call that finds the store out of reach
// (Unreachable) is made again, with a pause that doubles, until it
// succeeds, the store answers with another error, the caller's context
// ends or MaxWait has passed (then the error wraps ErrUnavailable).
//
// Why here: a ClickHouse server that restarts for 30 s must cost the
// arena time, not rows. A handler that writes a row waits in its call
// while the consume loop's heartbeat keeps its message, instead of
// spending one of its deliveries per failed attempt (a stage's five
// deliveries at 1, 2, 4, 8 s of backoff are gone in 15 s, and the
// message would be dead-lettered). Writing the same rows again is safe:
// every table is a ReplacingMergeTree keyed on its rows' natural key
// (see the package doc), so a batch the server stored before the
// connection broke collapses with its second copy.
//
// Methods the wrapper does not name pass to st as they are. A store that
// answers tables (Tabler, the query service's) stays one behind the
// wrapper, its QueryTable waited for like the rest: an interface that
// embeds Store alone would hide it, and a service that serves queries
// (the score service) would refuse to start.
func Retrying(st Store, o RetryOptions) Store {
	r := &retrying{Store: st, o: o.withDefaults()}
	if t, ok := st.(Tabler); ok {
		return &retryingTabler{retrying: r, tab: t}
	}
	return r
}

func (o RetryOptions) withDefaults() RetryOptions {
	if o.MaxWait <= 0 {
		o.MaxWait = 5 * time.Minute
	}
	if o.First <= 0 {
		o.First = 250 * time.Millisecond
	}
	return o
}

// OpenWaiting is Open for a service that may start before its store's
// server does, or while it restarts: an open that finds the store out of
// reach (Unreachable) is tried again with Retrying's pauses, until it
// succeeds, fails otherwise (a wrong password, a bad URL: at once), ctx
// ends or o.MaxWait has passed (then the error wraps ErrUnavailable). The
// store it returns is wrapped in Retrying with o. A service so waits out a
// ClickHouse outage where it would otherwise exit and be restarted in a
// loop by its orchestrator until the server is back.
func OpenWaiting(ctx context.Context, rawURL string, o RetryOptions) (Store, error) {
	o = o.withDefaults()
	var st Store
	err := (&retrying{o: o}).retry(ctx, "open", func() error {
		var err error
		st, err = Open(ctx, rawURL)
		return err
	})
	if err != nil {
		return nil, err
	}
	return Retrying(st, o), nil
}

// retryingTabler is retrying over a store that answers tables.
type retryingTabler struct {
	*retrying
	tab Tabler
}

func (r *retryingTabler) QueryTable(ctx context.Context, query string, limits Limits) (t *Table, err error) {
	err = r.retry(ctx, "query", func() error {
		var qerr error
		t, qerr = r.tab.QueryTable(ctx, query, limits)
		return qerr
	})
	return t, err
}

type retrying struct {
	Store
	o RetryOptions
}

func (r *retrying) Append(ctx context.Context, table string, columns []string, rows [][]any) error {
	return r.retry(ctx, "append to "+table, func() error { return r.Store.Append(ctx, table, columns, rows) })
}

func (r *retrying) Select(ctx context.Context, dest any, query string, args ...any) error {
	return r.retry(ctx, "select", func() error { return r.Store.Select(ctx, dest, query, args...) })
}

func (r *retrying) Exec(ctx context.Context, query string, args ...any) error {
	return r.retry(ctx, "exec", func() error { return r.Store.Exec(ctx, query, args...) })
}

// Unwrap returns the wrapped store.
func (r *retrying) Unwrap() Store { return r.Store }

func (r *retrying) retry(ctx context.Context, what string, call func() error) error {
	err := call()
	if !Unreachable(err) {
		return err
	}
	start := time.Now()
	pause := r.o.First
	attempts := 1
	if r.o.Log != nil {
		r.o.Log.Warn("store out of reach; waiting for it", "call", what, "err", err)
	}
	for {
		if time.Since(start)+pause > r.o.MaxWait {
			return fmt.Errorf("%w after %d attempts over %s: %w", ErrUnavailable, attempts, time.Since(start).Round(time.Millisecond), err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w (waiting for it: %w)", ErrUnavailable, ctx.Err(), err)
		case <-time.After(pause):
		}
		pause = min(2*pause, 10*time.Second)
		attempts++
		if err = call(); !Unreachable(err) {
			if r.o.Log != nil && err == nil {
				r.o.Log.Info("store answers again", "call", what, "attempts", attempts, "waited", time.Since(start).Round(time.Millisecond))
			}
			return err
		}
	}
}
