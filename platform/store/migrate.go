package store

import (
	"context"
	"fmt"
	"time"

	"github.com/lowbarena/lowbarena/schemas"
)

// migrationsDDL creates the table that records applied migrations. A plain
// MergeTree with the ORDER BY clause is taken by ClickHouse 18.16 and by
// chDB 26.x alike.
const migrationsDDL = `CREATE TABLE IF NOT EXISTS schema_migrations (
    version     UInt32,
    name        String,
    applied_ms  UInt64
) ENGINE = MergeTree()
ORDER BY version`

// Migrate applies the migrations of schemas.Migrations that s has not
// recorded yet, in version order, and returns the versions it applied now
// (an empty slice when s was up to date).
//
// Invariants: a migration is recorded in schema_migrations only after all of
// its statements succeeded, so a failed migration is retried whole on the
// next run; its statements must therefore be idempotent (CREATE ... IF NOT
// EXISTS), which the DDL files keep to. Two processes migrating one server
// at once may both apply a migration; with idempotent statements that is
// harmless, and the duplicate record row is ignored (versions are read
// DISTINCT).
func Migrate(ctx context.Context, s Store) ([]int, error) {
	migrations, err := schemas.Migrations()
	if err != nil {
		return nil, fmt.Errorf("store: migrate: %w", err)
	}
	if err := s.Exec(ctx, migrationsDDL); err != nil {
		return nil, fmt.Errorf("store: migrate: create schema_migrations: %w", err)
	}
	var done []struct {
		Version uint32 `ch:"version"`
	}
	if err := s.Select(ctx, &done, "SELECT DISTINCT version FROM schema_migrations"); err != nil {
		return nil, fmt.Errorf("store: migrate: read schema_migrations: %w", err)
	}
	applied := make(map[int]bool, len(done))
	for _, d := range done {
		applied[int(d.Version)] = true
	}
	now := []int{}
	for _, m := range migrations {
		if applied[m.Version] {
			continue
		}
		for i, stmt := range m.Statements {
			if err := s.Exec(ctx, stmt); err != nil {
				return now, fmt.Errorf("store: migration %s, statement %d of %d: %w", m.Name, i+1, len(m.Statements), err)
			}
		}
		row := []any{uint32(m.Version), m.Name, uint64(time.Now().UnixMilli())}
		if err := s.Append(ctx, "schema_migrations", []string{"version", "name", "applied_ms"}, [][]any{row}); err != nil {
			return now, fmt.Errorf("store: migration %s: record it: %w", m.Name, err)
		}
		now = append(now, m.Version)
	}
	return now, nil
}
