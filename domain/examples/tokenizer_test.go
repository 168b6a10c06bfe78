package examples

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/suite"
	"github.com/lowbarena/lowbarena/domain/tokenizer"
)

// TestTokenizer checks the example tokenizer: it loads, fits the model's
// vocabulary below its special tokens, round-trips the suite's text, and
// its merges make that text about four bytes a token, as real
// tokenizers do on English.
func TestTokenizer(t *testing.T) {
	t0 := time.Now()
	files, err := tokenizerFiles()
	require.NoError(t, err)
	t.Logf("trained in %s", time.Since(t0))
	tok, err := tokenizer.Parse(files["tokenizer.json"])
	require.NoError(t, err)
	require.LessOrEqual(t, tok.Size(), vocabSize)
	require.Equal(t, []int{imStartID}, tok.Encode("<|im_start|>"))
	s := suite.Generate("lowb-gen", "1", suite.SplitDev, suite.SeedDev, suite.DevSizes)
	bytes, tokens := 0, 0
	for _, d := range s.Domains {
		for _, it := range s.Items[d] {
			ids := tok.Encode(it.Prompt)
			require.Equal(t, it.Prompt, tok.Decode(ids), it.ID)
			for _, id := range ids {
				require.Less(t, id, endOfTextID, it.ID)
			}
			bytes, tokens = bytes+len(it.Prompt), tokens+len(ids)
		}
	}
	per := float64(bytes) / float64(tokens)
	t.Logf("%.2f bytes per token over the dev suite", per)
	require.Greater(t, per, 3.0)
}
