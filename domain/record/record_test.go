package record

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFixturesRoundTrip proves that the record format mirrors the arena's
// records field for field: every field of both fixtures decodes into a
// known field (DisallowUnknownFields), and marshalling gives the fixture
// back.
func TestFixturesRoundTrip(t *testing.T) {
	paths, err := filepath.Glob("../../schemas/testdata/lowbarena/submission_*.json")
	require.NoError(t, err)
	require.Len(t, paths, 2)
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			raw, err := os.ReadFile(p)
			require.NoError(t, err)
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			var rec Submission
			require.NoError(t, dec.Decode(&rec))
			out, err := json.Marshal(&rec)
			require.NoError(t, err)
			var want, got any
			require.NoError(t, json.Unmarshal(raw, &want))
			require.NoError(t, json.Unmarshal(out, &got))
			require.Equal(t, want, got)
		})
	}
}

func TestEmptyContractListsAreArrays(t *testing.T) {
	out, err := json.Marshal(Contract{})
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(out, &m))
	require.Equal(t, []any{}, m["violations"])
	require.Equal(t, []any{}, m["foreign_tensors"].(map[string]any)["largest"])
	require.Equal(t, []any{}, m["quantization"].(map[string]any)["ignore"])
}

// TestGPUSecondsSetJob: the totals are the sum of the jobs', a job set
// again replaces its own figures.
func TestGPUSecondsSetJob(t *testing.T) {
	var g GPUSeconds
	g.SetJob("efficiency", GPUPhases{Held: 10.0004, Serving: 2, EngineStart: 7, Loading: 3, GraphCapture: 2, OtherStart: 2, Starts: 3})
	g.SetJob("quality", GPUPhases{Held: 4, Serving: 1, EngineStart: 2.5, OtherStart: 2.5, Starts: 1})
	g.SetJob("efficiency", GPUPhases{Held: 11, Serving: 2, EngineStart: 8, Loading: 3, GraphCapture: 2, OtherStart: 3, Starts: 3})
	require.Equal(t, GPUPhases{Held: 15, Serving: 3, EngineStart: 10.5, Loading: 3, GraphCapture: 2, OtherStart: 5.5, Starts: 4}, g.GPUPhases)
	require.Len(t, g.Jobs, 2)
}
