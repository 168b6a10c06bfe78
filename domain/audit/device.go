package audit

import (
	"strings"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events/reason"
)

// DeviceMargin is how far above the device's bound a measured rate may be
// before the device audit fails: the bound counts every byte a decode
// step must read from memory, and an L2 cache holding part of a small
// KV cache, or the table's rounding of a GPU's bandwidth, may beat it by
// a little, never by 15%.
const DeviceMargin = 1.15

// bandwidths are GPUs' memory bandwidths in bytes per second, matched in
// order against the lowercased name the engine run reports (NVML's, or
// simengine's simulated device, whose figures these are: see
// tools/simengine's GPUs).
var bandwidths = []struct {
	match []string // every word must be in the name
	bytes float64
}{
	{[]string{"h200"}, 4.8e12},
	{[]string{"h100", "pcie"}, 2.0e12},
	{[]string{"h100", "nvl"}, 3.9e12},
	{[]string{"h100"}, 3.35e12}, // SXM (NVML: "NVIDIA H100 80GB HBM3")
	{[]string{"a100", "80gb"}, 2.0e12},
	{[]string{"b200"}, 8.0e12},
	{[]string{"l40s"}, 0.864e12},
}

// Bandwidth is the memory bandwidth of a GPU by its name, in bytes per
// second, and whether the arena's table knows it.
func Bandwidth(gpu string) (float64, bool) {
	name := strings.ToLower(gpu)
	for _, b := range bandwidths {
		all := true
		for _, m := range b.match {
			all = all && strings.Contains(name, m)
		}
		if all {
			return b.bytes, true
		}
	}
	return 0, false
}

// DeviceBounds are the most a device of bandwidth bw (bytes per second)
// can decode of a model whose step reads weights bytes plus kv bytes per
// token of every running sequence's context of at least ctx tokens:
//
//	step_min   = (weights + running × kv × ctx) / bw
//	seq_max    = 1 / step_min with one sequence running
//	           = bw / (weights + kv × ctx)
//	rate_max   = running / step_min
//	           = bw / (weights + running × kv × ctx) × running
//
// Every decode step reads the weights once and each running sequence's
// KV cache; nothing a scheduler or kernel does avoids that read, so a
// faster rate was not decoded on this device. ctx is a lower bound (a
// sequence holds at least its prompt), which only raises the bounds.
func DeviceBounds(bw, weights, kv float64, running, ctx int) (seqMax, rateMax float64) {
	running = max(running, 1)
	seqMax = bw / (weights + kv*float64(max(ctx, 0)))
	rateMax = bw / (weights + float64(running)*kv*float64(max(ctx, 0))) * float64(running)
	return seqMax, rateMax
}

// device judges the measured decode rates against the device's bounds
// (faster_than_device): a rate above DeviceMargin times its bound, one
// sequence's (from the median time per output token) or the workload's
// aggregate at its measured concurrency, fails. A GPU the table does not
// know, or a run that reported no weights, is skipped with the reason,
// never passed.
func device(d *DeviceRun) *record.DeviceAudit {
	out := &record.DeviceAudit{Margin: DeviceMargin, Workloads: []record.DeviceWorkload{}}
	if d == nil {
		out.Check = skip("", "the runner gathered no device figures")
		return out
	}
	out.GPU, out.WeightBytes, out.KVBytesPerToken = d.GPU, d.WeightBytes, d.KVBytesPerToken
	bw, ok := Bandwidth(d.GPU)
	switch {
	case !ok:
		out.Check = skip("", "GPU %q is not in the arena's table of memory bandwidths: no bound to judge the decode rates by", d.GPU)
		return out
	case d.WeightBytes <= 0:
		out.Check = skip("", "the engine reported no weight bytes: no bound to judge the decode rates by")
		return out
	}
	out.Bandwidth = bw
	out.Check = pass("")
	for _, w := range d.Workloads {
		seqMax, rateMax := DeviceBounds(bw, d.WeightBytes, d.KVBytesPerToken, w.Running, w.MinPrompt)
		dw := record.DeviceWorkload{Workload: w.Name, Running: w.Running, ContextTokens: w.MinPrompt,
			Rate: w.Rate, SeqRateMax: seqMax, RateMax: rateMax}
		if w.TPOTMs > 0 {
			dw.SeqRate = 1000 / w.TPOTMs
		}
		out.Workloads = append(out.Workloads, dw)
		if out.Verdict == record.VerdictFail {
			continue
		}
		switch {
		case dw.SeqRate > DeviceMargin*seqMax:
			out.Check = fail("", reason.FasterThanDevice, "on %s one sequence decoded %.0f tokens/s (median time per token %.3f ms), above the %.0f tokens/s that %s's %.2f TB/s allow for %.2f GB of weights and a %d-token context (x%.2f margin): the rate was not decoded on this device",
				w.Name, dw.SeqRate, w.TPOTMs, seqMax, d.GPU, bw/1e12, d.WeightBytes/1e9, w.MinPrompt, DeviceMargin)
		case w.Rate > DeviceMargin*rateMax:
			out.Check = fail("", reason.FasterThanDevice, "on %s the engine produced %.0f tokens/s with at most %d sequences running, above the %.0f tokens/s that %s's %.2f TB/s allow (x%.2f margin): the rate was not decoded on this device",
				w.Name, w.Rate, w.Running, rateMax, d.GPU, bw/1e12, DeviceMargin)
		}
	}
	if len(d.Workloads) == 0 && out.Verdict == record.VerdictPass {
		out.Check = skip("", "the run measured no workload")
	}
	return out
}
