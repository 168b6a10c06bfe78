package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/bus"
	"github.com/lowbarena/lowbarena/events/ctl"
	"github.com/lowbarena/lowbarena/services/domain/podlease"
)

// podsGPUHoursSQL is the GPU time of each pod and GPU, read from what the
// runners store of their jobs: gpu_samples, whose run_id is
// <job>-<delivery>/<engine run>. A job's time is the sum over its engine
// runs of the span their samples cover, of its last delivery only, so a
// job redelivered after its runner died counts once (its earlier
// attempt's samples stay in the table, tagged with their own delivery,
// and count nowhere); rows written twice collapse in max and min.
const podsGPUHoursSQL = `SELECT pod, gpu, count() AS jobs, sum(seconds) AS seconds, max(sim) AS simulated
FROM (
    SELECT job_id, argMax(p, attempt) AS pod, argMax(g, attempt) AS gpu, argMax(secs, attempt) AS seconds, argMax(s, attempt) AS sim
    FROM (
        SELECT job_id, attempt, any(p0) AS p, any(g0) AS g, sum(span) AS secs, max(s0) AS s
        FROM (
            SELECT job_id, run_id, any(pod) AS p0, any(gpu) AS g0, max(simulated) AS s0,
                toUInt64OrZero(substring(splitByChar('/', run_id)[1], length(job_id) + 2)) AS attempt,
                (max(ts_ms) - min(ts_ms)) / 1000 AS span
            FROM gpu_samples
            GROUP BY job_id, run_id
        )
        GROUP BY job_id, attempt
    )
    GROUP BY job_id
)
GROUP BY pod, gpu
ORDER BY pod, gpu`

// podsView is what `arena pods --json` prints.
type podsView struct {
	Pods []podView `json:"pods"`
	// GPUHoursError says why no GPU-hours are given (the query service
	// did not answer); empty when they are.
	GPUHoursError string `json:"gpu_hours_error,omitempty"`
}

// podView is one pod: its runners as the registry has them, the round
// that holds it (its lease in the rounds bucket, decided as the round
// service decides it) and the GPU time its jobs used.
type podView struct {
	Pod string `json:"pod"`
	// HeldBy is the round whose live lease holds the pod; LeaseExpires
	// when that lease lapses unless renewed.
	HeldBy       string     `json:"held_by,omitempty"`
	LeaseExpires *time.Time `json:"lease_expires_at,omitempty"`
	// Runners are the registry's live entries, by GPU index.
	Runners []events.PodEntry `json:"runners"`
	// GPUs is the GPU time per GPU index; GPUHours and Jobs the pod's
	// totals (nil when unknown).
	GPUs     []gpuHours `json:"gpus"`
	GPUHours *float64   `json:"gpu_hours"`
	Jobs     int        `json:"jobs"`
}

// gpuHours is the GPU time of one GPU of a pod.
type gpuHours struct {
	GPU       int     `json:"gpu_index"`
	Jobs      int     `json:"jobs"`
	GPUHours  float64 `json:"gpu_hours"`
	Simulated bool    `json:"simulated"`
}

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
	view, err := collectPods(rctx, c, time.Now())
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

// collectPods reads the registry, the pods' leases and the GPU-hours.
func collectPods(ctx context.Context, c *client, now time.Time) (podsView, error) {
	byPod := map[string]*podView{}
	get := func(pod string) *podView {
		if byPod[pod] == nil {
			byPod[pod] = &podView{Pod: pod, Runners: []events.PodEntry{}, GPUs: []gpuHours{}}
		}
		return byPod[pod]
	}
	entries, err := readBucket(ctx, c.js, bus.BucketPods, "")
	if err != nil {
		return podsView{}, err
	}
	for key, value := range entries {
		var e events.PodEntry
		if err := json.Unmarshal(value, &e); err != nil || e.Pod == "" {
			return podsView{}, fmt.Errorf("pods: the registry's entry %s is not a runner's: %v", key, err)
		}
		p := get(e.Pod)
		p.Runners = append(p.Runners, e)
	}
	leases, err := readBucket(ctx, c.js, bus.BucketRounds, podlease.Key("*"))
	if err != nil {
		return podsView{}, err
	}
	for key, value := range leases {
		l, state := podlease.Read(value, now)
		if state != podlease.Held {
			continue // free, or lapsed: the pod takes any work
		}
		p := get(strings.TrimPrefix(key, podlease.Key("")))
		p.HeldBy = l.Round
		exp := l.ExpiresAt
		p.LeaseExpires = &exp
	}
	var view podsView
	rows, err := podsGPUHours(ctx, c)
	if err != nil {
		view.GPUHoursError = err.Error()
	}
	for _, r := range rows {
		p := get(r.pod)
		p.GPUs = append(p.GPUs, r.gpuHours)
	}
	for _, p := range byPod {
		sort.Slice(p.Runners, func(i, j int) bool {
			a, b := p.Runners[i], p.Runners[j]
			return a.GPUIndex < b.GPUIndex || a.GPUIndex == b.GPUIndex && a.Runner < b.Runner
		})
		if err == nil {
			total := 0.0
			for _, g := range p.GPUs {
				total += g.GPUHours
				p.Jobs += g.Jobs
			}
			total = roundHours(total)
			p.GPUHours = &total
		}
		view.Pods = append(view.Pods, *p)
	}
	sort.Slice(view.Pods, func(i, j int) bool { return view.Pods[i].Pod < view.Pods[j].Pod })
	if view.Pods == nil {
		view.Pods = []podView{}
	}
	return view, nil
}

// readBucket reads the keys of bucket that match filter ("" every key)
// with their values.
func readBucket(ctx context.Context, js jetstream.JetStream, bucket, filter string) (map[string][]byte, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("pods: the arena has no bucket %s: its services are older than this command; upgrade them", bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("pods: open bucket %s: %w", bucket, err)
	}
	var lister jetstream.KeyLister
	if filter == "" {
		lister, err = kv.ListKeys(ctx)
	} else {
		lister, err = kv.ListKeysFiltered(ctx, filter)
	}
	if err != nil {
		return nil, fmt.Errorf("pods: list bucket %s: %w", bucket, err)
	}
	defer func() { _ = lister.Stop() }()
	out := map[string][]byte{}
	for key := range lister.Keys() {
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // lapsed or deleted since it was listed
		}
		if err != nil {
			return nil, fmt.Errorf("pods: read %s in bucket %s: %w", key, bucket, err)
		}
		out[key] = e.Value()
	}
	return out, nil
}

type podGPUHours struct {
	pod string
	gpuHours
}

// podsGPUHours asks the query service for each pod's and GPU's time.
func podsGPUHours(ctx context.Context, c *client) ([]podGPUHours, error) {
	rep, err := ctl.CallWaiting[ctl.SQLReply](ctx, c.nc, ctl.SubjectSQL, ctl.SQLRequest{SQL: podsGPUHoursSQL, MaxRows: 10000, TimeoutSeconds: 20}, serviceWait)
	var ce *ctl.Error
	switch {
	case errors.Is(err, ctl.ErrNoService):
		return nil, errors.New("no query service answers (the arena's score service holds it)")
	case errors.As(err, &ce) && ce.Reason != "":
		return nil, fmt.Errorf("%s: %s", ce.Reason, ce.Message)
	case err != nil:
		return nil, fmt.Errorf("the query service: %w", err)
	}
	if rep.Truncated != "" {
		return nil, errors.New("the query service cut the answer short")
	}
	var out []podGPUHours
	for _, row := range rep.Rows {
		if len(row) != 5 {
			return nil, fmt.Errorf("the query service answered %d columns, want 5", len(row))
		}
		var pod string
		if err := json.Unmarshal(row[0], &pod); err != nil {
			return nil, fmt.Errorf("the pod column: %w", err)
		}
		nums := make([]float64, 4)
		for i := range nums {
			if nums[i], err = number(row[i+1]); err != nil {
				return nil, fmt.Errorf("column %s: %w", rep.Columns[i+1].Name, err)
			}
		}
		out = append(out, podGPUHours{pod: pod, gpuHours: gpuHours{GPU: int(nums[0]), Jobs: int(nums[1]), GPUHours: roundHours(nums[2] / 3600), Simulated: nums[3] != 0}})
	}
	return out, nil
}

// number reads a JSON number, or a number in a string (ClickHouse
// quotes 64-bit integers).
func number(raw json.RawMessage) (float64, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return strconv.ParseFloat(s, 64)
	}
	var f float64
	err := json.Unmarshal(raw, &f)
	return f, err
}

// roundHours keeps six decimals (3.6 ms), as the runner's gpu_hours.
func roundHours(h float64) float64 { return float64(int64(h*1e6+0.5)) / 1e6 }

// writePods prints one line per runner (a pod without a live runner, one
// line of its own), and each pod's GPU-hours.
func writePods(w io.Writer, v podsView, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tGPU\tDEVICE\tRUNNER\tNOW\tHELD BY\tGPU-HOURS\tJOBS")
	hours := func(p podView, gpu int) (string, string) {
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
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Pod, r.GPUIndex, r.GPU, r.Runner, doing(r, now), held, h, jobs)
		}
		// GPUs with history but no live runner.
		for _, g := range p.GPUs {
			if !listed[g.GPU] {
				h, jobs := hours(p, g.GPU)
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Pod, g.GPU, "-", "-", "no runner", held, h, jobs)
				listed[g.GPU] = true
			}
		}
		if len(listed) == 0 {
			fmt.Fprintf(tw, "%s\t-\t-\t-\tno runner\t%s\t0\t0\n", p.Pod, held)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	runners := 0
	for _, p := range v.Pods {
		runners += len(p.Runners)
	}
	_, err := fmt.Fprintf(w, "(%s, %s)\n", plural(len(v.Pods), "pod"), plural(runners, "runner"))
	return err
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
