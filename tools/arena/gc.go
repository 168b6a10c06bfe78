package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/domain/bundle"
	"github.com/lowbarena/lowbarena/platform/artifact/gc"
)

// gcOptions are the artifact collector's settings: how often `arena up`
// runs it (every; 0 never), and its ages (package gc).
type gcOptions struct {
	every, grace, keepFailed time.Duration
}

// register adds the collector's age flags to fs, and with up its
// period: `arena up` takes them as --gc-*, `arena gc` as they are.
func (o *gcOptions) register(fs *flag.FlagSet, up bool) {
	prefix := ""
	if up {
		prefix = "gc-"
		fs.DurationVar(&o.every, "gc-every", time.Hour, "how often the arena collects the artifacts nothing needs (arena gc); 0 never")
	}
	fs.DurationVar(&o.grace, prefix+"grace", gc.DefaultGrace, "no artifact younger than this is collected (puts in flight)")
	fs.DurationVar(&o.keepFailed, prefix+"keep-failed", gc.DefaultKeepFailed,
		"how long a failed or disqualified submission's artifact is kept after its record last changed")
}

func cmdGC(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("gc", stderr)
	natsURL := natsFlag(fs)
	var o gcOptions
	o.register(fs, false)
	del := fs.Bool("delete", false, "delete what the collector finds; without it, only report what it would free")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("gc takes no arguments: arena gc [--delete] [--grace 6h] [--keep-failed 168h] [--json] [--nats URL]")
	}
	c, err := dial(ctx, *natsURL)
	if err != nil {
		return err
	}
	defer c.close()
	rep, err := collect(ctx, c.js, gc.Options{DryRun: !*del, Grace: o.grace, KeepFailed: o.keepFailed})
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	writeGC(stdout, rep)
	return writeUsage(ctx, stdout, c.js)
}

// collect runs the collector once on js.
func collect(ctx context.Context, js jetstream.JetStream, o gc.Options) (gc.Report, error) {
	col, err := gc.Open(ctx, js)
	if err != nil {
		return gc.Report{}, err
	}
	return col.Collect(ctx, o)
}

// writeGC writes a report for people: what was (or would be) freed, by
// kind, and what was kept.
func writeGC(w io.Writer, rep gc.Report) {
	verb := "freed"
	if rep.DryRun {
		verb = "would free (dry run; --delete collects)"
	}
	kinds := make([]string, 0, len(rep.Freed))
	for k := range rep.Freed {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var parts []string
	objects := 0
	for _, k := range kinds {
		t := rep.Freed[k]
		objects += t.Objects
		parts = append(parts, fmt.Sprintf("%s %d (%s)", k, t.Objects, bundle.HumanSize(t.Bytes)))
	}
	fmt.Fprintf(w, "arena gc: %s %s in %d objects", verb, bundle.HumanSize(rep.Bytes()), objects)
	if len(parts) > 0 {
		fmt.Fprintf(w, ": %s", strings.Join(parts, ", "))
	}
	fmt.Fprintf(w, "\nkept %d objects (%s), %d of them (%s) only because they are younger than the grace period\n",
		rep.Kept.Objects, bundle.HumanSize(rep.Kept.Bytes), rep.Young.Objects, bundle.HumanSize(rep.Young.Bytes))
}

// writeUsage writes each stream's bytes against its limit: the room the
// arena has left.
func writeUsage(ctx context.Context, w io.Writer, js jetstream.JetStream) error {
	l := js.ListStreams(ctx)
	var lines []string
	for info := range l.Info() {
		limit := "no limit"
		if info.Config.MaxBytes > 0 {
			limit = fmt.Sprintf("%s (%.0f%%)", bundle.HumanSize(info.Config.MaxBytes), 100*float64(info.State.Bytes)/float64(info.Config.MaxBytes))
		}
		lines = append(lines, fmt.Sprintf("  %-24s %10s of %s", info.Config.Name, bundle.HumanSize(int64(info.State.Bytes)), limit))
	}
	if err := l.Err(); err != nil {
		return fmt.Errorf("gc: list streams: %w", err)
	}
	sort.Strings(lines)
	fmt.Fprintf(w, "JetStream, per node:\n%s\n", strings.Join(lines, "\n"))
	return nil
}
