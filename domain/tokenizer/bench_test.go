package tokenizer_test

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/domain/suite"
	"github.com/lowbarena/lowbarena/domain/tokenizer"
)

// BenchmarkCount re-tokenises what the token audit counts: the streamed
// text of one request of the load (a 64-token answer) and one prompt of
// the long_context workload, with the example tokenizer.
func BenchmarkCount(b *testing.B) {
	dir := b.TempDir()
	_, err := examples.Write(dir)
	require.NoError(b, err)
	tok, err := tokenizer.Load(filepath.Join(dir, examples.CampaignsDir, examples.TaskID, "reference", "tokenizer.json"))
	require.NoError(b, err)
	r := rand.New(rand.NewPCG(1, 2))
	long := suite.LoadPrompt(r, 1024)
	answer := "From the facts given, the answer is Kaloren.\nAnswer: B the committee reviewed the quarterly figures again and noted that the weather"
	for _, c := range []struct {
		name string
		text string
	}{{"answer", answer}, {"long_prompt", long}} {
		b.Run(c.name, func(b *testing.B) {
			n := 0
			b.SetBytes(int64(len(c.text)))
			for b.Loop() {
				n = tok.Count(c.text)
			}
			b.ReportMetric(float64(n), "tokens")
		})
	}
}
