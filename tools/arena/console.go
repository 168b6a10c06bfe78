package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/ce"
	"github.com/lowbarena/lowbarena/platform/ctl"
)

// LogFile is where `arena up` writes its structured logs, in its data
// folder, unless --log-format json asks for them on standard error.
const LogFile = "arena.log"

// logDestination opens where arena up's structured logs go: DATA/arena.log
// (appended to) for text, standard error for json. close closes the file.
func logDestination(data, format string, stderr io.Writer) (w io.Writer, where string, close func(), err error) { //nolint:unused // used by arena up (-tags embedded)
	switch strings.ToLower(format) {
	case "json":
		return stderr, "standard error (JSON)", func() {}, nil
	case "text", "":
	default:
		return nil, "", nil, usageErr("--log-format %q: want text (to %s in the data folder) or json (to standard error)", format, LogFile)
	}
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, "", nil, fmt.Errorf("up: create data folder: %w", err)
	}
	p := filepath.Join(data, LogFile)
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, "", nil, fmt.Errorf("up: open the log file: %w", err)
	}
	abs, _ := filepath.Abs(p)
	return f, abs, func() { _ = f.Close() }, nil
}

// follower prints what a person follows while the arena runs: each
// submission as it arrives and moves through its stages, the runners'
// progress (live bars on a terminal), each record once its stages have
// ended, each round step by step with its progress bar, and the
// leaderboard when a round ends.
type follower struct {
	t      *term
	url    string
	served []string
	// connect reaches the arena: the CLI's dial by default; `arena up`
	// and `arena demo` dial as their own arena's operator.
	connect func(ctx context.Context) (*client, error)

	mu      sync.Mutex
	printed map[string]bool // records printed, by submission id
	// roundEnded is told each round that ended, once its result and the
	// leaderboard are printed.
	roundEnded chan string
	ready      chan struct{}
}

func newFollower(natsURL string, served []string, out io.Writer) *follower {
	return &follower{t: newTerm(out), url: natsURL, served: served, printed: map[string]bool{},
		roundEnded: make(chan string, 16), ready: make(chan struct{})}
}

// dialer is how the follower reaches the arena: connect, or the CLI's
// dial.
func (f *follower) dialer() func(ctx context.Context) (*client, error) {
	if f.connect != nil {
		return f.connect
	}
	return func(ctx context.Context) (*client, error) { return dial(ctx, f.url) }
}

// run follows the arena until ctx ends. Events and records that were
// there before it started are not printed.
func (f *follower) run(ctx context.Context) error { //nolint:unused // used by arena up and demo (-tags embedded)
	c, err := f.dialer()(ctx)
	if err != nil {
		return err
	}
	defer c.close()
	cons, err := c.js.OrderedConsumer(ctx, events.StreamArena, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverNewPolicy, FilterSubjects: []string{events.SubjectRootArena + ".>"}})
	if err != nil {
		return fmt.Errorf("follow: %w", err)
	}
	kv, err := c.submissions(ctx)
	if err != nil {
		return err
	}
	w, err := kv.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		return fmt.Errorf("follow the records: %w", err)
	}
	defer func() { _ = w.Stop() }()
	go func() {
		for e := range w.Updates() {
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			var r record.Submission
			if json.Unmarshal(e.Value(), &r) == nil {
				f.record(&r)
			}
		}
	}()
	close(f.ready)
	for {
		msg, err := cons.Next(jetstream.FetchContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// An idle stream ends a pull with a timeout; keep waiting.
			if errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
				continue
			}
			return fmt.Errorf("follow: %w", err)
		}
		if ev, err := ce.Decode(msg.Headers(), msg.Data()); err == nil {
			f.event(ctx, ev)
		}
	}
}

// record prints a record once, when its stages have ended.
func (f *follower) record(r *record.Submission) {
	if !settled(r, f.served) {
		return
	}
	f.mu.Lock()
	done := f.printed[r.ID]
	f.printed[r.ID] = true
	f.mu.Unlock()
	if done {
		return
	}
	var b strings.Builder
	b.WriteString("\n")
	renderRecord(&b, r)
	f.t.Printf("%s", b.String())
}

// event prints one event for people.
func (f *follower) event(ctx context.Context, ev event.Event) {
	at := ev.Time().Local().Format("15:04:05")
	spec, ok := events.Lookup(events.Type(ev.Type()))
	if !ok {
		return
	}
	if ev.Subject() == "" {
		ev.SetSubject(subjectOf(ev))
	}
	var d map[string]any
	_ = json.Unmarshal(ev.Data(), &d)
	str := func(k string) string { s, _ := d[k].(string); return s }
	num := func(k string) int { n, _ := d[k].(float64); return int(n) }
	switch {
	case spec.Type == events.SubmissionReceived:
		f.t.Printf("%s  %s  received: %s", at, ev.Subject(), gist(ev))
	case spec.Stage != "":
		line := fmt.Sprintf("%s  %s  %-10s %s", at, ev.Subject(), spec.Stage, spec.Verb)
		switch spec.Verb {
		case "failed":
			line = fmt.Sprintf("%s  %s  %-10s FAILED %s: %s", at, ev.Subject(), spec.Stage, str("reason"), str("message"))
		case "skipped":
			line = fmt.Sprintf("%s  %s  %-10s skipped: %s", at, ev.Subject(), spec.Stage, str("reason"))
		default:
			if g := gist(ev); g != "" && spec.Verb == "completed" {
				line += " · " + g
			}
		}
		f.t.Printf("%s", line)
	case spec.Noun == "runner.job":
		who := str("submission_id")
		if who == "" {
			who = str("round_id")
		}
		key := "job " + ev.Subject()
		prefix := fmt.Sprintf("%s  %s  runner     %s job", at, who, str("kind"))
		switch spec.Type {
		case events.RunnerJobStarted:
			f.t.Printf("%s started on %s", prefix, str("gpu"))
		case events.RunnerJobProgress:
			pct := percent(num("done"), num("total"))
			f.t.Progress(key, prefix+" "+progressText(str("phase"), num("done"), num("total"), str("unit")), pct, false)
		case events.RunnerJobCompleted:
			f.t.Progress(key, fmt.Sprintf("%s completed (%.4f GPU-hours)", prefix, d["gpu_hours"]), 100, true)
		case events.RunnerJobFailed:
			f.t.Progress(key, fmt.Sprintf("%s FAILED %s: %s", prefix, str("reason"), str("message")), 100, true)
		}
	case spec.Type == events.RoundStarted:
		f.t.Printf("%s  %s  started on pod %s: %d steps", at, ev.Subject(), str("pod"), num("steps"))
	case spec.Type == events.RoundStep:
		line := fmt.Sprintf("%s  %s  %s", at, ev.Subject(), gist(ev))
		step, of := num("step"), num("of")
		if str("status") == string(events.StepRunning) {
			f.t.Progress("round "+ev.Subject(), line, percent(step, of), false)
			return
		}
		f.t.Printf("%s", line)
	case spec.Type == events.RoundCompleted:
		f.t.Progress("round "+ev.Subject(), fmt.Sprintf("%s  %s  completed: %s", at, ev.Subject(), gist(ev)), 100, true)
		f.leaderboard(ctx, str("campaign"))
		f.ended(ev.Subject())
	case spec.Type == events.RoundFailed:
		f.t.Progress("round "+ev.Subject(), fmt.Sprintf("%s  %s  FAILED %s: %s", at, ev.Subject(), str("reason"), str("message")), 100, true)
		f.ended(ev.Subject())
	}
}

// ended tells a waiting demo that a round ended; nobody may be waiting.
func (f *follower) ended(roundID string) {
	select {
	case f.roundEnded <- roundID:
	default:
	}
}

// leaderboard prints the campaign's leaderboard (all campaigns' for "").
func (f *follower) leaderboard(ctx context.Context, campaign string) {
	if !slices.Contains(f.served, "score") {
		return
	}
	c, err := f.dialer()(ctx)
	if err != nil {
		f.t.Printf("leaderboard: %v", err)
		return
	}
	defer c.close()
	rows, err := askOn(ctx, c, ctl.SubjectLeaderboard, ctl.Query{Campaign: campaign}, 30*time.Second)
	if err != nil {
		f.t.Printf("leaderboard: %v", err)
		return
	}
	var b strings.Builder
	if campaign != "" {
		campaign = " of " + campaign
	}
	fmt.Fprintf(&b, "\nleaderboard%s (lowb-score/v1; dev submissions are never ranked):\n", campaign)
	if err := printRows(&b, rows, false); err != nil {
		return
	}
	f.t.Printf("%s", b.String())
}

// settled reports whether a record has gone as far as this arena can take
// it: it ended, or every stage a running service handles has ended.
func settled(r *record.Submission, served []string) bool {
	if r.Status != record.StatusRunning {
		return true
	}
	for _, s := range r.Stages {
		if slices.Contains(served, s.Name) && (s.Status == record.StatusPending || s.Status == record.StatusRunning) {
			return false
		}
	}
	return true
}
