package store_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/store"
)

// flaky is a store whose calls fail with fail's errors, one per call,
// then succeed; it counts the calls.
type flaky struct {
	store.Store
	fail  []error
	calls int
}

func (f *flaky) next() error {
	f.calls++
	if len(f.fail) > 0 {
		err := f.fail[0]
		f.fail = f.fail[1:]
		return err
	}
	return nil
}

func (f *flaky) Append(context.Context, string, []string, [][]any) error { return f.next() }
func (f *flaky) Select(context.Context, any, string, ...any) error       { return f.next() }
func (f *flaky) Exec(context.Context, string, ...any) error              { return f.next() }

func refused() error {
	return fmt.Errorf("store: clickhouse: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
}

func TestUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", refused(), true},
		{"reset mid-insert", fmt.Errorf("insert: %w", syscall.ECONNRESET), true},
		{"server closed the connection", fmt.Errorf("read: %w", io.EOF), true},
		{"a syntax error", errors.New("code: 62, message: Syntax error"), false},
		{"the store was closed", fmt.Errorf("x: %w", store.ErrClosed), false},
		{"the caller gave up", fmt.Errorf("x: %w", context.Canceled), false},
		{"no error", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, store.Unreachable(tc.err))
		})
	}
}

func TestRetrying(t *testing.T) {
	syntax := errors.New("code: 62, message: Syntax error")
	for _, tc := range []struct {
		name      string
		fail      []error
		maxWait   time.Duration
		wantCalls int
		wantErr   error
	}{
		{"answers at once", nil, time.Minute, 1, nil},
		{"down for three calls, then back", []error{refused(), refused(), refused()}, time.Minute, 4, nil},
		{"an answer is not waited on", []error{syntax}, time.Minute, 1, syntax},
		{"down, then an answer", []error{refused(), syntax}, time.Minute, 2, syntax},
		{"down past the wait", []error{refused(), refused(), refused(), refused(), refused(), refused()}, 30 * time.Millisecond, 0, store.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, call := range []struct {
				name string
				do   func(st store.Store) error
			}{
				{"append", func(st store.Store) error { return st.Append(context.Background(), "t", []string{"a"}, [][]any{{1}}) }},
				{"select", func(st store.Store) error { return st.Select(context.Background(), &[]struct{}{}, "SELECT 1") }},
				{"exec", func(st store.Store) error { return st.Exec(context.Background(), "SELECT 1") }},
			} {
				f := &flaky{fail: append([]error(nil), tc.fail...)}
				err := call.do(store.Retrying(f, store.RetryOptions{MaxWait: tc.maxWait, First: 5 * time.Millisecond}))
				if tc.wantErr == nil {
					require.NoError(t, err, call.name)
				} else {
					require.ErrorIs(t, err, tc.wantErr, call.name)
				}
				if tc.wantCalls > 0 {
					require.Equal(t, tc.wantCalls, f.calls, call.name)
				} else {
					require.Greater(t, f.calls, 1, "%s: it waited before giving up", call.name)
					require.Less(t, f.calls, 7, "%s: it gave up at its bound", call.name)
				}
			}
		})
	}
}

// tabling is a flaky store that answers tables.
type tabling struct{ flaky }

func (f *tabling) QueryTable(context.Context, string, store.Limits) (*store.Table, error) {
	if err := f.next(); err != nil {
		return nil, err
	}
	return &store.Table{}, nil
}

// TestRetryingKeepsTables: a store that answers tables still does behind
// the wrapper (the score service's query service needs one), waited for
// like the other calls; one that does not, does not.
func TestRetryingKeepsTables(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   store.Store
		want bool
	}{
		{"a store that answers tables", &tabling{flaky{fail: []error{refused(), refused()}}}, true},
		{"a store that does not", &flaky{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab, ok := store.Retrying(tc.st, store.RetryOptions{First: 5 * time.Millisecond}).(store.Tabler)
			require.Equal(t, tc.want, ok)
			if !ok {
				return
			}
			got, err := tab.QueryTable(context.Background(), "SELECT 1", store.Limits{})
			require.NoError(t, err)
			require.NotNil(t, got)
			require.Equal(t, 3, tc.st.(*tabling).calls, "two refusals waited for, then the answer")
		})
	}
}

func TestRetryingStopsWithTheCaller(t *testing.T) {
	f := &flaky{fail: []error{refused(), refused(), refused(), refused(), refused(), refused(), refused(), refused()}}
	ctx, cancel := context.WithCancel(context.Background())
	st := store.Retrying(f, store.RetryOptions{First: 20 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- st.Append(ctx, "t", nil, nil) }()
	cancel()
	err := <-done
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, f.calls, 8, "it stopped when its caller did")
}
