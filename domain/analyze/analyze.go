// Package analyze computes the contract of a submission: what its
// checkpoint really is, read from config.json (and ModelOpt's
// hf_quant_config.json) and the safetensors headers alone, against what
// the participant declared and the campaign's source model. The result is
// a record.Contract in the layout of the arena's records.
//
// The formats of the real tools are read one family per file (family.go
// says what a family is): compressed-tensors (ct.go), ModelOpt
// (modelopt.go), AutoGPTQ and GPTQModel (gptq.go), AutoAWQ (awq.go),
// transformers' and DeepSeek's block FP8 (fp8.go), gpt-oss' MXFP4
// (mxfp4.go) and bitsandbytes (bnb.go).
//
// # Definitions
//
// Linear weights are the source model's rank-2 tensors named M.weight
// whose module M is not an embedding (a last component containing
// "embed", or wte, wpe), and its rank-3 fused expert projections
// (M.experts.gate_up_proj). Decoder linears are the linear weights inside
// a decoder layer (layers.N, h.N, blocks.N, N below the source config's
// num_hidden_layers) that are not a router or gate (mlp.gate, mlp.router,
// shared_expert_gate) and not in a vision, audio or MTP tower (mtp.*, or
// the layers DeepSeek-V3 appends past num_hidden_layers): the attention,
// MLP and expert projections. When the source
// has none (a layout without numbered layers), every linear weight but
// lm_head and the gates is a decoder linear.
//
// A source weight's stored form is the checkpoint tensor of its own name
// (in its shape, or packed as a family stores it there), else a family's
// store (M.weight_packed, M.qweight, T_blocks). Its width is the bits its
// config gives it when its shape packs them, else 8 × stored bytes /
// source elements, rounded: packed int4 reads 4, FP8 and INT8 read 8,
// BF16 reads 16.
//
// weight_bits is the widest of the config's weight schemes over the
// decoder linears they cover and of the width of every decoder linear; 16
// when neither says anything. A decoder linear stored wider than its
// scheme makes the label wider, whether the config's ignore list names it
// or not; so a config that claims 4 bits over BF16 tensors reads 16, and
// a config without a recognised scheme reads what the tensors hold. The
// embeddings, lm_head, norms, gates and towers never make the label; they
// are listed in unquantized_modules when stored in 16 bits or more.
//
// activation_bits is the widest input-activation width over the decoder
// linears: the width of the group that quantizes each one, 16 for a
// decoder linear no group quantizes (none covers it, or the ignore list
// names it), for a group without input_activations, and for a decoder
// linear stored unquantized (16 bits or more); 16 without a recognised
// scheme.
//
// kv_bits is the config's KV cache scheme width (null when it has none).
// The detected label takes KV from the engine's running KV cache dtype when
// known (seed formulas §6: the fixtures' labels do), else from kv_bits, else
// 16.
//
// bits_per_weight is 8 × (stored bytes of the decoder linears plus their
// weight companions: scales, zero points, group indices, shapes, absmax
// and quant maps, as each family names them) / (source elements of the
// decoder linears). Activation and KV scales are not weight bytes. A BF16
// checkpoint reads 16.0. The arena fixtures' values are not exactly
// derivable from their records (seed formulas §6), so they are recorded
// readings, not a reproduced formula.
//
// model_bits_per_weight is 8 × every tensor byte of the checkpoint / every
// element of the source model. safetensor_bytes is the total size of the
// safetensors files read, headers included.
//
// Foreign tensors are checkpoint tensors that are neither source tensors nor
// allowed companions: a family's store or companion of a source weight, or
// an attention scale (k_scale, v_scale, q_scale, prob_scale) on any module
// above a source tensor. Their share is of the checkpoint's tensor bytes;
// above Policy.ForeignShareLimit (default 0.1%) they are a violation.
// Largest lists the five largest.
//
// A decoder linear whose quantized storage packs another width than its
// config gives it (a qweight of 8-bit rows under "bits": 4) breaks the
// contract with packing_mismatch; one whose storage packs no width at all
// with shape_mismatch.
package analyze

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/domain/safetensors"
	"github.com/lowbarena/lowbarena/events/reason"
)

// DefaultForeignShareLimit is the share of tensor bytes that foreign tensors
// may hold before they are a violation: 0.1%.
const DefaultForeignShareLimit = 0.001

// AttentionScales are the KV cache and attention scale suffixes allowed on
// any module above a source tensor (self_attn.k_scale, k_proj.k_scale...).
var AttentionScales = []string{"k_scale", "v_scale", "q_scale", "prob_scale"}

// Source is the campaign's source model: its config.json and the index of
// its tensors.
type Source struct {
	Config  []byte
	Tensors *TensorIndex
}

// Policy is what a campaign allows.
type Policy struct {
	// AllowSparse allows sparse (e.g. 2:4) checkpoints.
	AllowSparse bool
	// ForeignShareLimit is the share of tensor bytes foreign tensors may
	// hold; 0 means DefaultForeignShareLimit.
	ForeignShareLimit float64
}

// Input is everything the contract reads.
type Input struct {
	// Config is the checkpoint's config.json.
	Config []byte
	// HFQuantConfig is the checkpoint's hf_quant_config.json (ModelOpt),
	// or nil when it has none. It is read when config.json has no
	// quantization_config.
	HFQuantConfig []byte
	// Checkpoint holds the checkpoint's safetensors headers.
	Checkpoint *safetensors.Checkpoint
	// Source is the campaign's source model.
	Source Source
	// Declared is the participant's label, W{w}A{a}KV{kv}; empty when none
	// was declared (then precision is recorded, not judged).
	Declared string
	// KVCacheDType is the engine's running KV cache dtype ("fp8", "nvfp4",
	// "auto"...), or empty when not known yet.
	KVCacheDType string
	// Policy is the campaign's policy.
	Policy Policy
}

// Analyze computes the contract. It returns an *Error for input it cannot
// use; a checkpoint that breaks the contract is a Contract with OK false
// and its Violations, not an error.
func Analyze(in Input) (record.Contract, error) {
	if in.Checkpoint == nil {
		return record.Contract{}, fail(reason.CheckpointMissing, nil, "no safetensors headers")
	}
	if in.Source.Tensors == nil || len(in.Source.Tensors.Tensors) == 0 {
		return record.Contract{}, fail(reason.SourceInvalid, nil, "the source model has no tensor index")
	}
	if err := in.Source.Tensors.validate(); err != nil {
		return record.Contract{}, err
	}
	cfg, err := parseConfig(in.Config)
	if err != nil {
		return record.Contract{}, err
	}
	var hfQuant map[string]any
	if in.HFQuantConfig != nil {
		if hfQuant, err = parseConfig(in.HFQuantConfig); err != nil {
			return record.Contract{}, fail(reason.ConfigInvalid, err, "%s", HFQuantConfigFile)
		}
	}
	srcCfg, err := parseConfig(in.Source.Config)
	if err != nil {
		return record.Contract{}, fail(reason.SourceInvalid, err, "the source model's config.json")
	}
	var declared *Label
	if in.Declared != "" {
		l, err := ParseLabel(in.Declared)
		if err != nil {
			return record.Contract{}, err
		}
		declared = &l
	}
	engineKV, engineKVKnown, err := KVCacheBits(in.KVCacheDType)
	if err != nil {
		return record.Contract{}, err
	}
	limit := in.Policy.ForeignShareLimit
	if limit == 0 {
		limit = DefaultForeignShareLimit
	}

	a := &analysis{in: in, cfg: cfg, src: in.Source.Tensors, ck: in.Checkpoint, sch: schemeOf(quantizationConfig(cfg, hfQuant)),
		layers: decoderLayers(srcCfg)}
	a.classify()

	c := record.Contract{
		SafetensorBytes: a.ck.FileBytes(),
		RopeSource:      ropeOf(srcCfg),
		RopeArtifact:    ropeOf(cfg),
		Violations:      []record.Violation{},
	}
	c.Quantization, c.WeightBits, c.ActivationBits = a.precision()
	c.Format = c.Quantization.Format
	c.Sparse = c.Quantization.Sparse
	c.KVBits = a.sch.kvBits
	c.BitsPerWeight, c.ModelBitsPerWeight = a.bitsPerWeight()
	c.ForeignTensors = a.foreign()
	c.UnquantizedModules = a.unquantized()

	kv := 16
	switch {
	case engineKVKnown:
		kv = engineKV
	case c.KVBits != nil:
		kv = *c.KVBits
	}
	detected := Label{W: c.WeightBits, A: c.ActivationBits, KV: kv}
	c.DetectedPrecision = detected.String()
	c.DeclaredPrecision = in.Declared

	add := func(code reason.Code, format string, args ...any) {
		c.Violations = append(c.Violations, record.Violation{Code: string(code), Message: fmt.Sprintf(format, args...)})
	}
	if !ropeEqual(c.RopeSource, c.RopeArtifact) {
		add(reason.RopeChanged, "rope changed: the source model has %s, the checkpoint %s", ropeString(c.RopeSource), ropeString(c.RopeArtifact))
	}
	if c.ForeignTensors.Share > limit {
		add(reason.ForeignTensors, "%d foreign tensors hold %d bytes (%.2f%% of tensor bytes, over the %.2f%% allowed); largest: %s",
			c.ForeignTensors.Count, c.ForeignTensors.Bytes, 100*c.ForeignTensors.Share, 100*limit, c.ForeignTensors.Largest[0].Name)
	}
	if len(a.packingProblems) > 0 {
		add(reason.PackingMismatch, "%d quantized weights do not hold the bits their %s quantization config gives them: %s; the config must say what the tensors hold",
			len(a.packingProblems), a.sch.fam.name, summarize(a.packingProblems, 3))
	}
	if declared != nil {
		if wider := detected.Wider(*declared); len(wider) > 0 {
			add(reason.PrecisionWiderThanDeclared, "%s declared · the service reads %s; wider on %s", declared, detected, strings.Join(wider, ", "))
		}
	}
	if c.Sparse && !in.Policy.AllowSparse {
		add(reason.SparseWeights, "the checkpoint stores sparse weights, which this campaign does not allow")
	}
	if len(a.shapeProblems) > 0 {
		add(reason.ShapeMismatch, "%d source tensors are missing or reshaped: %s", len(a.shapeProblems), summarize(a.shapeProblems, 5))
	}
	var gapFiles []string
	var gapBytes int64
	for _, f := range a.ck.Files {
		if n := f.Header.GapBytes(); n > 0 {
			gapFiles = append(gapFiles, f.Name)
			gapBytes += n
		}
	}
	if gapBytes > 0 {
		add(reason.UnaccountedBytes, "%d bytes of %s belong to no tensor", gapBytes, strings.Join(gapFiles, ", "))
	}
	c.OK = len(c.Violations) == 0
	return c, nil
}

// analysis holds the classified tensors of one Analyze call.
type analysis struct {
	in  Input
	cfg map[string]any
	src *TensorIndex
	ck  *safetensors.Checkpoint
	sch scheme
	// layers is the source's num_hidden_layers (0 when not said).
	layers int

	// linear are the decoder linears: the weights the label counts.
	linear []linearWeight
	// moduleTensors are the source tensors of each module.
	moduleTensors map[string][]string
	// prefixes are every module above a source tensor.
	prefixes map[string]bool
	// groups memoizes scheme.groupOf per module.
	groups                         map[string]*group
	shapeProblems, packingProblems []string
}

// linearWeight is one decoder linear.
type linearWeight struct {
	name   string // the source tensor
	module string
	numel  int64
	stored located
	// width is its width in bits (0 when it is not stored); see the
	// package's definitions.
	width int
}

func moduleOf(name string) string {
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		return name[:i]
	}
	return ""
}

func (a *analysis) tiedEmbeddings() bool {
	for _, c := range []map[string]any{a.cfg, textConfig(a.cfg)} {
		if v, ok := c["tie_word_embeddings"].(bool); ok && v {
			return true
		}
	}
	return false
}

// classify finds each source tensor's stored form, checks its shape and
// packing, and collects the decoder linears.
func (a *analysis) classify() {
	a.moduleTensors, a.prefixes, a.groups = map[string][]string{}, map[string]bool{}, map[string]*group{}
	var others []linearWeight
	for _, name := range a.src.Names() {
		st := a.src.Tensors[name]
		m := moduleOf(name)
		a.moduleTensors[m] = append(a.moduleTensors[m], name)
		for p := m; p != ""; p = moduleOf(p) {
			a.prefixes[p] = true
		}
		stored, problem := a.locate(name, st)
		if problem != "" && !(name == "lm_head.weight" && stored.t == nil && a.tiedEmbeddings()) {
			a.shapeProblems = append(a.shapeProblems, problem)
		}
		module, ok := isLinearWeight(name, st)
		if !ok {
			continue
		}
		lw := linearWeight{name: name, module: module, numel: st.NumElements(), stored: stored}
		if inDecoder(module, a.layers) && !isGate(module) {
			a.linear = append(a.linear, lw)
		} else if lastName(module) != "lm_head" && !isGate(module) {
			others = append(others, lw)
		}
	}
	if len(a.linear) == 0 {
		a.linear = others // a layout without numbered decoder layers
	}
	for i := range a.linear {
		a.linear[i].width = a.width(a.linear[i])
	}
}

// groupOf is the scheme's group of a module, looked up once.
func (a *analysis) groupOf(module string) *group {
	g, ok := a.groups[module]
	if !ok {
		g = a.sch.groupOf(module)
		a.groups[module] = g
	}
	return g
}

// width is a decoder linear's width, and records a packing problem when
// its quantized storage packs another width than its config gives it.
func (a *analysis) width(lw linearWeight) int {
	t := lw.stored.t
	if t == nil || lw.numel == 0 {
		return 0
	}
	ratio := int(math.Round(8 * float64(t.Bytes()) / float64(lw.numel)))
	cfgBits := 0
	if g := a.groupOf(lw.module); g != nil {
		cfgBits = g.weights.NumBits
	}
	switch {
	case cfgBits > 0 && slices.Contains(lw.stored.fits, cfgBits):
		return cfgBits
	case cfgBits > 0 && ratio < 16 && len(lw.stored.fits) > 0:
		a.packingProblems = append(a.packingProblems, fmt.Sprintf("%s is %s%v, %d bits per weight of the source %v, where the config says %d",
			t.Name, t.DType, t.Shape, ratio, a.src.Tensors[lw.name].Shape, cfgBits))
	}
	return ratio
}

// precision reads the quantization block and the weight and activation bits.
func (a *analysis) precision() (record.Quantization, int, int) {
	q := record.Quantization{Ignore: a.sch.ignore, KVQuantized: a.sch.kvBits != nil, Sparse: a.sch.sparse}
	if q.Ignore == nil {
		q.Ignore = []string{}
	}
	configW := 0
	for _, lw := range a.linear {
		if g := a.groupOf(lw.module); g != nil {
			configW = max(configW, g.weights.NumBits)
		}
	}
	var best *group
	for i := range a.sch.groups {
		g := &a.sch.groups[i]
		if best == nil || g.weights.NumBits > best.weights.NumBits ||
			(g.weights.NumBits == best.weights.NumBits && a.coversLinear(*g) && !a.coversLinear(*best)) {
			best = g
		}
	}
	storageW := 0
	dominant := map[safetensors.DType]int64{}
	for _, lw := range a.linear {
		storageW = max(storageW, lw.width)
		if lw.width >= 16 {
			dominant[lw.stored.t.DType] += lw.numel
		}
	}
	w := max(configW, storageW)
	if w == 0 {
		w = 16
	}
	act := 16
	if a.sch.recognized {
		act = 0
		for _, lw := range a.linear {
			g := a.groupOf(lw.module)
			switch {
			case g == nil || g.acts == nil || lw.width >= 16:
				act = max(act, 16)
			default:
				act = max(act, g.acts.NumBits)
			}
		}
		if act == 0 {
			act = 16
		}
	}
	if best != nil {
		q.Weights = best.weights
		q.Activations = best.acts
		ab := 16
		if best.acts != nil {
			ab = best.acts.NumBits
		}
		q.Format = fmt.Sprintf("w%da%d", best.weights.NumBits, ab)
	} else {
		// No recognised scheme: the format names the unquantized dtype of
		// the decoder linears (bf16 as in the arena's records), or
		// "unrecognized" when they are stored quantized all the same.
		q.Format = "bf16"
		if storageW > 0 && storageW < 16 {
			q.Format = "unrecognized"
		}
		var top safetensors.DType
		for dt, n := range dominant {
			if top == "" || n > dominant[top] || (n == dominant[top] && dt < top) {
				top = dt
			}
		}
		switch top {
		case safetensors.F16:
			q.Format = "fp16"
		case safetensors.F32:
			q.Format = "fp32"
		}
	}
	return q, w, act
}

// coversLinear reports whether a group quantizes at least one decoder
// linear.
func (a *analysis) coversLinear(g group) bool {
	for _, lw := range a.linear {
		if !a.sch.ignored(lw.module) && g.covers(a.sch.rx, lw.module, "Linear") {
			return true
		}
	}
	return false
}

func (a *analysis) bitsPerWeight() (bpw, model float64) {
	var stored, n int64
	for _, lw := range a.linear {
		if lw.stored.t == nil {
			continue
		}
		n += lw.numel
		stored += lw.stored.t.Bytes()
		for _, x := range weightSuffixes {
			if t, ok := a.ck.Tensor(x.of(lw.name)); ok {
				stored += t.Bytes()
			}
		}
	}
	if n > 0 {
		bpw = 8 * float64(stored) / float64(n)
	}
	var srcNumel int64
	for _, t := range a.src.Tensors {
		srcNumel += t.NumElements()
	}
	if srcNumel > 0 {
		model = 8 * float64(a.ck.TensorBytes()) / float64(srcNumel)
	}
	return bpw, model
}

// allowed reports whether a checkpoint tensor is a source tensor, a
// family's store or companion of one (M.suffix for a source weight
// M.weight, T.suffix or T+suffix for a source tensor T), or an attention
// scale on a module above a source tensor.
func (a *analysis) allowed(name string) bool {
	if _, ok := a.src.Tensors[name]; ok {
		return true
	}
	for _, x := range allSuffixes {
		var base string
		switch x.at {
		case onModule:
			if m, ok := strings.CutSuffix(name, "."+x.s); ok {
				base = m + ".weight"
			}
		case onTensor:
			base, _ = strings.CutSuffix(name, "."+x.s)
		case onParam:
			base, _ = strings.CutSuffix(name, x.s)
		}
		if _, ok := a.src.Tensors[base]; ok && base != "" {
			return true
		}
	}
	i := strings.LastIndexByte(name, '.')
	if i < 0 {
		return false
	}
	m, suffix := name[:i], name[i+1:]
	return slices.Contains(AttentionScales, suffix) && a.prefixes[m]
}

func (a *analysis) foreign() record.ForeignTensors {
	ft := record.ForeignTensors{Largest: []record.ForeignTensor{}}
	var all []record.ForeignTensor
	for _, t := range a.ck.Tensors() {
		if a.allowed(t.Name) {
			continue
		}
		ft.Count++
		ft.Bytes += t.Bytes()
		all = append(all, record.ForeignTensor{Name: t.Name, Bytes: t.Bytes(), DType: string(t.DType), Shape: slices.Clone(t.Shape)})
	}
	slices.SortFunc(all, func(x, y record.ForeignTensor) int {
		if x.Bytes != y.Bytes {
			if x.Bytes > y.Bytes {
				return -1
			}
			return 1
		}
		return strings.Compare(x.Name, y.Name)
	})
	ft.Largest = append(ft.Largest, all[:min(5, len(all))]...)
	if total := a.ck.TensorBytes(); total > 0 {
		ft.Share = float64(ft.Bytes) / float64(total)
	} else if ft.Count > 0 {
		ft.Share = 1
	}
	return ft
}

func ropeEqual(a, b record.Rope) bool {
	return a.RopeTheta == b.RopeTheta && a.RopeType == b.RopeType && reflect.DeepEqual(a.RopeScaling, b.RopeScaling)
}

func ropeString(r record.Rope) string {
	s := fmt.Sprintf("rope_theta %g, rope_type %s", r.RopeTheta, r.RopeType)
	if r.RopeScaling != nil {
		s += fmt.Sprintf(", scaling %v", r.RopeScaling)
	}
	return s
}

func summarize(items []string, n int) string {
	s := strings.Join(items[:min(n, len(items))], "; ")
	if len(items) > n {
		s += fmt.Sprintf("; and %d more", len(items)-n)
	}
	return s
}
