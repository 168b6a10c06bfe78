//go:build embedded

package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/lowbarena/lowbarena/platform/artifact/gc"
)

// collectEvery runs the collector every o.every until ctx ends, and logs
// what each run freed; a run that fails is logged and the next tries
// again.
func collectEvery(ctx context.Context, dial func(context.Context) (*client, error), o gcOptions, log *slog.Logger) {
	t := time.NewTicker(o.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c, err := dial(ctx)
		if err != nil {
			log.Warn("artifact collection: connect", "err", err)
			continue
		}
		rep, err := collect(ctx, c.js, gc.Options{Grace: o.grace, KeepFailed: o.keepFailed, Log: log})
		c.close()
		if err != nil {
			log.Warn("artifact collection", "err", err)
			continue
		}
		log.Info("artifacts collected", "bytes_freed", rep.Bytes(), "objects_freed", len(rep.Deleted),
			"manifests", rep.Freed[gc.KindManifest].Objects, "files", rep.Freed[gc.KindFile].Objects, "orphans", rep.Freed[gc.KindOrphan].Objects,
			"kept_bytes", rep.Kept.Bytes)
	}
}
