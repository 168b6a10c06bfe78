package audit_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/audit"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events/reason"
)

// TestBandwidth checks the table by GPU name: NVML's names and the
// simulated devices' match their bandwidths; an unknown GPU is not
// matched.
func TestBandwidth(t *testing.T) {
	cases := []struct {
		gpu  string
		want float64
		ok   bool
	}{
		{"NVIDIA H100 80GB HBM3", 3.35e12, true},
		{"NVIDIA H100 PCIe", 2.0e12, true},
		{"NVIDIA H200", 4.8e12, true},
		{"NVIDIA H200 (simulated)", 4.8e12, true},
		{"NVIDIA A100-SXM4-80GB", 2.0e12, true},
		{"NVIDIA B200", 8.0e12, true},
		{"NVIDIA L40S", 0.864e12, true},
		{"NVIDIA GeForce RTX 4090", 0, false},
	}
	for _, c := range cases {
		t.Run(c.gpu, func(t *testing.T) {
			bw, ok := audit.Bandwidth(c.gpu)
			require.Equal(t, c.ok, ok)
			require.Equal(t, c.want, bw)
		})
	}
}

// TestDeviceAudit judges built runs on the simulated H200: rates at the
// device's bound (what simengine's step time gives) pass; a per-sequence
// rate, or an aggregate, above the bound times the margin fails with
// faster_than_device; an unknown GPU or no weights is skipped with the
// reason, never passed.
func TestDeviceAudit(t *testing.T) {
	const (
		gpu     = "NVIDIA H200 (simulated)"
		weights = 16e9
		kv      = 131072.0
		prompt  = 300
		running = 32
	)
	seqMax, rateMax := audit.DeviceBounds(4.8e12, weights, kv, running, prompt)
	// The formula beside the code: bw / (weights + running*kv*ctx) * running.
	require.InDelta(t, 4.8e12/(weights+kv*prompt), seqMax, 1e-9)
	require.InDelta(t, 4.8e12/(weights+running*kv*prompt)*running, rateMax, 1e-9)
	// An honest step at 32 running reads every sequence's KV: its time per
	// token is at least the step's memory time.
	honestTPOT := (weights + running*kv*prompt) / 4.8e12 * 1000
	run := func(tpot, rate float64) *audit.DeviceRun {
		return &audit.DeviceRun{GPU: gpu, WeightBytes: weights, KVBytesPerToken: kv, Workloads: []audit.DeviceWorkload{
			{Name: "serve", Running: running, MinPrompt: prompt, TPOTMs: tpot, Rate: rate}}}
	}
	cases := []struct {
		name    string
		run     *audit.DeviceRun
		verdict string
		reason  string
	}{
		{"honest at the bound", run(honestTPOT, 0.9*rateMax), record.VerdictPass, ""},
		{"replayed at once", run(honestTPOT/20, 0.9*rateMax), record.VerdictFail, string(reason.FasterThanDevice)},
		{"aggregate above", run(honestTPOT, 1.3*rateMax), record.VerdictFail, string(reason.FasterThanDevice)},
		{"within the margin", run(honestTPOT/1.1, 1.1*rateMax), record.VerdictPass, ""},
		{"unknown GPU", &audit.DeviceRun{GPU: "Some Accelerator", WeightBytes: weights}, record.VerdictSkipped, ""},
		{"no weights", &audit.DeviceRun{GPU: gpu}, record.VerdictSkipped, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := audit.Judge(audit.Inputs{Evidence: &audit.Evidence{Device: c.run}})
			require.Equal(t, c.verdict, a.Device.Verdict, a.Device.Message)
			require.Equal(t, c.reason, a.Device.Reason)
			if c.verdict == record.VerdictSkipped {
				require.NotEmpty(t, a.Device.Message, "a skipped audit says why")
			}
			if c.reason != "" {
				require.Equal(t, c.reason, a.Reason, "the block's verdict is the device audit's")
			}
		})
	}
}

// TestUnpatchedComparison judges a patched engine's probes and load
// against the campaign's unpatched engine's answers: the same answers
// pass; another model's on every request fails served_model_mismatch; a
// load served another way than the probes fails
// accuracy_differs_under_load.
func TestUnpatchedComparison(t *testing.T) {
	ans := func(item, workload string, seq int, text ...string) audit.Answer {
		return audit.Answer{Item: item, Workload: workload, Seq: seq, Chunks: text}
	}
	probes := []audit.Answer{ans("m1", "", 0, "4", "2"), ans("m2", "", 1, "7"), ans("k1", "", 2, "B"), ans("k2", "", 3, "C")}
	var load []audit.Answer
	for i := range 8 {
		load = append(load, ans("m1", "serve", i, "4", "2", " the"))
	}
	unpatched := &audit.UnpatchedRun{Probes: probes, Load: []audit.Answer{}}
	for _, l := range load {
		unpatched.Load = append(unpatched.Load, ans(l.Item, l.Workload, l.Seq, "4", "2"))
	}
	other := func(as []audit.Answer) []audit.Answer {
		var out []audit.Answer
		for _, a := range as {
			out = append(out, ans(a.Item, a.Workload, a.Seq, "9", "9"))
		}
		return out
	}
	grade := func(_, text string) (float64, error) {
		if text == "42" {
			return 1, nil
		}
		return 0, nil
	}
	cases := []struct {
		name          string
		probes, load  []audit.Answer
		served, acc   string
		reason        string
		loadAgreement float64
	}{
		{"the unpatched engine's answers", probes, load, record.VerdictPass, "", "", 1},
		{"another model for every request", other(probes), other(load), record.VerdictFail, "", string(reason.ServedModelMismatch), 0},
		{"the load served another way", probes, other(load), record.VerdictPass, record.VerdictFail, string(reason.AccuracyDiffersUnderLoad), 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev := &audit.Evidence{Checkpoint: "ckpt", ServedModel: "ckpt", Probes: c.probes, Load: c.load, Unpatched: unpatched}
			quality := map[string]audit.Reference{"m1": {Text: "42", Tokens: 2, Score: 1}, "m2": {Text: "7", Tokens: 1, Score: 1},
				"k1": {Text: "B", Tokens: 1, Score: 1}, "k2": {Text: "C", Tokens: 1, Score: 1}}
			a := audit.Judge(audit.Inputs{Evidence: ev, Grade: grade, Quality: quality})
			require.Equal(t, c.served, a.ServedModel.Verdict, a.ServedModel.Message)
			if c.acc != "" {
				require.Equal(t, c.acc, a.AccuracyUnderLoad.Verdict, a.AccuracyUnderLoad.Message)
			}
			require.Equal(t, c.reason, a.Reason, a.Message)
			require.Equal(t, len(c.load), a.AccuracyUnderLoad.LoadCompared)
			require.InDelta(t, c.loadAgreement, a.AccuracyUnderLoad.LoadAgreement, 1e-9)
		})
	}
}
