package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// MiB is 2^20 bytes.
const MiB = 1 << 20

// The simulation's own model of what an engine spends outside weights and
// KV cache. None of these is read from upstream: they are plausible sizes
// for an 8B model on one H100/H200 (see docs/developers/imitations.md).
const (
	// CUDAContextBytes is the CUDA context, cuBLAS handles and NCCL
	// communicator an engine holds from its first CUDA call: on the device
	// before any engine measures its free memory.
	CUDAContextBytes = 0.5 * GiB
	// NonTorchBytes is the memory outside torch's allocator that appears
	// during vLLM's profiling run (cuBLAS/cuDNN workspaces), which vLLM
	// subtracts from its KV budget as non_torch_increase.
	NonTorchBytes = 0.15 * GiB
	// ActivationFactor scales the activation peak of a forward pass over
	// N tokens: N x hidden x 2 bytes x ActivationFactor (the residual
	// stream, attention and MLP intermediates, logits). 8192 tokens of an
	// 8B model (hidden 4096) peak at 1.125 GiB.
	ActivationFactor = 18.0
	// GraphBaseBytes and GraphPerSizeBytes size the CUDA graphs: a memory
	// pool plus a little per captured batch size (0.25 GiB for vLLM's 19
	// sizes at --max-num-seqs 64, 0.38 GiB for SGLang's 36 on an H100).
	GraphBaseBytes    = 0.1 * GiB
	GraphPerSizeBytes = 8 * MiB
)

// activationBytes is the activation peak of a forward pass over tokens.
func activationBytes(tokens int64, hidden int) float64 {
	return float64(tokens) * float64(max(hidden, 1)) * 2 * ActivationFactor
}

// graphBytes is the memory CUDA graphs of these batch sizes take.
func graphBytes(sizes []int) float64 {
	if len(sizes) == 0 {
		return 0
	}
	return GraphBaseBytes + float64(len(sizes))*GraphPerSizeBytes
}

// EngineLine is one log line of an imitated engine. Proc names the vLLM
// process that writes it ("api" for the API server, "core" for the engine
// core; SGLang has none), Src the file:line its logger prints, Level the
// level; a Raw line has no logger prefix (a traceback line, uvicorn's).
type EngineLine struct {
	Proc, Level, Src, Text string
	Raw                    bool
}

// Phase is one step of an imitated start-up: at At (a fraction of
// --startup-seconds) the device holds Used bytes and the engine writes
// Lines; a Fail phase ends the process with status 1 after its lines.
type Phase struct {
	Name  string
	At    float64
	Used  float64
	Lines []EngineLine
	Fail  bool
}

// Imitation is an engine's start-up as its flags and the model decide it:
// the phases, and for an engine that starts, the plan it serves with.
type Imitation struct {
	Engine string
	Phases []Phase
	// Plan is the serving plan (weights, pool, bytes per token, context
	// length); meaningful when the last phase does not fail.
	Plan Plan
	// GraphBytes and ActivationBytes are the simulated CUDA graphs and
	// activation peak.
	GraphBytes, ActivationBytes float64
	// MaxSeqs is the most sequences running at once.
	MaxSeqs int
	// DamageKV names the KV dtype for the answer model (Damage).
	DamageKV string
	// ServedName, Host, Port and Seed come from the engine's flags.
	ServedName string
	Host       string
	Port       int
	Seed       int64
	// DecodeLogInterval and EnableMetrics are SGLang's.
	DecodeLogInterval int64
	EnableMetrics     bool
	// MemFractionStatic is SGLang's, as given or as it picks it;
	// GPUMemoryUtilization is vLLM's.
	MemFractionStatic    float64
	GPUMemoryUtilization float64
}

// Failed reports whether the imitated engine refuses to start.
func (im Imitation) Failed() bool {
	return len(im.Phases) > 0 && im.Phases[len(im.Phases)-1].Fail
}

// Lines returns every line of the start-up, in order.
func (im Imitation) Lines() []EngineLine {
	var out []EngineLine
	for _, p := range im.Phases {
		out = append(out, p.Lines...)
	}
	return out
}

// ServingBytes is what the device holds once the engine serves.
func (im Imitation) ServingBytes() float64 {
	if len(im.Phases) == 0 {
		return 0
	}
	return im.Phases[len(im.Phases)-1].Used
}

// ImitateInput is what an imitation is planned from.
type ImitateInput struct {
	GPU          GPU
	Config       ModelConfig
	Weights      Weights
	Args         EngineArgs
	Startup      float64 // --startup-seconds
	StepOverhead time.Duration
	// KVScale multiplies the KV bytes per token (simengine's --kv-scale);
	// 0 means 1.
	KVScale float64
}

// kvScale is the KV multiplier of the input.
func (in ImitateInput) kvScale() float64 {
	if in.KVScale <= 0 {
		return 1
	}
	return in.KVScale
}

// Imitate plans the start-up of the engine args.Engine names.
func Imitate(in ImitateInput) Imitation {
	if in.Args.Engine == "sglang" {
		return imitateSGLang(in)
	}
	return imitateVLLM(in)
}

// pyFloat formats a float as Python's repr does (1.0, 0.835, 4.26).
func pyFloat(x float64) string {
	s := strconv.FormatFloat(x, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eIN") {
		s += ".0"
	}
	return s
}

// gib2 is Python's round(b / GiB_bytes, 2) (halves to even), as vLLM's
// messages print it.
func gib2(b float64) string { return pyFloat(math.RoundToEven(b/GiB*100) / 100) }

// thousands writes n with comma separators, as Python's f"{n:,}".
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// architecture is the model class config.json names.
func architecture(c ModelConfig) string {
	if len(c.Architectures) > 0 && c.Architectures[0] != "" {
		return c.Architectures[0]
	}
	return "LlamaForCausalLM"
}

// kvBytesPerToken is the model's KV cache per token: 2 (K and V) x layers
// x kv_heads x head_dim x bytes per element, or for an MLA model one
// latent of kv_lora_rank + qk_rope_head_dim per layer.
func kvBytesPerToken(c ModelConfig, bpe float64) float64 {
	if c.KVLoraRank > 0 {
		return float64(c.Layers*(c.KVLoraRank+c.QKRopeHeadDim)) * bpe
	}
	return 2 * float64(c.Layers*c.KVHeads*c.HeadDim) * bpe
}

// pyArgRepr writes an argument's value as Python prints it in a dict.
func pyArgRepr(spec argSpec, a ParsedArgs) string {
	switch spec.Kind {
	case argInt, argHumanInt:
		return strconv.FormatInt(a.Int(spec.Dest, 0), 10)
	case argFloat:
		return pyFloat(a.Float(spec.Dest, 0))
	case argStoreTrue, argBoolOptional:
		if a.Bool(spec.Dest, false) {
			return "True"
		}
		return "False"
	case argMulti:
		var q []string
		for _, v := range a.Multi[spec.Dest] {
			q = append(q, "'"+v+"'")
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	return "'" + a.Values[spec.Dest] + "'"
}

// nonDefaultArgs is vLLM's "non-default args: {...}" dict.
func nonDefaultArgs(ea EngineArgs) string {
	var parts []string
	if v, ok := ea.Args.Values["model_tag"]; ok {
		parts = append(parts, fmt.Sprintf("'model_tag': '%s'", v))
	}
	for _, s := range vllmSpecs {
		if ea.Args.Given(s.Dest) {
			parts = append(parts, fmt.Sprintf("'%s': %s", s.Dest, pyArgRepr(s, ea.Args)))
		}
	}
	if _, ok := ea.Args.Values["model_tag"]; ok && !ea.Args.Given("model") {
		parts = append(parts, fmt.Sprintf("'model': '%s'", ea.Model))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// vllmCaptureSizes are the CUDA graph batch sizes vLLM captures by
// default: 1, 2, 4, then steps of 8 to 256 and of 16 beyond, up to
// min(2 x max_num_seqs, 512).
func vllmCaptureSizes(maxSeqs int64) []int {
	limit := int(min(2*maxSeqs, 512))
	var out []int
	for _, s := range []int{1, 2, 4} {
		if s <= limit {
			out = append(out, s)
		}
	}
	for s := 8; s <= limit && s < 256; s += 8 {
		out = append(out, s)
	}
	for s := 256; s <= limit; s += 16 {
		out = append(out, s)
	}
	return out
}

// imitateVLLM plans vLLM's start-up: the API server validates the config
// (max_model_len), the engine core takes its CUDA context and checks free
// memory against total x gpu_memory_utilization (gpu_worker.py
// init_device), loads the weights, profiles one forward of
// max_num_batched_tokens, sizes the KV pool as requested - weights -
// activation peak - non-torch memory (determine_available_memory; CUDA
// graphs are captured afterwards, outside that budget), or exactly
// --kv-cache-memory-bytes, checks it holds one max_model_len request
// (kv_cache_utils.py _check_enough_kv_cache_memory), allocates it whole in
// blocks, captures the graphs and serves.
func imitateVLLM(in ImitateInput) Imitation { //nolint:gocyclo // vLLM's start-up read top to bottom: each refusal sits where vLLM raises it
	a, c, gpu := in.Args.Args, in.Config, in.GPU
	total := gpu.NVMLBytes
	im := Imitation{Engine: "vllm", Host: a.Str("host", "0.0.0.0"), Port: int(a.Int("port", 8000)), Seed: a.Int("seed", 0)}
	im.ServedName = in.Args.Model
	if names := a.Multi["served_model_name"]; len(names) > 0 {
		im.ServedName = names[0]
	}
	kvd := a.Str("kv_cache_dtype", "auto")
	bpe, damage := 2.0, "bf16"
	if strings.HasPrefix(kvd, "fp8") {
		bpe, damage = 1, "fp8"
	}
	im.DamageKV = damage
	util := a.Float("gpu_memory_utilization", 0.9)
	im.GPUMemoryUtilization = util
	kvMem := float64(a.Int("kv_cache_memory_bytes", 0))
	maxSeqs := a.Int("max_num_seqs", 1024)
	im.MaxSeqs = int(maxSeqs)
	batched := a.Int("max_num_batched_tokens", 8192)
	block := a.Int("block_size", 16)
	derived := int64(c.MaxPos)
	maxLen := a.Int("max_model_len", derived)
	prefix := a.Bool("enable_prefix_caching", true)
	eager := a.Bool("enforce_eager", false)
	quant := a.Str("quantization", "None")
	kvpt := kvBytesPerToken(c, bpe) * in.kvScale()
	arch := architecture(c)
	pyBool := func(b bool) string {
		if b {
			return "True"
		}
		return "False"
	}
	api := func(src, text string) EngineLine { return EngineLine{Proc: "api", Level: "INFO", Src: src, Text: text} }
	core := func(src, text string) EngineLine {
		return EngineLine{Proc: "core", Level: "INFO", Src: src, Text: text}
	}
	coreErr := func(text string) EngineLine {
		return EngineLine{Proc: "core", Level: "ERROR", Src: "core.py:866", Text: text}
	}
	// The engine core's refusal: vLLM logs it with its traceback, and the
	// API server ends with the engine-core wrapper.
	coreFail := func(file string, line int, fn, msg string) []EngineLine {
		return []EngineLine{
			coreErr("EngineCore failed to start."),
			coreErr("Traceback (most recent call last):"),
			coreErr(fmt.Sprintf(`  File "/usr/local/lib/python3.12/dist-packages/vllm/%s", line %d, in %s`, file, line, fn)),
			coreErr("    raise ValueError("),
			coreErr("ValueError: " + msg),
			{Proc: "api", Raw: true, Text: "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"},
		}
	}

	// 1. The API server: version, arguments, model config.
	p0 := Phase{Name: "config", At: 0}
	p0.Lines = append(p0.Lines,
		api("api_server.py:1772", "vLLM API server version "+VLLMVersion),
		api("utils.py:253", "non-default args: "+nonDefaultArgs(in.Args)),
		api("model.py:637", "Resolved architecture: "+arch),
	)
	if maxLen > derived {
		msg := fmt.Sprintf("User-specified max_model_len (%d) is greater than the derived max_model_len (max_position_embeddings=%d or model_max_length=None in model's config.json). "+
			"To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. "+
			"If the model uses relative position encoding (RoPE), positions exceeding derived_max_model_len lead to nan. "+
			"If the model uses absolute position encoding, positions exceeding derived_max_model_len will cause a CUDA array out-of-bounds error.", maxLen, derived)
		p0.Lines = append(p0.Lines,
			EngineLine{Proc: "api", Raw: true, Text: "Traceback (most recent call last):"},
			EngineLine{Proc: "api", Raw: true, Text: `  File "/usr/local/lib/python3.12/dist-packages/vllm/engine/arg_utils.py", line 1154, in create_model_config`},
			EngineLine{Proc: "api", Raw: true, Text: "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig"},
			EngineLine{Proc: "api", Raw: true, Text: "  Value error, " + msg + fmt.Sprintf(" [type=value_error, input_value=ArgsKwargs((), {'model': '%s', ...}), input_type=ArgsKwargs]", in.Args.Model)},
			EngineLine{Proc: "api", Raw: true, Text: "    For further information visit https://errors.pydantic.dev/2.12/v/value_error"},
		)
		p0.Fail = true
		im.Phases = []Phase{p0}
		return im
	}
	p0.Lines = append(p0.Lines, api("model.py:1746", fmt.Sprintf("Using max model len %d", maxLen)))
	if bpe == 1 {
		p0.Lines = append(p0.Lines, api("cache.py:180", fmt.Sprintf("Using %s data type to store kv cache. It reduces the GPU memory footprint and boosts the performance. "+
			"Meanwhile, it may cause accuracy drop without a proper scaling factor.", kvd)))
	}
	p0.Lines = append(p0.Lines, api("scheduler.py:230", fmt.Sprintf("Chunked prefill is enabled with max_num_batched_tokens=%d.", batched)))
	im.Phases = append(im.Phases, p0)

	// 2. The engine core: its CUDA context, then the free-memory check.
	ctx := CUDAContextBytes
	free := total - ctx
	requested := total * util
	p1 := Phase{Name: "cuda context", At: 0.05, Used: ctx}
	p1.Lines = append(p1.Lines, core("core.py:93", fmt.Sprintf("Initializing a V1 LLM engine (v%s) with config: model='%s', speculative_config=None, tokenizer='%s', "+
		"skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, tokenizer_revision=None, trust_remote_code=False, dtype=torch.bfloat16, max_seq_len=%d, "+
		"download_dir=None, load_format=auto, tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1, disable_custom_all_reduce=False, "+
		"quantization=%s, enforce_eager=%s, kv_cache_dtype=%s, device_config=cuda, seed=%d, served_model_name=%s, enable_prefix_caching=%s, "+
		"enable_chunked_prefill=True, pooler_config=None",
		VLLMVersion, in.Args.Model, in.Args.Model, maxLen, quant, pyBool(eager), kvd, im.Seed, im.ServedName, pyBool(prefix))))
	if free < requested {
		p1.Lines = append(p1.Lines, coreFail("v1/worker/gpu_worker.py", 239, "init_device",
			fmt.Sprintf("Free memory on device (%s/%s GiB) on startup is less than desired GPU memory utilization (%s, %s GiB). "+
				"Decrease GPU memory utilization or reduce GPU memory used by other processes.", gib2(free), gib2(total), pyFloat(util), gib2(requested)))...)
		p1.Fail = true
		im.Phases = append(im.Phases, p1)
		return im
	}
	backend := "FLASH_ATTN"
	if gpu.CC != "9.0" {
		backend = "FLASHINFER"
	}
	p1.Lines = append(p1.Lines,
		core("gpu_model_runner.py:3353", "Starting to load model "+in.Args.Model+"..."),
		core("cuda.py:411", fmt.Sprintf("Using %s attention backend out of potential backends: ['FLASH_ATTN', 'FLASHINFER', 'TRITON_ATTN', 'FLEX_ATTENTION']", backend)))
	im.Phases = append(im.Phases, p1)

	// 3. The weights.
	weights := in.Weights.Bytes
	load := in.Startup * 0.4
	im.Phases = append(im.Phases, Phase{Name: "weights", At: 0.45, Used: ctx + weights, Lines: []EngineLine{
		core("default_loader.py:308", fmt.Sprintf("Loading weights took %.2f seconds", load*0.9)),
		core("gpu_model_runner.py:3435", fmt.Sprintf("Model loading took %.4f GiB memory and %.6f seconds", weights/GiB, load)),
	}})

	// 4. The profiling run and the KV budget.
	act := activationBytes(batched, c.Hidden)
	im.ActivationBytes = act
	p4 := Phase{Name: "profile", At: 0.55, Used: ctx + weights + NonTorchBytes + act}
	avail := requested - weights - act - NonTorchBytes
	if kvMem > 0 {
		avail = kvMem
		p4.Lines = append(p4.Lines, core("gpu_worker.py:298", fmt.Sprintf("Initial free memory %.2f GiB, reserved %.2f GiB memory for KV Cache as specified by kv_cache_memory_bytes config "+
			"and skipped memory profiling. This does not respect the gpu_memory_utilization config. Only use kv_cache_memory_bytes config when you want manual control "+
			"of KV cache memory size. If OOM'ed, check the difference of initial free memory between the current run and the previous run where kv_cache_memory_bytes "+
			"is suggested and update it correspondingly.", free/GiB, kvMem/GiB)))
	} else {
		p4.Lines = append(p4.Lines, core("gpu_worker.py:359", fmt.Sprintf("Available KV cache memory: %.2f GiB", avail/GiB)))
	}
	if avail <= 0 {
		p4.Lines = append(p4.Lines, coreFail("v1/core/kv_cache_utils.py", 686, "_check_enough_kv_cache_memory",
			"No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine. "+
				"See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")...)
		p4.Fail = true
		im.Phases = append(im.Phases, p4)
		return im
	}
	blockBytes := float64(block) * kvpt
	blocksPerReq := (maxLen + block - 1) / block
	needed := float64(blocksPerReq) * blockBytes
	numBlocks := int64(avail / blockBytes)
	if needed > avail {
		est := min(numBlocks*block, maxLen)
		estMsg := ""
		if est > 0 {
			estMsg = fmt.Sprintf("Based on the available memory, the estimated maximum model length is %d. ", est)
		}
		p4.Lines = append(p4.Lines, coreFail("v1/core/kv_cache_utils.py", 700, "_check_enough_kv_cache_memory",
			fmt.Sprintf("To serve at least one request with the models's max seq len (%d), (%s GiB KV cache is needed, which is larger than the available KV cache memory (%s GiB). "+
				"%sTry increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine. "+
				"See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.", maxLen, gib2(needed), gib2(avail), estMsg))...)
		p4.Fail = true
		im.Phases = append(im.Phases, p4)
		return im
	}
	tokens := numBlocks * block
	p4.Lines = append(p4.Lines,
		core("kv_cache_utils.py:1291", fmt.Sprintf("GPU KV cache size: %s tokens", thousands(tokens))),
		core("kv_cache_utils.py:1296", fmt.Sprintf("Maximum concurrency for %s tokens per request: %.2fx", thousands(maxLen), float64(numBlocks)/float64(blocksPerReq))))
	im.Phases = append(im.Phases, p4)

	// 5. The pool, allocated whole (the profile's activations are freed).
	pool := float64(tokens) * kvpt
	used := ctx + weights + NonTorchBytes + pool
	im.Phases = append(im.Phases, Phase{Name: "kv cache", At: 0.6, Used: used})

	// 6. CUDA graphs, captured outside the budget.
	graphs := 0.0
	if !eager {
		graphs = graphBytes(vllmCaptureSizes(maxSeqs))
	}
	im.GraphBytes = graphs
	used += graphs
	p6 := Phase{Name: "cuda graphs", At: 0.85, Used: used}
	if !eager {
		p6.Lines = append(p6.Lines, core("gpu_model_runner.py:4316", fmt.Sprintf("Graph capturing finished in %.0f secs, took %.2f GiB", in.Startup*0.25, graphs/GiB)))
	}
	p6.Lines = append(p6.Lines, core("core.py:258", fmt.Sprintf("init engine (profile, create kv cache, warmup model) took %.2f seconds", in.Startup*0.4)))
	im.Phases = append(im.Phases, p6)

	// 7. Serving: the warm-up's activations stay in torch's cache.
	used += act
	im.Phases = append(im.Phases, Phase{Name: "serving", At: 1, Used: used, Lines: []EngineLine{
		api("api_server.py:1879", fmt.Sprintf("Starting vLLM API server 0 on http://%s:%d", im.Host, im.Port)),
		{Proc: "api", Raw: true, Text: "INFO:     Started server process [{pid}]"},
		{Proc: "api", Raw: true, Text: "INFO:     Waiting for application startup."},
		{Proc: "api", Raw: true, Text: "INFO:     Application startup complete."},
	}})
	im.Plan = Plan{GPU: gpu, CapBytes: total, WeightsBytes: weights, Params: in.Weights.Params, OtherBytes: ctx + NonTorchBytes + graphs + act,
		KVPoolBytes: pool, KVBytesPerToken: kvpt, KVDType: vllmKVName(kvd), MaxModelLen: int(maxLen), StepOverhead: in.StepOverhead, BlockTokens: int(block)}
	return im
}

// vllmKVName is the plan's name of a vLLM KV dtype (auto is the model's
// BF16).
func vllmKVName(kvd string) string {
	if kvd == "auto" {
		return "bf16"
	}
	return kvd
}

// sglangKV is how SGLang stores a --kv-cache-dtype: bytes per element
// (FP4 is half a byte plus one FP8 scale per 16 elements; MXFP8 one scale
// per 32), the torch dtype it logs, and the answer model's name of it.
func sglangKV(kvd string) (bpe float64, torchName, damage string) {
	switch kvd {
	case "fp8_e4m3":
		return 1, "torch.float8_e4m3fn", "fp8"
	case "fp8_e5m2":
		return 1, "torch.float8_e5m2", "fp8"
	case "mxfp8":
		return 1 + 1.0/32, "torch.float8_e4m3fn", "fp8"
	case "nvfp4", "fp4_mx_block16", "fp4_e2m1":
		return 0.5 + 1.0/16, "torch.float4_e2m1fn_x2", "nvfp4"
	}
	return 2, "torch.bfloat16", "bf16"
}

// SGLangMemFractionStatic is the mem_fraction_static SGLang picks when
// none is given (server_args.py _handle_gpu_memory_settings, tp 1, no
// speculative decoding): (gpu_mem - reserved) / gpu_mem in MiB, rounded
// to 3 places, with reserved = 512 + 1.5 x max(chunked_prefill_size, 2048)
// + 2 x cuda_graph_max_bs + 128 (tp x pp / 8 x 1024), at least 10 GiB on a
// GPU over 60 GiB. It returns the chunked prefill size and CUDA graph
// batch ceiling of the GPU's memory bucket too.
func SGLangMemFractionStatic(nvmlBytes float64) (mfs float64, chunked, graphMaxBS int64) {
	gpuMem := math.Floor(nvmlBytes / MiB)
	switch {
	case gpuMem < 90*1024: // H100, A100
		chunked, graphMaxBS = 8192, 256
	case gpuMem < 160*1024: // H20, H200
		chunked, graphMaxBS = 8192, 256
	default: // B200, MI300
		chunked, graphMaxBS = 16384, 512
	}
	reserved := 512 + float64(max(chunked, 2048))*1.5 + float64(graphMaxBS)*2 + 1.0/8*1024
	if gpuMem > 60*1024 {
		reserved = math.Max(reserved, 10*1024)
	}
	return math.Round((gpuMem-reserved)/gpuMem*1000) / 1000, chunked, graphMaxBS
}

// sglangCaptureSizes are SGLang's CUDA graph batch sizes up to limit: 1,
// 2, 4, 8, 12, steps of 8 to 256, of 16 to 512, of 32 beyond.
func sglangCaptureSizes(limit int64) []int {
	var out []int
	add := func(s int) {
		if int64(s) <= limit {
			out = append(out, s)
		}
	}
	for _, s := range []int{1, 2, 4, 8, 12} {
		add(s)
	}
	for s := 16; s <= 256; s += 8 {
		add(s)
	}
	for s := 272; s < 512; s += 16 {
		add(s)
	}
	for s := 512; int64(s) <= limit; s += 32 {
		add(s)
	}
	return out
}

// imitateSGLang plans SGLang's start-up: the scheduler takes its CUDA
// context, derives context_len (refusing one longer than the model's),
// loads the weights, sizes the pool as profile_max_num_token does (rest =
// free-before-load x mem_fraction_static - weights, divided into tokens of
// the model's KV cell, capped by --max-total-tokens), refuses when no
// token fits, allocates the pool whole, captures the decode graphs out of
// the remainder and serves.
func imitateSGLang(in ImitateInput) Imitation { //nolint:gocyclo // SGLang's start-up read top to bottom: each refusal sits where SGLang raises it
	a, c, gpu := in.Args.Args, in.Config, in.GPU
	total := gpu.NVMLBytes
	im := Imitation{Engine: "sglang", Host: a.Str("host", "127.0.0.1"), Port: int(a.Int("port", 30000)), Seed: a.Int("random_seed", 0)}
	im.ServedName = a.Str("served_model_name", in.Args.Model)
	im.DecodeLogInterval = max(a.Int("decode_log_interval", 40), 1)
	im.EnableMetrics = a.Bool("enable_metrics", false)
	kvd := a.Str("kv_cache_dtype", "auto")
	bpe, torchKV, damage := sglangKV(kvd)
	im.DamageKV = damage
	autoMFS, chunked, graphMaxBS := SGLangMemFractionStatic(total)
	mfs := a.Float("mem_fraction_static", autoMFS)
	im.MemFractionStatic = mfs
	chunked = a.Int("chunked_prefill_size", chunked)
	graphMaxBS = a.Int("cuda_graph_max_bs", graphMaxBS)
	derived := int64(c.MaxPos)
	ctxLen := a.Int("context_length", derived)
	cell := kvBytesPerToken(c, bpe) * in.kvScale()
	arch := architecture(c)
	info := func(text string) EngineLine { return EngineLine{Level: "INFO", Text: text} }
	warn := func(text string) EngineLine { return EngineLine{Level: "WARNING", Text: text} }
	// A scheduler's exception: SGLang logs it with its traceback.
	fail := func(file string, line int, fn, exc string) []EngineLine {
		return []EngineLine{
			{Level: "ERROR", Text: "Scheduler hit an exception: Traceback (most recent call last):"},
			{Raw: true, Text: fmt.Sprintf(`  File "/sgl-workspace/sglang/python/sglang/srt/%s", line %d, in %s`, file, line, fn)},
			{Raw: true, Text: "    raise " + strings.SplitN(exc, ":", 2)[0] + "("},
			{Raw: true, Text: exc},
		}
	}

	// 1. The launcher's resolved arguments.
	resolved := fmt.Sprintf("server_args={'model_path': '%s', 'tokenizer_path': '%s', 'host': '%s', 'port': %d, 'dtype': 'auto', 'kv_cache_dtype': '%s', "+
		"'mem_fraction_static': %s, 'max_running_requests': %s, 'max_total_tokens': %s, 'chunked_prefill_size': %d, 'context_length': %s, 'tp_size': 1, "+
		"'random_seed': %d, 'served_model_name': '%s', 'disable_radix_cache': %s, 'enable_metrics': %s, 'decode_log_interval': %d, 'cuda_graph_max_bs': %d}",
		in.Args.Model, in.Args.Model, im.Host, im.Port, kvd, pyFloat(mfs), pyOptInt(a, "max_running_requests"), pyOptInt(a, "max_total_tokens"), chunked,
		pyOptInt(a, "context_length"), im.Seed, im.ServedName, pyTitle(a.Bool("disable_radix_cache", false)), pyTitle(im.EnableMetrics), im.DecodeLogInterval, graphMaxBS)
	im.Phases = append(im.Phases, Phase{Name: "config", At: 0, Lines: []EngineLine{info(resolved)}})

	// 2. The scheduler: CUDA context and the model config.
	ctx := CUDAContextBytes
	p1 := Phase{Name: "cuda context", At: 0.05, Used: ctx}
	if ctxLen > derived {
		msg := fmt.Sprintf("Warning: User-specified context_length (%d) is greater than the derived context_length (%d). This may lead to incorrect model outputs or CUDA errors. "+
			"Note that the derived context_length may differ from max_position_embeddings in the model's config.", ctxLen, derived)
		p1.Lines = append(p1.Lines, fail("configs/model_config.py", 345, "_derive_context_length",
			"ValueError: "+msg+" To allow overriding this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1")...)
		p1.Fail = true
		im.Phases = append(im.Phases, p1)
		return im
	}
	if strings.HasSuffix(torchKV, "float4_e2m1fn_x2") {
		p1.Lines = append(p1.Lines, warn("FP4 (E2M1) KV Cache might lead to a accuracy drop!"))
	}
	freeBefore := total - ctx
	p1.Lines = append(p1.Lines, info("Using KV cache dtype: "+torchKV), info(fmt.Sprintf("Load weight begin. avail mem=%.2f GB", freeBefore/GiB)))
	im.Phases = append(im.Phases, p1)

	// 3. The weights.
	weights := in.Weights.Bytes
	used := ctx + weights
	im.Phases = append(im.Phases, Phase{Name: "weights", At: 0.45, Used: used, Lines: []EngineLine{
		info(fmt.Sprintf("Load weight end. elapsed=%.2f s, type=%s, avail mem=%.2f GB, mem usage=%.2f GB.", in.Startup*0.4, arch, (total-used)/GiB, weights/GiB)),
	}})

	// 4. The pool.
	rest := (freeBefore - weights) - freeBefore*(1-mfs)
	tokens := int64(0)
	if rest > 0 {
		tokens = int64(rest / cell)
	}
	p3 := Phase{Name: "kv cache", At: 0.55}
	if mt := a.Int("max_total_tokens", 0); a.Given("max_total_tokens") {
		if mt > tokens {
			p3.Lines = append(p3.Lines, warn(fmt.Sprintf("max_total_tokens=%d is larger than the profiled value %d. Use the profiled value instead.", mt, tokens)))
		}
		tokens = min(tokens, mt)
	}
	if tokens <= 0 {
		p3.Used = used
		p3.Lines = append(p3.Lines, fail("model_executor/pool_configurator.py", 85, "__post_init__",
			"RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static="+pyFloat(mfs))...)
		p3.Fail = true
		im.Phases = append(im.Phases, p3)
		return im
	}
	pool := float64(tokens) * cell
	used += pool
	p3.Used = used
	if c.KVLoraRank > 0 {
		p3.Lines = append(p3.Lines, info(fmt.Sprintf("KV Cache is allocated. dtype: %s, #tokens: %d, KV size: %.2f GB", torchKV, tokens, pool/GiB)))
	} else {
		p3.Lines = append(p3.Lines, info(fmt.Sprintf("KV Cache is allocated. dtype: %s, #tokens: %d, K size: %.2f GB, V size: %.2f GB", torchKV, tokens, pool/2/GiB, pool/2/GiB)))
	}
	p3.Lines = append(p3.Lines, info(fmt.Sprintf("Memory pool end. avail mem=%.2f GB", (total-used)/GiB)))
	im.Phases = append(im.Phases, p3)

	// 5. Decode CUDA graphs, out of what the pool left.
	maxReqs := a.Int("max_running_requests", min(max(int64(float64(tokens)/float64(ctxLen)*512), 2048), 4096))
	im.MaxSeqs = int(maxReqs)
	graphs := 0.0
	if !a.Bool("disable_cuda_graph", false) {
		sizes := sglangCaptureSizes(min(graphMaxBS, maxReqs))
		graphs = graphBytes(sizes)
		bs := make([]string, len(sizes))
		for i, s := range sizes {
			bs[i] = strconv.Itoa(s)
		}
		im.Phases = append(im.Phases, Phase{Name: "cuda graph begin", At: 0.6, Used: used, Lines: []EngineLine{
			info(fmt.Sprintf("Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, bs=[%s], avail mem=%.2f GB", strings.Join(bs, ", "), (total-used)/GiB)),
		}})
		used += graphs
		im.Phases = append(im.Phases, Phase{Name: "cuda graphs", At: 0.85, Used: used, Lines: []EngineLine{
			info(fmt.Sprintf("Capture target decode CUDA graph end. elapsed=%.2f s, mem usage=%.2f GB, avail mem=%.2f GB.", in.Startup*0.25, graphs/GiB, (total-used)/GiB)),
		}})
	}
	im.GraphBytes = graphs
	im.Phases = append(im.Phases, Phase{Name: "scheduler", At: 0.9, Used: used, Lines: []EngineLine{
		info(fmt.Sprintf("max_total_num_tokens=%d, chunked_prefill_size=%d, max_prefill_tokens=16384, max_running_requests=%d, context_len=%d, available_gpu_mem=%.2f GB",
			tokens, chunked, maxReqs, ctxLen, (total-used)/GiB)),
	}})

	// 6. Serving: the warm-up's activations stay in torch's cache.
	act := activationBytes(chunked, c.Hidden)
	im.ActivationBytes = act
	used += act
	im.Phases = append(im.Phases, Phase{Name: "serving", At: 1, Used: used, Lines: []EngineLine{
		info("INFO:     Started server process [{pid}]"),
		info("INFO:     Waiting for application startup."),
		info("INFO:     Application startup complete."),
		info(fmt.Sprintf("INFO:     Uvicorn running on http://%s:%d (Press CTRL+C to quit)", im.Host, im.Port)),
		info("The server is fired up and ready to roll!"),
	}})
	im.Plan = Plan{GPU: gpu, CapBytes: total, WeightsBytes: weights, Params: in.Weights.Params, OtherBytes: ctx + graphs + act,
		KVPoolBytes: pool, KVBytesPerToken: cell, KVDType: vllmKVName(kvd), MaxModelLen: int(ctxLen), StepOverhead: in.StepOverhead, BlockTokens: 1}
	return im
}

// pyOptInt writes an optional integer argument as Python prints it.
func pyOptInt(a ParsedArgs, dest string) string {
	if !a.Given(dest) {
		return "None"
	}
	return strconv.FormatInt(a.Int(dest, 0), 10)
}

// pyTitle writes a bool as Python does.
func pyTitle(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

// EngineLogger writes an imitated engine's lines with its logger's prefix:
// vLLM's "(APIServer pid=N) INFO MM-DD HH:MM:SS [file.py:line] text",
// SGLang's "[YYYY-MM-DD HH:MM:SS] text".
type EngineLogger struct {
	Engine string
	Pid    int
	Now    func() time.Time
	Write  func(string)
}

// Format renders one line with the engine's prefix.
func (l EngineLogger) Format(ln EngineLine) string {
	now := time.Now
	if l.Now != nil {
		now = l.Now
	}
	text := strings.ReplaceAll(ln.Text, "{pid}", strconv.Itoa(l.Pid))
	if l.Engine == "sglang" {
		if ln.Raw {
			return text
		}
		return "[" + now().Format("2006-01-02 15:04:05") + "] " + text
	}
	proc := fmt.Sprintf("(APIServer pid=%d) ", l.Pid)
	if ln.Proc == "core" {
		proc = fmt.Sprintf("(EngineCore_DP0 pid=%d) ", l.Pid+1)
	}
	if ln.Raw {
		return proc + text
	}
	return fmt.Sprintf("%s%s %s [%s] %s", proc, ln.Level, now().Format("01-02 15:04:05"), ln.Src, text)
}

// Log writes one line.
func (l EngineLogger) Log(ln EngineLine) { l.Write(l.Format(ln)) }

// Info writes one INFO line from the given source (vLLM's file:line; SGLang
// prints none).
func (l EngineLogger) Info(src, text string) {
	l.Log(EngineLine{Proc: "core", Level: "INFO", Src: src, Text: text})
}
