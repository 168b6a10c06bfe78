package analyze

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	"github.com/lowbarena/lowbarena/domain/record"
)

// The kinds of module the label does not count, as record.UnquantizedModule
// names them.
const (
	KindEmbedding = "embedding"
	KindLMHead    = "lm_head"
	KindNorm      = "norm"
	KindGate      = "gate"
	KindOther     = "other"
)

// kindOrder is the order in which the record lists the kinds.
var kindOrder = []string{KindEmbedding, KindLMHead, KindNorm, KindGate, KindOther}

// layerWords are the module names real architectures give their stack of
// decoder layers (model.layers.N, transformer.h.N, blocks.N, layer.N).
var layerWords = []string{"layers", "layer", "h", "blocks"}

// towerWords mark modules outside the language model's decoder: vision and
// audio towers, multimodal projectors and multi-token-prediction heads
// (Qwen3.5's mtp.*). A module whose path holds one is never a decoder
// linear, even under a layers.N of its own.
var towerWords = []string{"vision", "visual", "audio", "speech", "mm_projector", "multi_modal_projector", "mtp"}

func lastName(module string) string {
	return module[strings.LastIndexByte(module, '.')+1:]
}

func isEmbedding(module string) bool {
	last := lastName(module)
	return strings.Contains(last, "embed") || last == "wte" || last == "wpe"
}

// isGate reports whether a module is a router or gate projection: MoE
// routers (mlp.gate of Qwen-MoE, DeepSeek and Mixtral's block_sparse_moe,
// gpt-oss' mlp.router) and shared-expert gates (shared_expert_gate). Their
// outputs are routing logits or a sigmoid gate, not hidden states; the
// tools leave them in 16 bits. gate_proj and gate_up_proj are MLP
// projections, not gates.
func isGate(module string) bool {
	last := lastName(module)
	return last == "gate" || last == "router" || strings.HasSuffix(last, "_gate") || strings.HasSuffix(last, "_router")
}

func isNorm(module string) bool {
	last := lastName(module)
	return strings.Contains(last, "norm") || strings.HasPrefix(last, "ln_") || last == "ln_f"
}

// inDecoder reports whether a module sits inside a decoder layer of the
// language model: a layers.N (or h.N, blocks.N, layer.N) in its path, no
// tower word, and, when the source config says how many decoder layers
// there are, N below that count. Layers past it are multi-token-prediction
// modules appended after the decoder (DeepSeek-V3's layers.61, with its
// unquantized eh_proj and shared_head, README_WEIGHTS.md "Loading rules").
func inDecoder(module string, layers int) bool {
	parts := strings.Split(module, ".")
	decoder := false
	for i, p := range parts {
		for _, w := range towerWords {
			if strings.Contains(p, w) {
				return false
			}
		}
		if i+1 < len(parts) && slices.Contains(layerWords, p) && isDigits(parts[i+1]) {
			n, err := strconv.Atoi(parts[i+1])
			if layers > 0 && (err != nil || n >= layers) {
				return false
			}
			decoder = true
		}
	}
	return decoder
}

// decoderLayers reads the source config's num_hidden_layers (of its
// text_config for multimodal models); 0 when it does not say.
func decoderLayers(cfg map[string]any) int {
	for _, c := range []map[string]any{cfg, textConfig(cfg)} {
		if n, ok := number(c, "num_hidden_layers"); ok && n > 0 {
			return n
		}
	}
	return 0
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// isLinearWeight reports whether a source tensor is the weight of a linear
// map, and returns its module: a rank-2 M.weight that is not an
// embedding, or a rank-3 fused expert projection (gpt-oss and
// transformers 5 store a MoE layer's experts as one tensor,
// mlp.experts.gate_up_proj [experts, in, out]).
func isLinearWeight(name string, st SourceTensor) (string, bool) {
	if m, ok := strings.CutSuffix(name, ".weight"); ok && len(st.Shape) == 2 {
		return m, !isEmbedding(m)
	}
	if len(st.Shape) == 3 {
		m := moduleOf(name)
		if lastName(m) == "experts" && strings.HasSuffix(lastName(name), "_proj") {
			return m, true
		}
	}
	return "", false
}

// kindOf names what a module outside the label is.
func kindOf(module string, rank int) string {
	switch {
	case isEmbedding(module):
		return KindEmbedding
	case lastName(module) == "lm_head":
		return KindLMHead
	case isGate(module):
		return KindGate
	case rank == 1 && isNorm(module):
		return KindNorm
	}
	return KindOther
}

// collapse writes a module name with every layer or expert index as *, so
// that the 64 input_layernorms of a model are one entry:
// model.layers.*.input_layernorm.
func collapse(module string) string {
	parts := strings.Split(module, ".")
	for i, p := range parts {
		if isDigits(p) {
			parts[i] = "*"
		}
	}
	return strings.Join(parts, ".")
}

// unquantized lists the modules outside the label that the checkpoint
// stores unquantized: every source module with a weight that is not a
// counted decoder linear, whose weight is stored under its own name, in
// the source's shape, in a float type of 16 bits or more. Its bytes are
// those of every source tensor of the module (weight, bias, the router's
// e_score_correction_bias...). Modules that differ only by a layer or
// expert index and share a kind and dtype are one entry.
func (a *analysis) unquantized() []record.UnquantizedModule {
	counted := map[string]bool{}
	for _, lw := range a.linear {
		counted[lw.name] = true
	}
	type key struct{ name, kind, dtype string }
	entries := map[key]*record.UnquantizedModule{}
	seen := map[string]bool{}
	for _, name := range a.src.Names() {
		m, ok := strings.CutSuffix(name, ".weight")
		if !ok || counted[name] || seen[m] {
			continue
		}
		st := a.src.Tensors[name]
		t, ok := a.ck.Tensor(name)
		if !ok || !t.DType.IsFloat() || t.DType.Bits() < 16 || !slices.Equal(t.Shape, st.Shape) {
			continue
		}
		seen[m] = true
		var bytes int64
		for _, other := range a.moduleTensors[m] {
			if s, ok := a.ck.Tensor(other); ok {
				bytes += s.Bytes()
			}
		}
		k := key{collapse(m), kindOf(m, len(st.Shape)), string(t.DType)}
		e := entries[k]
		if e == nil {
			e = &record.UnquantizedModule{Name: k.name, Kind: k.kind, DType: k.dtype}
			entries[k] = e
		}
		e.Count++
		e.Bytes += bytes
	}
	out := make([]record.UnquantizedModule, 0, len(entries))
	for _, e := range entries {
		out = append(out, *e)
	}
	slices.SortFunc(out, func(x, y record.UnquantizedModule) int {
		return cmp.Or(
			cmp.Compare(slices.Index(kindOrder, x.Kind), slices.Index(kindOrder, y.Kind)),
			strings.Compare(x.Name, y.Name),
			strings.Compare(x.DType, y.DType))
	})
	return out
}
