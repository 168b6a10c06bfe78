package pages

import (
	"encoding/json"
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/record"
)

// BenchmarkSubmissionPage builds and renders the page of a real record
// (the fixture qwen35-27b) with the telemetry of an efficiency job laid
// out as the runner writes it: four engine runs of 60 s at 10 Hz (600
// samples each, thinned to 400 points a plot) and 250 requests a
// workload.
func BenchmarkSubmissionPage(b *testing.B) {
	raw, err := os.ReadFile("../../../schemas/testdata/lowbarena/submission_qwen35-27b_4632bca02a3846d5.json")
	require.NoError(b, err)
	var rec record.Submission
	require.NoError(b, json.Unmarshal(raw, &rec))
	var tel Telemetry
	for _, phase := range []string{"candidate", "serve@1.02", "interactive@1.02", "long_context@1.02"} {
		r := Run{Phase: phase, Latency: map[string]Latency{}, Simulated: true}
		for i := range 600 {
			r.Samples = append(r.Samples, Sample{Seconds: float64(i) / 10, GiB: 20 + float64(i%37)/10})
		}
		for _, w := range Workloads {
			reqs := make([]Request, 250)
			for i := range reqs {
				reqs[i] = Request{TTFTMs: float64(i % 97), E2EMs: float64(1000 + i), OutputTokens: 128}
			}
			r.Latency[w] = LatencyOf(reqs)
		}
		tel.Runs = append(tel.Runs, r)
	}
	rd, err := NewRenderer()
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		p := NewSubmission(rec, tel)
		require.NoError(b, rd.Render(io.Discard, KindSubmission, Page{Title: "x", Body: p}, false))
	}
}
