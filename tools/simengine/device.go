package main

import (
	"fmt"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Device is the simulated GPU as NVML would count it for this one engine:
// its total memory and what the engine holds of it. An imitated engine
// sets Used through its start-up phases and then holds it (vLLM and SGLang
// allocate their KV pool whole, so the device does not follow the KV
// cache in use).
type Device struct {
	GPU   GPU
	Total float64
	used  atomic.Int64
}

// SetUsed records what the engine holds now.
func (d *Device) SetUsed(b float64) { d.used.Store(int64(b)) }

// Used is what the engine holds now.
func (d *Device) Used() int64 { return d.used.Load() }

// DeviceReport is the body of GET /simulated/device.
type DeviceReport struct {
	GPU               string `json:"gpu"`
	Simulated         bool   `json:"simulated"`
	TotalBytes        int64  `json:"total_bytes"`
	UsedBytes         int64  `json:"used_bytes"`
	ComputeCapability string `json:"compute_capability"`
}

// DeviceReport returns the simulated device: the imitated engine's Device,
// or in plain mode the plan's GPU with the used bytes
// /v1/lowbarena/memory reports.
func (s *Server) DeviceReport() DeviceReport {
	if d := s.Device; d != nil {
		return DeviceReport{GPU: d.GPU.Name, Simulated: true, TotalBytes: int64(d.Total), UsedBytes: d.Used(), ComputeCapability: d.GPU.CC}
	}
	return DeviceReport{GPU: s.Plan.GPU.Name, Simulated: true, TotalBytes: int64(s.Plan.GPU.TotalBytes), UsedBytes: s.Memory().UsedBytes, ComputeCapability: s.Plan.GPU.CC}
}

func (s *Server) device(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, s.DeviceReport()) }

// CadenceGauges are SGLang's scheduler gauges (sglang:token_usage,
// sglang:num_used_tokens, sglang:num_running_reqs, sglang:num_queue_reqs):
// set on every prefill batch (log_prefill_stats) and on the decode steps
// where forward_ct_decode % decode_log_interval == 0 (log_decode_stats),
// and nowhere else, so between updates they hold the last update's
// values. Each update writes SGLang's "Prefill batch" / "Decode batch"
// line.
type CadenceGauges struct {
	// Interval is --decode-log-interval (SGLang's default 40).
	Interval int64
	// PoolTokens is max_total_num_tokens, token_usage's denominator.
	PoolTokens int64
	// Log writes a scheduler line; nil writes none.
	Log func(string)
	// Now is the clock of the throughput figures; nil is wall time.
	Now func() time.Time

	mu         sync.Mutex
	snap       Stats
	updates    int64
	lastLog    time.Time
	lastTokens int64
}

// Observe is Scheduler.OnStep: it updates the gauges (and logs) when
// SGLang would, and reports whether it did.
func (g *CadenceGauges) Observe(si StepInfo) bool {
	now := time.Now
	if g.Now != nil {
		now = g.Now
	}
	interval := max(g.Interval, 1)
	if !si.Prefill() && si.Stats.DecodeSteps%interval != 0 {
		return false
	}
	g.mu.Lock()
	t := now()
	gap := t.Sub(g.lastLog).Seconds()
	if g.lastLog.IsZero() || gap <= 0 {
		gap = math.Inf(1)
	}
	tokens := si.Stats.TotalTokens - g.lastTokens
	g.lastLog, g.lastTokens = t, si.Stats.TotalTokens
	g.snap = si.Stats
	g.updates++
	g.mu.Unlock()
	if g.Log == nil {
		return true
	}
	usage := g.usage(si.Stats)
	if si.Prefill() {
		g.Log(fmt.Sprintf("Prefill batch, #new-seq: %d, #new-token: %d, #cached-token: 0, token usage: %.2f, #running-req: %d, #queue-req: %d, "+
			"#pending-token: 0, cuda graph: False, input throughput (token/s): %.2f",
			si.NewSeqs, si.NewTokens, usage, si.Stats.Running-si.NewSeqs, si.Stats.Waiting, float64(si.NewTokens)/gap))
		return true
	}
	g.Log(fmt.Sprintf("Decode batch, #running-req: %d, #token: %d, token usage: %.2f, cuda graph: True, gen throughput (token/s): %.2f, #queue-req: %d",
		si.Stats.Running, si.Stats.ResidentTokens, usage, float64(tokens)/gap, si.Stats.Waiting))
	return true
}

func (g *CadenceGauges) usage(st Stats) float64 {
	if g.PoolTokens <= 0 {
		return 0
	}
	return float64(st.ResidentTokens) / float64(g.PoolTokens)
}

// Snapshot returns the gauges' values (the scheduler state of the last
// update), their token_usage, and how many updates there were.
func (g *CadenceGauges) Snapshot() (Stats, float64, int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.snap, g.usage(g.snap), g.updates
}
