package score_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/store"
	"github.com/lowbarena/lowbarena/services/score"
)

// TestPeriodicRetention: a score service with --retention-every drops the
// telemetry past the age when it starts, and keeps the rest.
func TestPeriodicRetention(t *testing.T) {
	b, st, ctx := env(t)
	now := time.Now()
	age := 30 * 24 * time.Hour
	rows := []store.GPUSample{
		{TsMs: uint64(now.Add(-3 * age).UnixMilli()), JobID: "old", Seq: 1},
		{TsMs: uint64(now.Add(-2 * age).UnixMilli()), JobID: "old", Seq: 2},
		{TsMs: uint64(now.UnixMilli()), JobID: "new", Seq: 3},
	}
	require.NoError(t, store.Insert(ctx, st, rows))

	s, err := score.New(ctx, b, quiet(), score.Options{Store: st, Retention: score.Retention{Every: time.Hour, OlderThan: age}})
	require.NoError(t, err)
	var run func(context.Context) error
	for _, a := range s.Actors() {
		if a.Name == "retention" {
			run = a.Run
		}
	}
	require.NotNil(t, run, "a service with an interval runs the retention actor")
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(rctx) }()
	jobs := func() []string {
		var out []struct {
			JobID string `ch:"job_id"`
		}
		require.NoError(t, st.Select(ctx, &out, "SELECT DISTINCT job_id FROM gpu_samples ORDER BY job_id"))
		var ids []string
		for _, o := range out {
			ids = append(ids, o.JobID)
		}
		return ids
	}
	require.Eventually(t, func() bool { return len(jobs()) == 1 }, 20*time.Second, 50*time.Millisecond)
	require.Equal(t, []string{"new"}, jobs())
	cancel()
	require.NoError(t, <-done, "the actor ends quietly with its context")
}

func TestRetentionFlags(t *testing.T) {
	b, st, ctx := env(t)
	tests := []struct {
		name      string
		args      []string
		wantErr   string
		retention bool
	}{
		{"default runs none", nil, "", false},
		{"an interval runs it", []string{"--retention-every", "24h"}, "", true},
		{"zero runs none", []string{"--retention-every", "0", "--retention-older-than", "7d"}, "", false},
		{"bad interval", []string{"--retention-every", "daily"}, "--retention-every", false},
		{"negative interval", []string{"--retention-every", "-1h"}, "--retention-every", false},
		{"age too short", []string{"--retention-every", "1h", "--retention-older-than", "2h"}, "--retention-older-than", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(score.EnvRetentionEvery, "")
			t.Setenv(score.EnvRetentionOlderThan, "")
			c := score.Component()
			cfg := app.DefaultConfig(c.Name)
			fs := c.FlagSet(&cfg)
			require.Equal(t, "30d", fs.Lookup("retention-older-than").DefValue)
			require.NoError(t, fs.Parse(tt.args))
			actors, err := c.Build(ctx, &app.Runtime{Bus: b, Log: quiet(), Store: st})
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			has := false
			for _, a := range actors {
				has = has || a.Name == "retention"
			}
			require.Equal(t, tt.retention, has)
		})
	}
}
