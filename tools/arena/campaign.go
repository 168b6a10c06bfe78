package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/campaigns"
)

const campaignUsage = "arena campaign push DIR | list | history TASK [--json] [--nats URL]"

// cmdCampaign is `arena campaign`: push campaign folders into the
// arena's store as new versions, list what each task runs, and a task's
// versions.
func cmdCampaign(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageErr("campaign needs a verb: %s", campaignUsage)
	}
	verb, rest := args[0], args[1:]
	fs := newFlagSet("campaign "+verb, stderr)
	natsURL := natsFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parseFlags(fs, rest)
	if err != nil {
		return err
	}
	want := map[string]int{"push": 1, "list": 0, "history": 1}
	n, ok := want[verb]
	if !ok {
		return usageErr("unknown campaign verb %q: %s", verb, campaignUsage)
	}
	if len(pos) != n {
		return usageErr("campaign %s takes %d argument(s): %s", verb, n, campaignUsage)
	}
	if verb == "push" {
		// Every campaign is checked before the arena is asked anything:
		// a bad folder fails here, with nothing stored.
		if _, _, err := campaigns.Check(pos[0]); err != nil {
			return err
		}
	}
	c, err := dial(ctx, *natsURL)
	if err != nil {
		return err
	}
	defer c.close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	kv, err := c.js.KeyValue(rctx, bus.BucketCampaigns)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("%w: the arena has no campaigns bucket: provision it with this version (gateway provision, or arena up)", ErrArenaDown)
	}
	if err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	var out any
	switch verb {
	case "push":
		arts, err := artifact.NewJetStream(rctx, c.js, bus.ObjectArtifacts)
		if err != nil {
			return err
		}
		pushed, err := campaigns.Push(rctx, kv, arts, pos[0], pusher(), time.Now)
		if err != nil {
			return err
		}
		if !*asJSON {
			return writePushed(stdout, pushed)
		}
		out = pushed
	case "list":
		list, err := campaigns.List(rctx, kv)
		if err != nil {
			return err
		}
		if !*asJSON {
			return writeEntries(stdout, list)
		}
		out = list
	case "history":
		hist, err := campaigns.History(rctx, kv, pos[0])
		if err != nil {
			return err
		}
		if !*asJSON {
			return writeEntries(stdout, hist)
		}
		out = hist
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// pusher names who pushes: the local user and host.
func pusher() string {
	who := "operator"
	if u, err := user.Current(); err == nil && u.Username != "" {
		who = u.Username
	}
	if h, err := os.Hostname(); err == nil {
		who += "@" + h
	}
	return who
}

func writePushed(w io.Writer, pushed []campaigns.Pushed) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tVERSION\tDIGEST\tPUSHED")
	for _, p := range pushed {
		what := "new version"
		if !p.New {
			what = "unchanged (already the current version)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", p.TaskID, p.Version, p.Digest(), what)
	}
	return tw.Flush()
}

func writeEntries(w io.Writer, entries []campaigns.Entry) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tVERSION\tDIGEST\tPUSHED AT\tPUSHED BY\tNAME")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", e.TaskID, e.Version, e.Digest(), e.PushedAt.Format(time.RFC3339), e.PushedBy, e.Name)
	}
	return tw.Flush()
}
