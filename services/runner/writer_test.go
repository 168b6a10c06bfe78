package runner

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A store that is out of reach holds the job's rows, never the sampler:
// add returns at once while the first write waits, every batch is
// written in order once the store is back, and flush returns after the
// last.
func TestRowWriterWaitsForTheStoreNotTheSampler(t *testing.T) {
	w := newRowWriter(slog.New(slog.DiscardHandler))
	back := make(chan struct{})
	var mu sync.Mutex
	var written []int
	for i := range 100 {
		w.add(func(context.Context) error {
			if i == 0 {
				<-back // the store is down until the sampler has queued everything
			}
			mu.Lock()
			written = append(written, i)
			mu.Unlock()
			return nil
		})
	}
	mu.Lock()
	require.Empty(t, written, "nothing is written while the store is down")
	mu.Unlock()
	close(back)
	ok, dropped, failed := w.flush(time.Minute)
	require.True(t, ok)
	require.Zero(t, dropped)
	require.Zero(t, failed)
	require.Len(t, written, 100)
	for i, n := range written {
		require.Equal(t, i, n, "in the order they came")
	}
}

func TestRowWriterBounds(t *testing.T) {
	for _, tc := range []struct {
		name        string
		batches     int
		stuck       bool
		wantOK      bool
		wantDropped int64
	}{
		{"within its bound", maxPending, false, true, 0},
		{"past its bound the sampler is not held: batches are dropped and counted", maxPending + 10, false, true, 10},
		{"a store that never comes back: flush gives up at its wait", 3, true, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newRowWriter(slog.New(slog.DiscardHandler))
			gate := make(chan struct{})
			defer close(gate)
			for i := range tc.batches {
				w.add(func(context.Context) error {
					if i == 0 {
						if tc.stuck {
							<-gate
						} else {
							select {
							case <-gate:
							case <-time.After(50 * time.Millisecond):
							}
						}
					}
					return nil
				})
			}
			ok, dropped, _ := w.flush(time.Second)
			require.Equal(t, tc.wantOK, ok)
			// The first batch may leave the queue as the writer takes it,
			// making room for one more.
			require.LessOrEqual(t, dropped, tc.wantDropped)
			require.GreaterOrEqual(t, dropped, max(tc.wantDropped-1, 0))
			w.add(func(context.Context) error { return nil })
			_, after, _ := w.flush(0)
			require.Equal(t, dropped+1, after, "a batch after flush is dropped, never sent on a closed queue")
		})
	}
}
