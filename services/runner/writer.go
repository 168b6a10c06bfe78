package runner

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// rowWriter writes one job's telemetry and request rows in the
// background, one batch after another in the order they came, so that a
// store that is out of reach (and waited for: store.Retrying) stalls
// neither the GPU sampler, which also watches the engine's memory cap,
// nor the workloads. flush waits until every batch is written: a job's
// outcome is published after its rows, as when they were written in
// line.
//
// Bounds: at most maxPending batches wait (a batch is 50 samples, or a
// workload's requests: 1,024 batches hold over an hour of 10 Hz
// samples); a batch past that is dropped and counted, never blocking the
// sampler. A write that fails after the store's own wait is logged and
// counted, and the next batch is tried.
type rowWriter struct {
	log   *slog.Logger
	queue chan func(context.Context) error
	done  chan struct{}
	// mu guards closed: a batch that comes after flush is dropped.
	mu      sync.Mutex
	closed  bool
	dropped atomic.Int64
	failed  atomic.Int64
}

// maxPending bounds the batches a job's writer holds.
const maxPending = 1024

func newRowWriter(log *slog.Logger) *rowWriter {
	w := &rowWriter{log: log, queue: make(chan func(context.Context) error, maxPending), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *rowWriter) run() {
	defer close(w.done)
	// The writes outlive the job's context: a runner told to stop still
	// writes what its job measured, within flush's bound.
	ctx := context.Background()
	for write := range w.queue {
		if err := write(ctx); err != nil {
			w.failed.Add(1)
			w.log.Warn("rows not written", "err", err)
		}
	}
}

// add queues a batch; it never blocks.
func (w *rowWriter) add(write func(context.Context) error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		w.dropped.Add(1)
		return
	}
	select {
	case w.queue <- write:
	default:
		w.dropped.Add(1)
	}
}

// flush stops taking batches and waits until every queued one is
// written, or wait has passed. It reports whether all were written and
// how many batches were dropped or failed.
func (w *rowWriter) flush(wait time.Duration) (ok bool, dropped, failed int64) {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.queue)
	}
	w.mu.Unlock()
	select {
	case <-w.done:
		ok = true
	case <-time.After(wait):
	}
	return ok, w.dropped.Load(), w.failed.Load()
}
