package examples

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"

	"github.com/lowbarena/lowbarena/domain/suite"
	"github.com/lowbarena/lowbarena/domain/tokenizer"
)

// maxMerges is how many merges the example tokenizer learns: its
// vocabulary is the 256 bytes and these merges, below the model's 2048
// rows less the three special tokens, as real vocabularies are padded.
const maxMerges = 1200

// trainingCorpus is the text the example tokenizer is trained on: the
// dev suite's prompts and the replies a model gives them (right, wrong,
// unformatted, with the hedge the simulated engine adds), and a few
// prompts of the workloads' load. Deterministic.
func trainingCorpus() []string {
	s := suite.Generate("lowb-gen", "1", suite.SplitDev, suite.SeedDev, suite.DevSizes)
	var out []string
	for _, d := range s.Domains {
		for _, it := range s.Items[d] {
			out = append(out, it.Prompt)
			if sol, ok := suite.Solve(it.Prompt); ok {
				out = append(out, sol.Right, sol.Unformatted, "Let me work through this carefully. "+sol.Right)
				out = append(out, sol.Wrong...)
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		out = append(out, suite.LoadPrompt(r, 256))
	}
	return out
}

var (
	mergesOnce sync.Once
	merges     [][2]string
)

// exampleMerges trains byte-level BPE merges on trainingCorpus once: the
// pair of symbols that occurs most often (over distinct pre-tokenized
// words weighted by their counts) is merged, ties broken by the pair's
// text, until maxMerges or no pair occurs twice.
func exampleMerges(pre *tokenizer.Tokenizer) [][2]string {
	mergesOnce.Do(func() {
		counts := map[string]int{}
		for _, text := range trainingCorpus() {
			for _, w := range pre.Words(text) {
				counts[w]++
			}
		}
		type word struct {
			syms []string
			n    int
		}
		var words []word
		for _, w := range slices.Sorted(func(yield func(string) bool) {
			for k := range counts {
				if !yield(k) {
					return
				}
			}
		}) {
			var syms []string
			for _, r := range w {
				syms = append(syms, string(r))
			}
			words = append(words, word{syms, counts[w]})
		}
		for len(merges) < maxMerges {
			pairs := map[[2]string]int{}
			for _, w := range words {
				for i := 0; i+1 < len(w.syms); i++ {
					pairs[[2]string{w.syms[i], w.syms[i+1]}] += w.n
				}
			}
			var best [2]string
			bestN := 1
			for p, n := range pairs {
				if n > bestN || n == bestN && bestN > 1 && cmp.Compare(p[0]+" "+p[1], best[0]+" "+best[1]) < 0 {
					best, bestN = p, n
				}
			}
			if bestN < 2 {
				break
			}
			merges = append(merges, best)
			merged := best[0] + best[1]
			for wi := range words {
				syms := words[wi].syms
				out := syms[:0:0]
				for i := 0; i < len(syms); i++ {
					if i+1 < len(syms) && syms[i] == best[0] && syms[i+1] == best[1] {
						out = append(out, merged)
						i++
						continue
					}
					out = append(out, syms[i])
				}
				words[wi].syms = out
			}
		}
	})
	return merges
}

// mergeStrings writes merges as tokenizer.json does: "a b".
func mergeStrings(ms [][2]string) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = strings.Join(m[:], " ")
	}
	return out
}
