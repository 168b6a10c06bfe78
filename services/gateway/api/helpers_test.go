package api

import (
	"context"
	"log/slog"
	"sync"
)

// captureLog returns a logger that appends each record's message and
// attributes to out.
func captureLog(out *[]string) *slog.Logger {
	return slog.New(&captureHandler{out: out, mu: &sync.Mutex{}})
}

type captureHandler struct {
	out   *[]string
	mu    *sync.Mutex
	attrs []slog.Attr
}

func (h *captureHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *captureHandler) Handle(_ context.Context, r slog.Record) error {
	line := r.Message
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.Key + "=" + a.Value.String()
		return true
	})
	h.mu.Lock()
	*h.out = append(*h.out, line)
	h.mu.Unlock()
	return nil
}

func (h *captureHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &captureHandler{out: h.out, mu: h.mu, attrs: append(h.attrs, as...)}
}

func (h *captureHandler) WithGroup(string) slog.Handler { return h }
