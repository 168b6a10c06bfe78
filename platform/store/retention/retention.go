// Package retention drops the telemetry the arena no longer needs: the
// daily partitions of gpu_samples and requests whose rows are all older
// than a configured age.
//
// The schema (schemas/clickhouse/0001_init.sql) partitions both tables by
// day of ts_ms and leaves retention to ALTER TABLE ... DROP PARTITION, the
// one way that works on every engine the store runs on: chDB (ClickHouse
// 26.x) and a ClickHouse server as old as 18.16, which has no TTL. The job
// works from what the engine reports, not from the DDL's text: the
// partition key from system.tables, each partition's newest ts_ms and row
// count from the table itself (its _partition_id virtual column, which
// 18.16 has), and the bytes on disk from system.parts.
//
// The history tables (quality_items, stage_results, scores, round_steps)
// are never dropped: they are the leaderboard, the rounds and the records
// that rescore reads, and they grow by rows per submission, not per second.
package retention

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lowbarena/lowbarena/platform/store"
)

// Tables are the tables the job may trim, in the order it trims them: the
// per-second telemetry of the runners.
var Tables = []string{"gpu_samples", "requests"}

// TimeColumn is the column, in unix milliseconds, that ages a row and that
// the tables' partition keys are computed from.
const TimeColumn = "ts_ms"

// MinAge is the shortest age the job takes: one daily partition. A shorter
// age would leave nothing but the current day, which is much more likely a
// typing slip than a policy.
const MinAge = 24 * time.Hour

// Errors of Run and ParseAge.
var (
	// ErrAge is wrapped by the error of an age that is not a duration of
	// at least MinAge.
	ErrAge = errors.New("retention: age")
	// ErrTable is wrapped by the error of a table the job does not trim.
	ErrTable = errors.New("retention: not a telemetry table")
	// ErrPartitionKey is wrapped by the error of a table whose partition
	// key is not computed from TimeColumn, which the job cannot age.
	ErrPartitionKey = errors.New("retention: partition key is not over " + TimeColumn)
)

// Options configure one run.
type Options struct {
	// OlderThan is the age past which rows go (at least MinAge).
	OlderThan time.Duration
	// Now is the time the age counts back from; zero means time.Now().
	Now time.Time
	// Tables are the tables to trim, a subset of Tables; nil means all of
	// Tables.
	Tables []string
	// DryRun lists what would be dropped and drops nothing.
	DryRun bool
}

// Partition is one partition the run dropped (or, in a dry run, would
// drop).
type Partition struct {
	Table string `json:"table"`
	// ID is the partition's id, as in system.parts.partition_id and
	// ALTER TABLE ... DROP PARTITION ID.
	ID string `json:"id"`
	// Value is the partition key's value, for example 20260101.
	Value string `json:"value"`
	// NewestMs is the partition's newest ts_ms, older than the cut-off.
	NewestMs uint64 `json:"newest_ms"`
	// Rows counts the partition's rows, duplicates not yet merged away
	// included.
	Rows uint64 `json:"rows"`
	// Bytes is the partition's size on disk.
	Bytes uint64 `json:"bytes"`
}

// Report is what one run found and did.
type Report struct {
	// CutoffMs is the cut-off in unix milliseconds: rows older than it are
	// past the age.
	CutoffMs uint64 `json:"cutoff_ms"`
	// DryRun is true when nothing was dropped.
	DryRun bool `json:"dry_run"`
	// Dropped lists the partitions dropped (or that a dry run would
	// drop), table by table in Tables order, oldest first.
	Dropped []Partition `json:"dropped"`
	// Kept counts, per table, the partitions left in place.
	Kept map[string]int `json:"kept"`
}

// Rows sums the rows of the partitions dropped from table ("" for all).
func (r Report) Rows(table string) uint64 {
	var n uint64
	for _, p := range r.Dropped {
		if table == "" || p.Table == table {
			n += p.Rows
		}
	}
	return n
}

// Run drops, from each table of o, the partitions whose rows are all older
// than the cut-off, o.Now - o.OlderThan, and returns what it dropped.
//
// Invariant: a partition is dropped only when its newest row is older than
// the cut-off AND its key value differs from the key value of the cut-off
// itself. The partition keys are monotonic in ts_ms (a day of it), so every
// row at or after the cut-off, already written or written while the job
// runs, has a key value at least the cut-off's, and lands in no dropped
// partition; the partition that holds the cut-off's day is kept whole until
// a later run finds the day past.
func Run(ctx context.Context, st store.Store, o Options) (Report, error) {
	if o.OlderThan < MinAge {
		return Report{}, fmt.Errorf("%w: %s is shorter than the minimum %s", ErrAge, FormatAge(o.OlderThan), FormatAge(MinAge))
	}
	tables := o.Tables
	if tables == nil {
		tables = Tables
	}
	for _, t := range tables {
		if !slices.Contains(Tables, t) {
			return Report{}, fmt.Errorf("%w: %q (the job trims %s)", ErrTable, t, strings.Join(Tables, ", "))
		}
	}
	now := o.Now
	if now.IsZero() {
		now = time.Now()
	}
	cutoff := now.Add(-o.OlderThan).UnixMilli()
	if cutoff < 0 {
		cutoff = 0
	}
	rep := Report{CutoffMs: uint64(cutoff), DryRun: o.DryRun, Dropped: []Partition{}, Kept: map[string]int{}}
	for _, table := range tables {
		dropped, kept, err := trim(ctx, st, table, rep.CutoffMs, o.DryRun)
		rep.Dropped = append(rep.Dropped, dropped...)
		rep.Kept[table] = kept
		if err != nil {
			return rep, err
		}
	}
	return rep, nil
}

type partitionRow struct {
	ID     string `ch:"id"`
	Value  string `ch:"value"`
	Newest uint64 `ch:"newest"`
	Rows   uint64 `ch:"n"`
}

type bytesRow struct {
	ID    string `ch:"id"`
	Bytes uint64 `ch:"bytes"`
}

// trim drops table's partitions past cutoff and returns them and how many
// it kept. On an error it returns the partitions dropped before it.
func trim(ctx context.Context, st store.Store, table string, cutoff uint64, dryRun bool) ([]Partition, int, error) {
	key, err := partitionKey(ctx, st, table)
	if err != nil {
		return nil, 0, err
	}
	// The key is the engine's own text of the table's PARTITION BY, read
	// from system.tables; table is one of Tables. Neither comes from a
	// caller's input.
	var parts []partitionRow
	q := "SELECT _partition_id AS id, toString(any(" + key + ")) AS value, max(" + TimeColumn + ") AS newest, count() AS n FROM " + table + " GROUP BY id ORDER BY newest"
	if err := st.Select(ctx, &parts, q); err != nil {
		return nil, 0, fmt.Errorf("retention: %s: list partitions: %w", table, err)
	}
	var at []struct {
		Value string `ch:"value"`
	}
	if err := st.Select(ctx, &at, "SELECT toString("+key+") AS value FROM (SELECT toUInt64(?) AS "+TimeColumn+")", cutoff); err != nil {
		return nil, 0, fmt.Errorf("retention: %s: partition of the cut-off: %w", table, err)
	}
	if len(at) != 1 {
		return nil, 0, fmt.Errorf("retention: %s: partition of the cut-off: %d rows, want 1", table, len(at))
	}
	var sizes []bytesRow
	if err := st.Select(ctx, &sizes, `SELECT partition_id AS id, sum(bytes_on_disk) AS bytes FROM system.parts
		WHERE database = currentDatabase() AND table = ? AND active GROUP BY id`, table); err != nil {
		return nil, 0, fmt.Errorf("retention: %s: partition sizes: %w", table, err)
	}
	bytes := make(map[string]uint64, len(sizes))
	for _, s := range sizes {
		bytes[s.ID] = s.Bytes
	}

	var dropped []Partition
	kept := 0
	for _, p := range parts {
		if p.Newest >= cutoff || p.Value == at[0].Value {
			kept++
			continue
		}
		if !dryRun {
			if err := st.Exec(ctx, "ALTER TABLE "+table+" DROP PARTITION ID ?", p.ID); err != nil {
				return dropped, kept, fmt.Errorf("retention: %s: drop partition %s: %w", table, p.ID, err)
			}
		}
		dropped = append(dropped, Partition{Table: table, ID: p.ID, Value: p.Value, NewestMs: p.Newest, Rows: p.Rows, Bytes: bytes[p.ID]})
	}
	return dropped, kept, nil
}

// partitionKey returns table's PARTITION BY expression as the engine
// prints it.
func partitionKey(ctx context.Context, st store.Store, table string) (string, error) {
	var rows []struct {
		Key string `ch:"partition_key"`
	}
	if err := st.Select(ctx, &rows, "SELECT partition_key FROM system.tables WHERE database = currentDatabase() AND name = ?", table); err != nil {
		return "", fmt.Errorf("retention: %s: partition key: %w", table, err)
	}
	if len(rows) != 1 {
		return "", fmt.Errorf("retention: %s: no such table in the store's database", table)
	}
	if !strings.Contains(rows[0].Key, TimeColumn) {
		return "", fmt.Errorf("%w: %s is partitioned by %q", ErrPartitionKey, table, rows[0].Key)
	}
	return rows[0].Key, nil
}

// ParseAge reads an age: a whole number of days ("30d") or a Go duration
// ("36h"), of at least MinAge.
func ParseAge(s string) (time.Duration, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 100*365 {
			return 0, fmt.Errorf("%w: %q: want days like 30d or a duration like 36h", ErrAge, s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("%w: %q: want days like 30d or a duration like 36h", ErrAge, s)
		}
	}
	if d < MinAge {
		return 0, fmt.Errorf("%w: %q is shorter than the minimum %s", ErrAge, s, FormatAge(MinAge))
	}
	return d, nil
}

// FormatAge writes an age as ParseAge reads it: whole days as "30d",
// anything else as a Go duration.
func FormatAge(d time.Duration) string {
	if d > 0 && d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	return d.String()
}

// Age is a flag.Value of an age (ParseAge), for --older-than flags.
type Age time.Duration

// String implements flag.Value.
func (a *Age) String() string { return FormatAge(time.Duration(*a)) }

// Set implements flag.Value.
func (a *Age) Set(s string) error {
	d, err := ParseAge(s)
	if err != nil {
		return err
	}
	*a = Age(d)
	return nil
}
