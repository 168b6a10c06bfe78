package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/domain/podlease"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
)

// PodsGPUHoursSQL is the GPU time of each pod and GPU, read from what the
// runners store of their jobs: gpu_samples, whose run_id is
// <job>-<delivery>/<engine run>. A job's time is the sum over its engine
// runs of the span their samples cover, of its last delivery only, so a
// job redelivered after its runner died counts once, on the pod and GPU
// where it ended (its earlier attempt's samples stay in the table, tagged
// with their own delivery, and count nowhere); rows written twice
// collapse in max and min.
const PodsGPUHoursSQL = `SELECT pod, gpu, count() AS jobs, sum(seconds) AS seconds, max(sim) AS simulated
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

// PodsView is the arena's pods: what `arena pods --json` prints and the
// gateway's GET /v1/pods answers.
type PodsView struct {
	Pods []PodView `json:"pods"`
	// GPUHoursError says why no GPU-hours are given (the query service
	// did not answer); empty when they are.
	GPUHoursError string `json:"gpu_hours_error,omitempty"`
}

// PodView is one pod: its runners as the registry has them, the round
// that holds it (its lease in the rounds bucket, decided by
// podlease.Read as the round service decides it) and the GPU time its
// jobs used.
type PodView struct {
	Pod string `json:"pod"`
	// HeldBy is the round whose live lease holds the pod; LeaseExpires
	// when that lease lapses unless renewed.
	HeldBy       string     `json:"held_by,omitempty"`
	LeaseExpires *time.Time `json:"lease_expires_at,omitempty"`
	// Runners are the registry's live entries, by GPU index.
	Runners []events.PodEntry `json:"runners"`
	// TakesRounds is true when a live runner of the pod serves SLA jobs:
	// a round may name the pod (HeldBy says whether one holds it now).
	TakesRounds bool `json:"takes_rounds"`
	// GPUs is the GPU time per GPU index; GPUHours and Jobs the pod's
	// totals (GPUHours nil when unknown).
	GPUs     []GPUHours `json:"gpus"`
	GPUHours *float64   `json:"gpu_hours"`
	Jobs     int        `json:"jobs"`
}

// GPUHours is the GPU time of one GPU of a pod.
type GPUHours struct {
	GPU       int     `json:"gpu_index"`
	Jobs      int     `json:"jobs"`
	GPUHours  float64 `json:"gpu_hours"`
	Simulated bool    `json:"simulated"`
}

// Pods reads the pods registry, the pods' leases at now and, through the
// query service (waiting up to wait for one to answer), the GPU-hours. A
// missing query service is no error: the view says why the hours are
// missing.
func Pods(ctx context.Context, js jetstream.JetStream, nc *nats.Conn, wait time.Duration, now time.Time) (PodsView, error) {
	byPod := map[string]*PodView{}
	get := func(pod string) *PodView {
		if byPod[pod] == nil {
			byPod[pod] = &PodView{Pod: pod, Runners: []events.PodEntry{}, GPUs: []GPUHours{}}
		}
		return byPod[pod]
	}
	entries, err := readBucket(ctx, js, bus.BucketPods, "")
	if err != nil {
		return PodsView{}, err
	}
	for key, value := range entries {
		var e events.PodEntry
		if err := json.Unmarshal(value, &e); err != nil {
			return PodsView{}, fmt.Errorf("pods: the registry's entry %s is not a runner's: %w", key, err)
		}
		if e.Pod == "" {
			return PodsView{}, fmt.Errorf("pods: the registry's entry %s is not a runner's: it names no pod", key)
		}
		p := get(e.Pod)
		p.Runners = append(p.Runners, e)
		p.TakesRounds = p.TakesRounds || e.Serves(events.JobSLA)
	}
	leases, err := readBucket(ctx, js, bus.BucketRounds, podlease.Key("*"))
	if err != nil {
		return PodsView{}, err
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
	var view PodsView
	rows, err := podsGPUHours(ctx, nc, wait)
	if err != nil {
		view.GPUHoursError = err.Error()
	}
	for _, r := range rows {
		p := get(r.pod)
		p.GPUs = append(p.GPUs, r.GPUHours)
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
			total = RoundHours(total)
			p.GPUHours = &total
		}
		view.Pods = append(view.Pods, *p)
	}
	sort.Slice(view.Pods, func(i, j int) bool { return view.Pods[i].Pod < view.Pods[j].Pod })
	if view.Pods == nil {
		view.Pods = []PodView{}
	}
	return view, nil
}

// readBucket reads the keys of bucket that match filter ("" every key)
// with their values.
func readBucket(ctx context.Context, js jetstream.JetStream, bucket, filter string) (map[string][]byte, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("pods: the arena has no bucket %s: its streams and buckets are not provisioned yet (arena up, or a service started with --provision yes, creates them)", bucket)
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
	GPUHours
}

// podsGPUHours asks the query service for each pod's and GPU's time.
func podsGPUHours(ctx context.Context, nc *nats.Conn, wait time.Duration) ([]podGPUHours, error) {
	rep, err := CallWaiting[SQLReply](ctx, nc, SubjectSQL, SQLRequest{SQL: PodsGPUHoursSQL, MaxRows: 10000, TimeoutSeconds: 20}, wait)
	var ce *Error
	switch {
	case errors.Is(err, ErrNoService):
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
		out = append(out, podGPUHours{pod: pod, GPUHours: GPUHours{GPU: int(nums[0]), Jobs: int(nums[1]), GPUHours: RoundHours(nums[2] / 3600), Simulated: nums[3] != 0}})
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

// RoundHours keeps six decimals of an hour (3.6 ms), as the runner's
// gpu_hours.
func RoundHours(h float64) float64 { return float64(int64(h*1e6+0.5)) / 1e6 }
