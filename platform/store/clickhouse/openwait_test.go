package chstore_test

import (
	"context"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/store"
	"github.com/lowbarena/lowbarena/platform/store/clickhouse/chtest"
)

// TestOpenWaitsForTheServer: a service that starts while its ClickHouse
// server is down waits for it (store.OpenWaiting) instead of exiting:
// the open goes on until the server answers, then the store works; an
// answer that is not "out of reach" (a wrong password) ends it at once,
// and so does a wait longer than MaxWait, with store_unavailable. The
// server is a real one behind a loopback proxy that starts listening only
// after a while, as a server does that comes back.
func TestOpenWaitsForTheServer(t *testing.T) {
	addr := chtest.Start(t)
	ctx := context.Background()

	t.Run("the server comes back", func(t *testing.T) {
		port := freePort(t)
		type result struct {
			st  store.Store
			err error
		}
		done := make(chan result, 1)
		go func() {
			st, err := store.OpenWaiting(ctx, "clickhouse://default@127.0.0.1:"+strconv.Itoa(port)+"/waited?dial_timeout=1s",
				store.RetryOptions{First: 50 * time.Millisecond, MaxWait: time.Minute})
			done <- result{st, err}
		}()
		select {
		case r := <-done:
			t.Fatalf("OpenWaiting returned while nothing listened: %v", r.err)
		case <-time.After(1500 * time.Millisecond):
		}
		proxy(t, port, addr)
		var r result
		select {
		case r = <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("OpenWaiting did not return once the server listened")
		}
		require.NoError(t, r.err)
		defer r.st.Close()
		var rows []struct {
			DB string `ch:"db"`
		}
		require.NoError(t, r.st.Select(ctx, &rows, "SELECT currentDatabase() AS db"))
		require.Equal(t, []struct {
			DB string `ch:"db"`
		}{{"waited"}}, rows)
	})

	t.Run("a wrong password is not waited for", func(t *testing.T) {
		start := time.Now()
		_, err := store.OpenWaiting(ctx, "clickhouse://default:wrong@"+addr+"/db", store.RetryOptions{MaxWait: time.Minute})
		require.Error(t, err)
		require.NotErrorIs(t, err, store.ErrUnavailable)
		require.Less(t, time.Since(start), 30*time.Second, "it waited")
	})

	t.Run("nobody comes back", func(t *testing.T) {
		_, err := store.OpenWaiting(ctx, "clickhouse://127.0.0.1:"+strconv.Itoa(freePort(t))+"/db?dial_timeout=1s",
			store.RetryOptions{First: 50 * time.Millisecond, MaxWait: 500 * time.Millisecond})
		require.ErrorIs(t, err, store.ErrUnavailable)
	})
}

// freePort is a loopback port nobody listens on a moment after.
func freePort(t *testing.T) int {
	t.Helper()
	ports, err := chtest.FreePorts(1)
	require.NoError(t, err)
	return ports[0]
}

// proxy listens on port and copies every connection to and from to,
// until t ends.
func proxy(t *testing.T, port int, to string) {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	require.NoError(t, err)
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", to)
			if err != nil {
				in.Close()
				continue
			}
			wg.Add(2)
			pipe := func(dst, src net.Conn) {
				defer wg.Done()
				_, _ = io.Copy(dst, src)
				_ = dst.Close()
				_ = src.Close()
			}
			go pipe(in, out)
			go pipe(out, in)
		}
	}()
}
