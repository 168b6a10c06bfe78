// Package analyze computes the contract of a submission: what its
// checkpoint really is, read from config.json and the safetensors headers
// alone, against what the participant declared and the campaign's source
// model. The result is a record.Contract in the layout of the arena's
// records.
//
// # Definitions
//
// Linear weights are the source model's rank-2 tensors named *.weight whose
// module is not an embedding (a last component containing "embed", or wte,
// wpe) and is not matched by the quantization config's ignore list
// (compressed-tensors ignore, ModelOpt exclude_modules, transformers
// modules_to_not_convert). lm_head is a linear weight unless ignored, as it
// is for compressed-tensors' "Linear" target.
//
// A linear weight's stored form is the checkpoint's M.weight, else
// M.weight_packed, else M.qweight (M its module). Its storage bits are
// 8 × stored bytes / source elements, rounded: packed int4 in I32 or U8,
// NVFP4 in U8 and F4 read 4, FP8 and INT8 read 8, BF16 reads 16.
//
// weight_bits is the widest of the config's weight schemes (every group) and
// of the storage bits of every linear weight; 16 when neither says anything.
// So a config that claims 4 bits over BF16 tensors reads 16, and a config
// without a recognised scheme reads what the tensors hold.
//
// activation_bits is the widest input-activation width over the config's
// groups that target linear layers (a group without input_activations
// counts 16); 16 without a recognised scheme, or when a linear weight is
// stored unquantized (16 bits or more).
//
// kv_bits is the config's KV cache scheme width (null when it has none).
// The detected label takes KV from the engine's running KV cache dtype when
// known (seed formulas §6: the fixtures' labels do), else from kv_bits, else
// 16.
//
// bits_per_weight is 8 × (stored bytes of the linear weights plus their
// weight companions: weight_scale, weight_scale_2, weight_global_scale,
// weight_zero_point, weight_shape, weight_g_idx, qzeros, scales, g_idx) /
// (source elements of the linear weights). Activation and KV scales are not
// weight bytes. A BF16 checkpoint reads 16.0. The arena fixtures' values are
// not exactly derivable from their records (seed formulas §6), so they are
// recorded readings, not a reproduced formula.
//
// model_bits_per_weight is 8 × every tensor byte of the checkpoint / every
// element of the source model. safetensor_bytes is the total size of the
// safetensors files read, headers included.
//
// Foreign tensors are checkpoint tensors that are neither source tensors nor
// allowed companions: a suffix of Companions on a module that has a source
// weight or bias, or of AttentionScales (k_scale, v_scale, q_scale,
// prob_scale) on any module above a source tensor. Their share is of the
// checkpoint's tensor bytes; above Policy.ForeignShareLimit (default 0.1%)
// they are a violation. Largest lists the five largest.
package analyze

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"

	"github.com/lowbarena/lowbarena/services/domain/record"
	"github.com/lowbarena/lowbarena/services/domain/safetensors"
)

// DefaultForeignShareLimit is the share of tensor bytes that foreign tensors
// may hold before they are a violation: 0.1%.
const DefaultForeignShareLimit = 0.001

// Companions are the tensor-name suffixes a quantized module may add beside
// its weight: compressed-tensors (weight_packed, weight_scale,
// weight_global_scale, weight_zero_point, weight_shape, weight_g_idx,
// input_scale, input_global_scale, input_zero_point, output_scale), ModelOpt
// (weight_scale_2, input_scale) and GPTQ/AWQ (qweight, qzeros, scales, g_idx).
var Companions = []string{
	"weight_packed", "weight_scale", "weight_scale_2", "weight_global_scale", "weight_zero_point",
	"weight_shape", "weight_g_idx", "input_scale", "input_global_scale", "input_zero_point", "output_scale",
	"qweight", "qzeros", "scales", "g_idx",
}

// weightCompanions are the Companions that count as weight bytes in
// bits_per_weight.
var weightCompanions = []string{
	"weight_scale", "weight_scale_2", "weight_global_scale", "weight_zero_point",
	"weight_shape", "weight_g_idx", "qzeros", "scales", "g_idx",
}

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
		return record.Contract{}, fail(CodeCheckpointMissing, nil, "no safetensors headers")
	}
	if in.Source.Tensors == nil || len(in.Source.Tensors.Tensors) == 0 {
		return record.Contract{}, fail(CodeSourceInvalid, nil, "the source model has no tensor index")
	}
	if err := in.Source.Tensors.validate(); err != nil {
		return record.Contract{}, err
	}
	cfg, err := parseConfig(in.Config)
	if err != nil {
		return record.Contract{}, err
	}
	srcCfg, err := parseConfig(in.Source.Config)
	if err != nil {
		return record.Contract{}, fail(CodeSourceInvalid, err, "the source model's config.json")
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

	a := &analysis{in: in, cfg: cfg, src: in.Source.Tensors, ck: in.Checkpoint, sch: schemeOf(cfg)}
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

	add := func(code, format string, args ...any) {
		c.Violations = append(c.Violations, record.Violation{Code: code, Message: fmt.Sprintf(format, args...)})
	}
	if !ropeEqual(c.RopeSource, c.RopeArtifact) {
		add(ViolationRopeChanged, "rope changed: the source model has %s, the checkpoint %s", ropeString(c.RopeSource), ropeString(c.RopeArtifact))
	}
	if c.ForeignTensors.Share > limit {
		add(ViolationForeignTensors, "%d foreign tensors hold %d bytes (%.2f%% of tensor bytes, over the %.2f%% allowed); largest: %s",
			c.ForeignTensors.Count, c.ForeignTensors.Bytes, 100*c.ForeignTensors.Share, 100*limit, c.ForeignTensors.Largest[0].Name)
	}
	if declared != nil {
		if wider := detected.Wider(*declared); len(wider) > 0 {
			add(ViolationPrecisionWider, "%s declared · the service reads %s; wider on %s", declared, detected, strings.Join(wider, ", "))
		}
	}
	if c.Sparse && !in.Policy.AllowSparse {
		add(ViolationSparseWeights, "the checkpoint stores sparse weights, which this campaign does not allow")
	}
	if len(a.shapeProblems) > 0 {
		add(ViolationShapeMismatch, "%d source tensors are missing or reshaped: %s", len(a.shapeProblems), summarize(a.shapeProblems, 5))
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
		add(ViolationUnaccountedBytes, "%d bytes of %s belong to no tensor", gapBytes, strings.Join(gapFiles, ", "))
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

	// linear are the source linear weights that count (not ignored).
	linear []linearWeight
	// sourceModules are modules with a source weight or bias; prefixes are
	// every module above a source tensor.
	sourceModules, prefixes map[string]bool
	shapeProblems           []string
}

type linearWeight struct {
	module  string
	numel   int64
	stored  *safetensors.Located
	storage int // storage bits, 0 when not stored
}

func moduleOf(name string) string {
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		return name[:i]
	}
	return ""
}

func isEmbedding(module string) bool {
	last := module[strings.LastIndexByte(module, '.')+1:]
	return strings.Contains(last, "embed") || last == "wte" || last == "wpe"
}

func (a *analysis) ignored(module string) bool {
	for _, p := range a.sch.ignore {
		if matchModule(p, module) {
			return true
		}
	}
	return false
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
// collects the linear weights.
func (a *analysis) classify() {
	a.sourceModules, a.prefixes = map[string]bool{}, map[string]bool{}
	for _, name := range a.src.Names() {
		st := a.src.Tensors[name]
		m := moduleOf(name)
		a.sourceModules[m] = true
		for p := m; p != ""; p = moduleOf(p) {
			a.prefixes[p] = true
		}
		stored, problem := a.stored(name, st)
		if problem != "" {
			if !(name == "lm_head.weight" && stored == nil && a.tiedEmbeddings()) {
				a.shapeProblems = append(a.shapeProblems, problem)
			}
		}
		if !strings.HasSuffix(name, ".weight") || len(st.Shape) != 2 || isEmbedding(m) || a.ignored(m) {
			continue
		}
		lw := linearWeight{module: m, numel: st.NumElements(), stored: stored}
		if stored != nil && lw.numel > 0 {
			lw.storage = int(math.Round(8 * float64(stored.Bytes()) / float64(lw.numel)))
		}
		a.linear = append(a.linear, lw)
	}
}

// stored returns the checkpoint tensor that holds a source tensor, and a
// description of the problem when it is missing or its shape does not fit.
func (a *analysis) stored(name string, st SourceTensor) (*safetensors.Located, string) {
	if t, ok := a.ck.Tensor(name); ok {
		if !packedShape(st.Shape, t.DType, t.Shape) {
			return &t, fmt.Sprintf("%s is %s%v, the source %s", name, t.DType, t.Shape, st)
		}
		return &t, ""
	}
	if m, ok := strings.CutSuffix(name, ".weight"); ok {
		if t, ok := a.ck.Tensor(m + ".weight_packed"); ok {
			if !packedShape(st.Shape, t.DType, t.Shape) {
				return &t, fmt.Sprintf("%s.weight_packed is %s%v, the source %s", m, t.DType, t.Shape, st)
			}
			return &t, ""
		}
		if t, ok := a.ck.Tensor(m + ".qweight"); ok {
			return &t, "" // GPTQ/AWQ transpose and pack; the shape is not checked
		}
	}
	return nil, name + " is missing"
}

// packedShape reports whether a stored shape holds a source shape: equal, or
// equal but for the last dimension packed into a wider storage dtype (two
// 4-bit values per U8/I8, eight per I32/U32, or four 8-bit values per
// I32/U32).
func packedShape(src []int64, dt safetensors.DType, got []int64) bool {
	if slices.Equal(src, got) {
		return true
	}
	if len(src) == 0 || len(src) != len(got) || !slices.Equal(src[:len(src)-1], got[:len(got)-1]) {
		return false
	}
	last, want := got[len(got)-1], src[len(src)-1]
	switch dt {
	case safetensors.U8, safetensors.I8:
		return last*2 == want || (want%2 == 1 && last == want/2+1)
	case safetensors.I32, safetensors.U32:
		return last*8 == want || last*4 == want || last == (want+7)/8
	}
	return false
}

// precision reads the quantization block and the weight and activation bits.
func (a *analysis) precision() (record.Quantization, int, int) {
	q := record.Quantization{Ignore: a.sch.ignore, KVQuantized: a.sch.kvBits != nil, Sparse: a.sch.sparse}
	if q.Ignore == nil {
		q.Ignore = []string{}
	}
	configW := 0
	var best *group
	for i := range a.sch.groups {
		g := &a.sch.groups[i]
		configW = max(configW, g.weights.NumBits)
		if best == nil || g.weights.NumBits > best.weights.NumBits ||
			(g.weights.NumBits == best.weights.NumBits && a.coversLinear(*g) && !a.coversLinear(*best)) {
			best = g
		}
	}
	storageW, unquantized := 0, false
	dominant := map[safetensors.DType]int64{}
	for _, lw := range a.linear {
		storageW = max(storageW, lw.storage)
		if lw.storage >= 16 {
			unquantized = true
			dominant[lw.stored.DType] += lw.numel
		}
	}
	w := max(configW, storageW)
	if w == 0 {
		w = 16
	}
	act := 16
	if a.sch.recognized {
		act = 0
		for _, g := range a.sch.groups {
			if !a.coversLinear(g) {
				continue
			}
			if g.acts != nil {
				act = max(act, g.acts.NumBits)
			} else {
				act = 16
			}
		}
		if act == 0 || unquantized {
			act = max(act, 16)
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
		// the linear weights (bf16 as in the arena's records), or
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

// coversLinear reports whether a group targets at least one linear module.
func (a *analysis) coversLinear(g group) bool {
	for _, t := range g.targets {
		if t == "Linear" {
			return true
		}
	}
	for _, lw := range a.linear {
		if g.covers(lw.module, "Linear") {
			return true
		}
	}
	return false
}

func (a *analysis) bitsPerWeight() (bpw, model float64) {
	var stored, numel int64
	for _, lw := range a.linear {
		if lw.stored == nil {
			continue
		}
		numel += lw.numel
		stored += lw.stored.Bytes()
		for _, s := range weightCompanions {
			if t, ok := a.ck.Tensor(lw.module + "." + s); ok {
				stored += t.Bytes()
			}
		}
	}
	if numel > 0 {
		bpw = 8 * float64(stored) / float64(numel)
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

func (a *analysis) allowed(name string) bool {
	if _, ok := a.src.Tensors[name]; ok {
		return true
	}
	i := strings.LastIndexByte(name, '.')
	if i < 0 {
		return false
	}
	m, suffix := name[:i], name[i+1:]
	if slices.Contains(Companions, suffix) {
		return a.sourceModules[m]
	}
	if slices.Contains(AttentionScales, suffix) {
		return a.prefixes[m] || a.sourceModules[m]
	}
	return false
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
