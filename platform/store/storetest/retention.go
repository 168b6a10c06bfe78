package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/store"
	"github.com/lowbarena/lowbarena/platform/store/retention"
)

// testRetention writes telemetry days apart and checks that the retention
// job drops the days past the age, keeps the rest (the day of the cut-off
// whole), drops nothing in a dry run and never touches the history tables.
//
// The times are at midday UTC, so the day partitions are the same in any
// server time zone within eleven hours of UTC (the test servers run in UTC).
func testRetention(t *testing.T, open Opener) {
	st := open(t)
	ctx := ctxFor(t)
	day := 24 * time.Hour
	now := time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC)
	age := 5 * day
	cutoff := now.Add(-age)
	ms := func(tm time.Time) uint64 { return uint64(tm.UnixMilli()) }

	// when, and how many rows at that moment; which are past the age.
	type batch struct {
		at    time.Time
		rows  int
		drops bool
	}
	batches := []batch{
		{now.Add(-10 * day), 3, true},
		{now.Add(-10*day + time.Hour), 2, true}, // same day partition as the one above
		{now.Add(-7 * day), 4, true},
		{cutoff.Add(-time.Minute), 1, false}, // older than the cut-off, but on its day: kept
		{cutoff.Add(day), 2, false},
		{now.Add(-day), 5, false},
		{now, 1, false},
	}
	var samples []store.GPUSample
	var requests []store.Request
	seq := 0
	for _, b := range batches {
		for range b.rows {
			seq++
			samples = append(samples, store.GPUSample{TsMs: ms(b.at), Pod: "pod", JobID: "j", RunID: "r", Seq: uint64(seq)})
			requests = append(requests, store.Request{TsMs: ms(b.at), JobID: "j", RunID: "r", Workload: "chat", Seq: uint32(seq), OK: 1})
		}
	}
	require.NoError(t, store.Insert(ctx, st, samples))
	require.NoError(t, store.Insert(ctx, st, requests))
	history := []store.Score{{TsMs: ms(now.Add(-300 * day)), SubmissionID: "s-old", Policy: "p"}}
	require.NoError(t, store.Insert(ctx, st, history))

	// What the batches say must go and must stay; gone is the newest ts_ms
	// of each day partition that goes, oldest first.
	var wantGone, wantLeft uint64
	for _, b := range batches {
		if b.drops {
			wantGone += uint64(b.rows)
		} else {
			wantLeft += uint64(b.rows)
		}
	}
	gone := []uint64{ms(batches[1].at), ms(batches[2].at)}
	total := wantGone + wantLeft

	counts := func() map[string]uint64 {
		out := map[string]uint64{}
		for _, table := range retention.Tables {
			out[table] = count(t, st, "SELECT count() AS n FROM "+table)
		}
		return out
	}
	newest := func(rep retention.Report, table string) []uint64 {
		var out []uint64
		for _, p := range rep.Dropped {
			if p.Table == table {
				require.NotEmpty(t, p.ID)
				require.NotEmpty(t, p.Value)
				require.Less(t, p.NewestMs, rep.CutoffMs)
				out = append(out, p.NewestMs)
			}
		}
		return out
	}

	opts := retention.Options{OlderThan: age, Now: now, DryRun: true}
	dry, err := retention.Run(ctx, st, opts)
	require.NoError(t, err)
	require.True(t, dry.DryRun)
	require.Equal(t, ms(cutoff), dry.CutoffMs)
	require.Equal(t, map[string]uint64{"gpu_samples": total, "requests": total}, counts(), "a dry run drops nothing")
	for _, table := range retention.Tables {
		require.Equal(t, wantGone, dry.Rows(table), table)
		require.Equal(t, gone, newest(dry, table), table)
	}

	opts.DryRun = false
	rep, err := retention.Run(ctx, st, opts)
	require.NoError(t, err)
	require.Equal(t, dry.Dropped, rep.Dropped, "the run drops what the dry run listed")
	require.Equal(t, map[string]uint64{"gpu_samples": wantLeft, "requests": wantLeft}, counts())
	for _, table := range retention.Tables {
		require.Zero(t, count(t, st, "SELECT count() AS n FROM "+table+" WHERE ts_ms < ?", ms(batches[3].at)),
			"no row older than the cut-off's day is left")
		require.Equal(t, 4, rep.Kept[table], "the cut-off's day, the day after, yesterday and today")
	}
	require.Equal(t, uint64(1), count(t, st, "SELECT count() AS n FROM scores"), "history tables are not retention's")

	again, err := retention.Run(ctx, st, opts)
	require.NoError(t, err)
	require.Empty(t, again.Dropped, "a second run finds nothing more")

	t.Run("refusals", func(t *testing.T) {
		_, err := retention.Run(ctx, st, retention.Options{OlderThan: time.Hour, Now: now})
		require.ErrorIs(t, err, retention.ErrAge)
		_, err = retention.Run(ctx, st, retention.Options{OlderThan: age, Now: now, Tables: []string{"scores"}})
		require.ErrorIs(t, err, retention.ErrTable)
		require.Equal(t, uint64(1), count(t, st, "SELECT count() AS n FROM scores"))
	})
}
