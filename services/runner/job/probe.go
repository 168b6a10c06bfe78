package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/lowbarena/lowbarena/domain/formula"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/services/runner/telemetry"
)

// memoryPath is where an engine reports its memory layout (simengine
// serves it; a vLLM build with the arena's patch may too).
const memoryPath = "/v1/lowbarena/memory"

// startupPath is where an engine reports its start-up in the record's
// layout.
const startupPath = "/v1/lowbarena/startup"

// errNoEndpoint is returned when the engine does not serve a report.
var errNoEndpoint = errors.New("job: the engine serves no such report")

// MemoryReport is an engine's own account of its memory: what the
// breakdown of a peak (weights, KV, other) comes from. NVML sees only the
// device total, which for an engine that reserves its pool up front is
// the reservation, not the use.
type MemoryReport struct {
	GPU            string `json:"gpu"`
	Simulated      bool   `json:"simulated"`
	UsedBytes      int64  `json:"used_bytes"`
	WeightsBytes   int64  `json:"weights_bytes"`
	KVPoolBytes    int64  `json:"kv_pool_bytes"`
	KVUsedBytes    int64  `json:"kv_used_bytes"`
	OtherBytes     int64  `json:"other_bytes"`
	Running        int    `json:"running"`
	Waiting        int    `json:"waiting"`
	ResidentTokens int64  `json:"resident_tokens"`
}

func getJSON(ctx context.Context, hc *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return errNoEndpoint
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("job: GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// probe polls an engine's memory report during a workload and keeps the
// reading with the most memory used, and the most sequences running.
type probe struct {
	url string
	hc  *http.Client

	mu      sync.Mutex
	peak    MemoryReport
	running int
	seen    bool
	// simulated stays set once any report said the engine is simulated
	// (a simulated engine on a real GPU's NVML is still a simulation).
	simulated bool
}

func (p *probe) reset() {
	p.mu.Lock()
	p.peak, p.running, p.seen = MemoryReport{}, 0, false
	p.mu.Unlock()
}

func (p *probe) read(ctx context.Context) error {
	var m MemoryReport
	if err := getJSON(ctx, p.hc, p.url, &m); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.seen || m.UsedBytes > p.peak.UsedBytes {
		p.peak = m
	}
	p.running = max(p.running, m.Running)
	p.seen = true
	p.simulated = p.simulated || m.Simulated
	return nil
}

// run polls until ctx ends. An engine without the report stops the probe
// at once.
func (p *probe) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := p.read(ctx); errors.Is(err, errNoEndpoint) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// result is the peak breakdown in the record's layout, and the most
// sequences seen running; ok is false when the engine gave no report.
func (p *probe) result(poolGiB float64) (record.PeakMemory, int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.seen {
		return record.PeakMemory{}, 0, false
	}
	pk := formula.Peak{
		WeightsGiB: float64(p.peak.WeightsBytes) / formula.GiB,
		KVGiB:      float64(p.peak.KVUsedBytes) / formula.GiB,
		OtherGiB:   float64(p.peak.OtherBytes) / formula.GiB,
		PoolGiB:    poolGiB, ResidentTokens: float64(p.peak.ResidentTokens),
	}
	return record.PeakMemory{
		WeightsGiB: formula.Round(pk.WeightsGiB, 3), KVGiB: formula.Round(pk.KVGiB, 3), OtherGiB: formula.Round(pk.OtherGiB, 3),
		PeakGiB: pk.PeakGiB(), KVUsage: pk.KVUsage(), KVBytesPerToken: pk.KVBytesPerToken(),
		Source: record.MemoryFromEngineReport,
	}, p.running, true
}

// metricsProbe polls an engine's Prometheus /metrics during a workload
// and keeps the most KV cache in use and the most requests running: the
// peak of an engine that serves no memory report (vLLM, SGLang).
type metricsProbe struct {
	url string
	hc  *http.Client

	mu      sync.Mutex
	usage   float64
	tokens  float64 // -1: the engine does not count its tokens
	running int
	seen    bool
	engine  string
}

func (p *metricsProbe) reset() {
	p.mu.Lock()
	p.usage, p.tokens, p.running, p.seen = 0, -1, 0, false
	p.mu.Unlock()
}

// run polls until ctx ends; an engine without metrics, or with none of
// the engines' gauges, stops it at once.
func (p *metricsProbe) run(ctx context.Context, every time.Duration) {
	if p.url == "" {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		m, err := telemetry.ScrapeMetrics(ctx, p.hc, p.url)
		switch {
		case errors.Is(err, telemetry.ErrNoMetricsEndpoint), errors.Is(err, telemetry.ErrNoEngineMetrics):
			return
		case err == nil:
			p.mu.Lock()
			if !p.seen || m.KVUsage >= p.usage {
				p.usage, p.tokens = m.KVUsage, m.UsedTokens
			}
			p.running = max(p.running, int(m.Running))
			p.seen, p.engine = true, m.Engine
			p.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// peakWithoutReport is the peak breakdown of an engine that gave no
// memory report, from what the runner saw itself: the KV cache in use
// from its metrics (usage times the pool of its start-up), weights and
// pool from its start-up lines, and its memory by the device's count
// (deviceBytes: NVML's used memory over the baseline before it started;
// 0 when nothing counted it). vLLM and SGLang allocate their pool whole
// at start, so the device holds weights + pool + other, and other is
// what is left of the device's count. ok is false when there is neither
// metrics nor a device count: then nothing measured the engine's memory.
// The record's source says which of them the figures come from.
func (p *metricsProbe) peakWithoutReport(st record.Startup, deviceBytes uint64) (record.PeakMemory, int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	deviceGiB := float64(deviceBytes) / formula.GiB
	pk := formula.Peak{WeightsGiB: st.WeightsGiB, PoolGiB: st.KVCacheGiB}
	var source string
	switch {
	case p.seen:
		pk.KVGiB = p.usage * st.KVCacheGiB
		pk.ResidentTokens = p.tokens
		if p.tokens < 0 {
			pk.ResidentTokens = p.usage * st.KVCacheTokens
		}
		if deviceBytes > 0 {
			pk.OtherGiB, source = max(0, deviceGiB-st.WeightsGiB-st.KVCacheGiB), record.MemoryFromMetricsNVML
		} else {
			pk.OtherGiB, source = st.CUDAGraphGiB, record.MemoryFromMetrics
		}
	case deviceBytes > 0:
		pk.KVGiB = st.KVCacheGiB
		pk.OtherGiB, source = max(0, deviceGiB-st.WeightsGiB-st.KVCacheGiB), record.MemoryFromNVML
	default:
		return record.PeakMemory{}, 0, false
	}
	return record.PeakMemory{
		WeightsGiB: formula.Round(pk.WeightsGiB, 3), KVGiB: formula.Round(pk.KVGiB, 3), OtherGiB: formula.Round(pk.OtherGiB, 3),
		PeakGiB: pk.PeakGiB(), KVUsage: pk.KVUsage(), KVBytesPerToken: pk.KVBytesPerToken(), Source: source,
	}, p.running, true
}
