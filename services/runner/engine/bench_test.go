package engine_test

import (
	"os"
	"strings"
	"testing"

	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/services/runner/engine"
)

// BenchmarkClassifyRoundPageTail classifies the round page's SGLang tail
// (about 50 lines, 4 KB): the cost of naming a failure.
func BenchmarkClassifyRoundPageTail(b *testing.B) {
	tmpl, err := os.ReadFile("testdata/sglang_cuda_graph_oom.log.tmpl")
	if err != nil {
		b.Fatal(err)
	}
	log := string(tmpl)
	b.SetBytes(int64(len(log)))
	for b.Loop() {
		if r, _ := engine.Classify(log); r != reason.EngineOOM {
			b.Fatal(r)
		}
	}
}

// BenchmarkClassify200Lines classifies a 200-line tail (the runner keeps
// 200) in which no class matches: every pattern reads every line.
func BenchmarkClassify200Lines(b *testing.B) {
	line := "(EngineCore_DP0 pid=12473) DEBUG 11-05 12:19:32 [core.py:708] step 1234 scheduled 32 requests, 4096 tokens\n"
	log := strings.Repeat(line, 200)
	b.SetBytes(int64(len(log)))
	for b.Loop() {
		if r, _ := engine.Classify(log); r != reason.EngineCrashed {
			b.Fatal(r)
		}
	}
}
