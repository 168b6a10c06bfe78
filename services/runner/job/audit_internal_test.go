package job

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/services/runner/loadgen"
)

// TestLoadSampleIsTheSeeds checks that the load's sample in the evidence
// is drawn from the seed alone: the same requests, in the order they
// were sent, whatever order their answers ended in; another seed draws
// other requests.
func TestLoadSampleIsTheSeeds(t *testing.T) {
	t.Parallel()
	const requests = 100
	w := loadgen.Workload{Name: "serve"}
	samples := make([]loadgen.Sample, requests)
	for i := range samples {
		samples[i] = loadgen.Sample{Seq: i, Source: fmt.Sprintf("item-%d", i), Chunks: []string{"x"}}
	}
	sampled := func(seed uint64, shuffle uint64) []int {
		ended := append([]loadgen.Sample(nil), samples...)
		rand.New(rand.NewPCG(shuffle, 0)).Shuffle(len(ended), func(i, j int) { ended[i], ended[j] = ended[j], ended[i] })
		a := newAuditRun(&AuditPlan{Seed: seed}, "/ckpt", "ckpt")
		a.workload(w, loadgen.Result{Samples: ended})
		var seqs []int
		for _, l := range a.evidence().Load {
			require.Equal(t, fmt.Sprintf("item-%d", l.Seq), l.Item, "an answer keeps the item its request was built from")
			seqs = append(seqs, l.Seq)
		}
		return seqs
	}
	first := sampled(42, 1)
	require.Len(t, first, LoadSample)
	require.IsIncreasing(t, first, "in the order the requests were sent")
	cases := []struct {
		name    string
		shuffle uint64
	}{
		{"answers ended in another order", 2},
		{"answers ended in yet another order", 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, first, sampled(42, c.shuffle))
		})
	}
	require.NotEqual(t, first, sampled(43, 1), "another seed, another sample")
}
