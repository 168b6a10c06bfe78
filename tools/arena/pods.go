package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/ctl"
)

// cmdPods is `arena pods`: the pods, their runners, what each runs, the
// round that holds a pod and each pod's GPU-hours.
func cmdPods(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("pods", stderr)
	natsURL := natsFlag(fs)
	asJSON := fs.Bool("json", false, "print the pods as JSON")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("pods takes no arguments: arena pods [--json] [--nats URL]")
	}
	c, err := dial(ctx, *natsURL)
	if err != nil {
		return err
	}
	defer c.close()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	view, err := ctl.Pods(rctx, c.js, c.nc, serviceWait, time.Now())
	if err != nil {
		return err
	}
	if view.GPUHoursError != "" {
		fmt.Fprintln(stderr, "arena pods: no GPU-hours:", view.GPUHoursError)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(view)
	}
	return writePods(stdout, view, time.Now())
}

// writePods prints one line per runner (a pod without a live runner, one
// line of its own), and each pod's GPU-hours.
func writePods(w io.Writer, v ctl.PodsView, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tGPU\tDEVICE\tRUNNER\tNOW\tHELD BY\tGPU-HOURS\tJOBS\tKINDS")
	hours := func(p ctl.PodView, gpu int) (string, string) {
		if p.GPUHours == nil {
			return "?", "?"
		}
		for _, g := range p.GPUs {
			if g.GPU == gpu {
				return strconv.FormatFloat(g.GPUHours, 'f', 6, 64), strconv.Itoa(g.Jobs)
			}
		}
		return "0", "0"
	}
	for _, p := range v.Pods {
		held := "-"
		if p.HeldBy != "" {
			held = p.HeldBy
		}
		listed := map[int]bool{}
		for _, r := range p.Runners {
			h, jobs := "", ""
			if !listed[r.GPUIndex] {
				h, jobs = hours(p, r.GPUIndex)
			}
			listed[r.GPUIndex] = true
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Pod, r.GPUIndex, r.GPU, r.Runner, doing(r, now), held, h, jobs, strings.Join(r.Kinds, ","))
		}
		// GPUs with history but no live runner.
		for _, g := range p.GPUs {
			if !listed[g.GPU] {
				h, jobs := hours(p, g.GPU)
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t-\n", p.Pod, g.GPU, "-", "-", "no runner", held, h, jobs)
				listed[g.GPU] = true
			}
		}
		if len(listed) == 0 {
			fmt.Fprintf(tw, "%s\t-\t-\t-\tno runner\t%s\t0\t0\t-\n", p.Pod, held)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	runners := 0
	for _, p := range v.Pods {
		runners += len(p.Runners)
	}
	if _, err := fmt.Fprintf(w, "(%s, %s)\n", plural(len(v.Pods), "pod"), plural(runners, "runner")); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, roundPods(v))
	return err
}

// roundPods says which pods a round may name: those a live runner serves
// for SLA jobs, each free or held by its round.
func roundPods(v ctl.PodsView) string {
	var can []string
	for _, p := range v.Pods {
		if !p.TakesRounds {
			continue
		}
		state := "free"
		if p.HeldBy != "" {
			state = "held by " + p.HeldBy
		}
		can = append(can, p.Pod+" ("+state+")")
	}
	if len(can) == 0 {
		return "rounds: no pod can take one (no live runner serves " + events.JobSLA + " jobs)"
	}
	return "rounds can run on (arena round start --pod P; the only one is taken by default): " + strings.Join(can, ", ")
}

// doing says what a runner runs now.
func doing(e events.PodEntry, now time.Time) string {
	j := e.Job
	if j == nil {
		return "idle"
	}
	of := ""
	switch {
	case j.RoundID != "":
		of = " round " + j.RoundID
	case j.SubmissionID != "":
		of = " submission " + j.SubmissionID
	}
	again := ""
	if j.Delivery > 1 {
		again = fmt.Sprintf(", delivery %d", j.Delivery)
	}
	return fmt.Sprintf("%s %s%s for %s%s", j.Kind, j.JobID, of, now.Sub(j.Since).Truncate(time.Second), again)
}
