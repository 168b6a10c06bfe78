package score

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/lowbarena/lowbarena/platform/store"
	"github.com/lowbarena/lowbarena/platform/store/retention"
)

// Environment variables of the retention flags.
const (
	// EnvRetentionEvery names the environment variable of
	// --retention-every.
	EnvRetentionEvery = "LOWBARENA_RETENTION_EVERY"
	// EnvRetentionOlderThan names the environment variable of
	// --retention-older-than.
	EnvRetentionOlderThan = "LOWBARENA_RETENTION_OLDER_THAN"
)

// DefaultRetentionAge is the age past which the periodic retention drops
// telemetry, when it runs.
const DefaultRetentionAge = 30 * 24 * time.Hour

// Retention configures the periodic telemetry retention the score service
// runs, as the service that holds the store wherever the arena runs (see
// package retention).
type Retention struct {
	// Every is the time between runs; 0 runs none (the default: dropping
	// data is an operator's choice, and a CronJob of `arena retention`
	// may do it instead).
	Every time.Duration
	// OlderThan is the age past which gpu_samples and requests rows go.
	OlderThan time.Duration
}

// retentionActor runs the retention job at start and then every r.Every,
// until ctx ends. A failed run is logged and retried at the next tick: the
// telemetry it would have dropped waits one interval more, which harms
// nothing.
func retentionActor(st store.Store, r Retention, log *slog.Logger) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		t := time.NewTicker(r.Every)
		defer t.Stop()
		for {
			rep, err := retention.Run(ctx, st, retention.Options{OlderThan: r.OlderThan})
			switch {
			case ctx.Err() != nil:
				return nil
			case err != nil:
				log.Warn("retention: run failed; retrying at the next interval", "err", err, "every", r.Every)
			default:
				log.Info("retention: telemetry past its age dropped", "older_than", retention.FormatAge(r.OlderThan),
					"cutoff_ms", rep.CutoffMs, "partitions", len(rep.Dropped), "rows", rep.Rows(""))
			}
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	}
}

// parseRetention reads the two retention flags' values.
func parseRetention(every, olderThan string) (Retention, error) {
	d, err := time.ParseDuration(every)
	if err != nil || d < 0 {
		return Retention{}, fmt.Errorf("score: --retention-every %q: want a duration such as 24h, or 0 for none", every)
	}
	age, err := retention.ParseAge(olderThan)
	if err != nil {
		return Retention{}, fmt.Errorf("score: --retention-older-than: %w", err)
	}
	return Retention{Every: d, OlderThan: age}, nil
}
