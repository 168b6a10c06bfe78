package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/access"
	"github.com/lowbarena/lowbarena/platform/app"
)

// TestBudgetReplayUnderImitations runs the example's FP8 submission
// through a whole arena whose campaign serves with the real engines'
// templates (engines/vllm.json and engines/sglang.json, as an operator
// switches to them), each run by simengine imitating that engine as its
// pinned release behaves: its flags, its memory planning, its refusals,
// its start-up lines and its metrics' cadence (see
// docs/developers/imitations.md). The runner reads the engine as it
// would read the real one, from its log, its /metrics and the device's
// count of its memory, and every budget replay, rendered in the engine's
// own terms (a KV pool in bytes, SGLang's static fraction, the
// workload's own context), must start and hold: with the old
// --gpu-memory-utilization fraction and a 32K context every vLLM replay
// was refused at start.
func TestBudgetReplayUnderImitations(t *testing.T) {
	if testing.Short() {
		t.Skip("a whole arena per engine")
	}
	for _, tc := range []struct {
		engine, template string
		source           string
	}{
		{"vllm", examples.VLLMEngineCommand, record.MemoryFromMetricsNVML},
		{"sglang", examples.SGLangEngineCommand, record.MemoryFromMetricsNVML},
	} {
		t.Run(tc.engine, func(t *testing.T) {
			camps := t.TempDir()
			out, err := exec.Command("cp", "-r", filepath.Join(exampleDir, examples.CampaignsDir)+"/.", camps).CombinedOutput()
			require.NoError(t, err, "%s", out)
			file := filepath.Join(camps, examples.TaskID, campaign.File)
			b, err := os.ReadFile(file)
			require.NoError(t, err)
			var meta map[string]any
			require.NoError(t, json.Unmarshal(b, &meta))
			meta["engine"] = map[string]any{
				"command": "simengine --imitate " + tc.engine + " --source-config " + examples.SourceShapes + " --startup-seconds 0.5 -- " +
					tc.template,
				"max_num_seqs":  256,
				"max_model_len": examples.EngineMaxModelLen,
			}
			b, err = json.Marshal(meta)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(file, b, 0o644))

			data := t.TempDir()
			t.Setenv(app.EnvNATSCreds, filepath.Join(credentialsDir(data), access.Operator+".nk"))
			up := startUp(t, data, "--campaigns", camps)
			r := arena(t, "submit", bundleDir("fp8-w8a8"), "--nats", up.natsURL)
			require.Equal(t, 0, r.code, r.stderr)
			id := lastWord(r.stdout)
			require.True(t, events.ValidID(id), "submit printed %q", r.stdout)

			var rec record.Submission
			require.Eventually(t, func() bool {
				rec, _ = showJSON(t, up.natsURL, id)
				st := stageOf(t, rec, "efficiency").Status
				return st != record.StatusPending && st != record.StatusRunning
			}, 5*time.Minute, time.Second, "efficiency ends")
			require.Equal(t, record.StatusDone, stageOf(t, rec, "efficiency").Status, "efficiency under the %s imitation: %+v", tc.engine, rec.Error)
			require.True(t, rec.Result.Simulated, "an imitation is a simulation, and the record says so")
			require.Contains(t, rec.Result.GPU, "(simulated)")
			eng := rec.Result.Engine
			require.True(t, strings.HasPrefix(eng.Startup.KVCacheDType, "fp8"), "the running KV dtype, from the engine's own lines: %q", eng.Startup.KVCacheDType)
			require.Positive(t, eng.Startup.KVCacheTokens)
			for _, w := range []string{"serve", "interactive", "long_context"} {
				pm := rec.Result.PeakMemory[w]
				require.Equal(t, tc.source, pm.Source, "%s: read from the engine's metrics and the device's count", w)
				require.Positive(t, pm.OtherGiB, "%s: other is the device's count less weights and pool", w)
				require.Positive(t, pm.KVGiB, w)
				require.Greater(t, pm.DevicePeakGiB, pm.WeightsGiB+pm.KVGiB, "%s: the device holds the whole pool", w)
				b := eng.Budget[w+"@1.02"]
				require.True(t, b.Healthy, "%s budget under the %s imitation: %+v", w, tc.engine, b)
				require.Equal(t, b.FullRunning, b.Running, w)
			}
			up.stop(t)
		})
	}
}
