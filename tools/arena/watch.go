package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/domain/bundle"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/ce"
)

func cmdWatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("watch", stderr)
	natsURL := natsFlag(fs)
	asJSON := fs.Bool("json", false, "one JSON object per event: time, type, id, subject, data")
	all := fs.Bool("all", false, "replay every stored event first, then follow")
	only := fs.String("id", "", "follow one submission or round id")
	roundID := fs.String("round", "", "follow one round step by step (its steps, with progress)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageErr("watch takes no arguments (arena watch [--json] [--all] [--id ID])")
	}
	if *roundID != "" {
		*only = *roundID
		*all = true // a round's earlier steps come first
	}
	if *only != "" && !events.ValidID(*only) {
		return usageErr("%q is not a submission or round id", *only)
	}
	c, err := dial(ctx, *natsURL)
	if err != nil {
		return err
	}
	defer c.close()
	cfg := jetstream.OrderedConsumerConfig{
		DeliverPolicy:  jetstream.DeliverNewPolicy,
		FilterSubjects: []string{events.SubjectRootArena + ".>"},
	}
	if *all {
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	}
	if *only != "" {
		// arena.<noun>.<verb>.<id>, and arena.runner.job.<verb>.<id>.
		cfg.FilterSubjects = []string{"arena.*.*." + *only, "arena.*.*.*." + *only}
	}
	cons, err := c.js.OrderedConsumer(ctx, events.StreamArena, cfg)
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	if !*asJSON {
		fmt.Fprintf(stderr, "watching %s on %s (Ctrl-C to stop)\n", strings.Join(cfg.FilterSubjects, ", "), *natsURL)
	}
	out := newTerm(stdout)
	var unanswered time.Time // since when JetStream has not answered
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
			// A cluster electing a new leader for the stream (a node
			// restarted) answers nobody for a moment: the ordered
			// consumer is made again on the next pull, so ask again, for
			// up to watchOutage.
			if unavailable(err) {
				if unanswered.IsZero() {
					unanswered = time.Now()
					fmt.Fprintf(stderr, "watch: JetStream does not answer (%v); asking again\n", err)
				}
				if time.Since(unanswered) < watchOutage {
					select {
					case <-ctx.Done():
						return nil
					case <-time.After(500 * time.Millisecond):
					}
					continue
				}
				return fmt.Errorf("watch: JetStream has not answered for %s: %w", watchOutage, err)
			}
			return fmt.Errorf("watch: %w", err)
		}
		unanswered = time.Time{}
		ev, derr := ce.Decode(msg.Headers(), msg.Data())
		if *asJSON {
			if err := writeEventJSON(stdout, msg, ev, derr); err != nil {
				return err
			}
			continue
		}
		if derr != nil {
			out.Printf("%s  %-22s %s  (not a valid event: %v)", time.Now().Format("15:04:05.000"), "?", msg.Subject(), derr)
			continue
		}
		if pct, ok := bytesProgress(ev); ok {
			// A download or a staging: one live line per job on a
			// terminal, a line per tenth elsewhere.
			out.Progress(ev.Subject(), eventLine(ev), pct, pct >= 100)
			continue
		}
		out.Printf("%s", eventLine(ev))
		if *roundID != "" && (ev.Type() == string(events.RoundCompleted) || ev.Type() == string(events.RoundFailed)) {
			return nil
		}
	}
}

// watchOutage is how long `arena watch` waits out a JetStream that does
// not answer before it gives up.
var watchOutage = time.Minute

// unavailable tells the errors of a JetStream that is there but answers
// nobody for a moment (no stream leader yet) from those that will not
// pass by themselves.
func unavailable(err error) bool {
	return bus.Unanswered(err) || errors.Is(err, jetstream.ErrConsumerNotFound)
}

// watchedEvent is one line of `arena watch --json`.
type watchedEvent struct {
	Time    time.Time       `json:"time"`
	Type    string          `json:"type"`
	ID      string          `json:"id"`
	Source  string          `json:"source,omitempty"`
	Subject string          `json:"subject"`
	Data    json.RawMessage `json:"data,omitempty"`
	Error   string          `json:"error,omitempty"`
}

func writeEventJSON(w io.Writer, msg jetstream.Msg, ev event.Event, derr error) error {
	out := watchedEvent{Subject: msg.Subject()}
	if derr != nil {
		out.Error = derr.Error()
	} else {
		out.Time, out.Type, out.ID, out.Source, out.Subject = ev.Time(), ev.Type(), ev.ID(), ev.Source(), subjectOf(ev)
		if json.Valid(ev.Data()) {
			out.Data = ev.Data()
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// eventLine is one event for people: time, short type, subject, and the
// gist of its data.
func eventLine(ev event.Event) string {
	short := strings.TrimSuffix(strings.TrimPrefix(ev.Type(), "dev.lowbarena."), ".v1")
	return fmt.Sprintf("%s  %-22s %-16s %s", ev.Time().Local().Format("15:04:05.000"), short, subjectOf(ev), gist(ev))
}

// subjectOf is the event's subject, or, for an event published without
// one (by a client outside the arena), the id its data names.
func subjectOf(ev event.Event) string {
	if s := ev.Subject(); s != "" {
		return s
	}
	s, _ := events.SubjectFromData(events.Type(ev.Type()), ev.Data())
	return s
}

func gist(ev event.Event) string {
	var d map[string]any
	if err := json.Unmarshal(ev.Data(), &d); err != nil {
		return ""
	}
	str := func(k string) string { s, _ := d[k].(string); return s }
	switch events.Type(ev.Type()) {
	case events.RoundStep:
		bar := ""
		if of, _ := d["of"].(float64); of > 0 {
			n := int(d["step"].(float64))
			bar = fmt.Sprintf("[%s%s] %2d/%d ", strings.Repeat("#", n*20/int(of)), strings.Repeat(".", 20-n*20/int(of)), n, int(of))
		}
		line := bar + str("name") + " · " + str("status")
		if dt := str("detail"); dt != "" {
			if len(dt) > 160 {
				dt = dt[:157] + "..."
			}
			line += " · " + dt
		}
		return line
	case events.RoundCompleted:
		out := fmt.Sprintf("leader %s (changed %v) · top score %v · %.0f s · %.4f GPU-hours", str("leader"), d["leader_changed"], d["top_score"], d["duration_seconds"], d["gpu_hours"])
		if es, ok := d["entries"].([]any); ok {
			for _, e := range es {
				m, _ := e.(map[string]any)
				score := "—"
				if v, ok := m["score"].(float64); ok {
					score = strconv.FormatFloat(v, 'f', -1, 64)
				}
				line := fmt.Sprintf("\n      %-16v %-10v %-12v score %s", m["entry_id"], m["role"], m["status"], score)
				if why, ok := m["reason"].(string); ok && why != "" {
					line += " · " + why
				}
				out += line
			}
		}
		return out
	case events.SubmissionReceived:
		sol, _ := d["solution"].(map[string]any)
		decl, _ := sol["precision"].(string)
		if decl == "" {
			decl = "no precision declared"
		}
		line := fmt.Sprintf("%s · %s · %s · %v · %s", str("participant"), str("task_id"), str("split"), sol["checkpoint"], decl)
		if ref, ok := d["reference"].(map[string]any); ok {
			line += fmt.Sprintf(" · by reference %v@%v", ref["repository"], ref["revision"])
		}
		return line
	case events.RunnerJobProgress:
		num := func(k string) int { f, _ := d[k].(float64); return int(f) }
		return progressText(str("phase"), num("done"), num("total"), str("unit"))
	}
	if r := str("reason"); r != "" {
		return r + ": " + str("message")
	}
	if a, ok := d["attempt"].(float64); ok {
		return fmt.Sprintf("attempt %d", int(a))
	}
	if p := str("detected_precision"); p != "" {
		return "reads " + p
	}
	if dg := str("bundle_digest"); dg != "" {
		return "bundle " + short(dg)
	}
	return ""
}

// progressText is a runner's progress for people: bytes staged of the
// checkpoint, with a bar, or the steps of a phase.
func progressText(phase string, done, total int, unit string) string {
	if unit == events.UnitBytes {
		pct := percent(done, total)
		return fmt.Sprintf("%s %s %s of %s (%d%%)", phase, bar(pct, 20), bundle.HumanSize(int64(done)), bundle.HumanSize(int64(total)), pct)
	}
	return fmt.Sprintf("%s [%d/%d]", phase, done, total)
}

// percent is done of total in whole percent (100 for an empty total).
func percent(done, total int) int {
	if total <= 0 {
		return 100
	}
	return int(int64(done) * 100 / int64(total))
}

// bytesProgress is the percent of a runner.job.progress event counted in
// bytes (a download or a staging), and false for any other event.
func bytesProgress(ev event.Event) (int, bool) {
	if events.Type(ev.Type()) != events.RunnerJobProgress {
		return 0, false
	}
	var d events.RunnerJobProgressData
	if json.Unmarshal(ev.Data(), &d) != nil || d.Unit != events.UnitBytes {
		return 0, false
	}
	return percent(int(d.Done), int(d.Total)), true
}
