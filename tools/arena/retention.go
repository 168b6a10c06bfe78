package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/store"
	_ "github.com/lowbarena/lowbarena/platform/store/clickhouse"
	"github.com/lowbarena/lowbarena/platform/store/retention"
)

// cmdRetention drops the telemetry past an age (package retention) from
// the store it opens itself: a ClickHouse server (the CronJob's way), or,
// in arena-up, a chDB folder no running arena holds. A running arena's own
// chDB is trimmed by its score service (--retention-every).
func cmdRetention(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("retention", stderr)
	age := retention.Age(30 * 24 * time.Hour)
	fs.Var(&age, "older-than", "drop the gpu_samples and requests partitions whose rows are all older than this: days like 30d or a duration, at least 1d")
	dryRun := fs.Bool("dry-run", false, "list what would be dropped, drop nothing")
	storeURL := fs.String("store", os.Getenv(app.EnvStore), "store URL: clickhouse://user:pass@host:9000/db, or chdb:///abs/dir in arena-up (env "+app.EnvStore+")")
	asJSON := fs.Bool("json", false, "print the report as JSON: cutoff_ms, dry_run, dropped (table, id, value, newest_ms, rows, bytes), kept")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageErr("retention takes no arguments")
	}
	if *storeURL == "" {
		return usageErr("retention needs --store (or %s): the store to trim", app.EnvStore)
	}
	st, err := store.Open(ctx, *storeURL)
	if err != nil {
		return fmt.Errorf("retention: %w", err)
	}
	defer st.Close()
	rep, err := retention.Run(ctx, st, retention.Options{OlderThan: time.Duration(age), DryRun: *dryRun})
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if jerr := enc.Encode(rep); jerr != nil {
			return jerr
		}
	} else {
		printRetention(stdout, rep, st.Engine(), age.String())
	}
	if err != nil {
		return fmt.Errorf("retention: %w", err)
	}
	return nil
}

// printRetention writes the report: one line per partition, then a line
// per table with its rows and bytes.
func printRetention(w io.Writer, rep retention.Report, engine, age string) {
	verb := "dropped"
	if rep.DryRun {
		verb = "would drop (dry run)"
	}
	fmt.Fprintf(w, "retention on %s: rows older than %s (before %s)\n", engine, age, time.UnixMilli(int64(rep.CutoffMs)).UTC().Format(time.RFC3339))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(rep.Dropped) > 0 {
		fmt.Fprintln(tw, "TABLE\tPARTITION\tNEWEST ROW\tROWS\tBYTES")
	}
	for _, p := range rep.Dropped {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\n", p.Table, p.Value, time.UnixMilli(int64(p.NewestMs)).UTC().Format(time.RFC3339), p.Rows, p.Bytes)
	}
	_ = tw.Flush()
	for _, table := range retention.Tables {
		kept, ok := rep.Kept[table]
		if !ok {
			continue
		}
		var n, parts int
		var bytes uint64
		for _, p := range rep.Dropped {
			if p.Table == table {
				parts++
				bytes += p.Bytes
			}
		}
		n = int(rep.Rows(table))
		fmt.Fprintf(w, "%s: %s %d partitions, %d rows, %d bytes; kept %d partitions\n", table, verb, parts, n, bytes, kept)
	}
}
