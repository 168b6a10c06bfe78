package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lowbarena/lowbarena/domain/safetensors"
)

// GiB is 2^30 bytes.
const GiB = 1 << 30

// OtherBytes is the fixed memory the engine spends outside weights and KV
// cache (CUDA context, activations, CUDA graphs).
const OtherBytes = 1.5 * GiB

// MinSeqTokens is the length of the one sequence the KV pool must hold for
// the engine to start.
const MinSeqTokens = 2048

// GPU describes the simulated accelerator.
type GPU struct {
	Key        string  // flag value, e.g. "h200"
	Name       string  // reported name, e.g. "NVIDIA H200 (simulated)"
	TotalBytes float64 // HBM size of plain simengine's plan (as before imitations)
	// NVMLBytes is the memory NVML reports for the device (nvidia-smi's
	// total), what the imitated engines plan with.
	NVMLBytes float64
	// CC is the CUDA compute capability, e.g. "9.0" for Hopper.
	CC        string
	Bandwidth float64 // HBM bandwidth, bytes per second
	FLOPS     float64 // dense BF16 FLOP/s
}

// GPUs are the accelerators simengine can simulate, by flag value. NVML
// totals are nvidia-smi's: 81559 MiB (H100 SXM 80GB), 143771 MiB (H200),
// 183359 MiB (B200).
var GPUs = map[string]GPU{
	"h200": {Key: "h200", Name: "NVIDIA H200 (simulated)", TotalBytes: 141 * GiB, NVMLBytes: 143771 * MiB, CC: "9.0", Bandwidth: 4.8e12, FLOPS: 989e12},
	"h100": {Key: "h100", Name: "NVIDIA H100 (simulated)", TotalBytes: 80 * GiB, NVMLBytes: 81559 * MiB, CC: "9.0", Bandwidth: 3.35e12, FLOPS: 989e12},
	"b200": {Key: "b200", Name: "NVIDIA B200 (simulated)", TotalBytes: 183359 * MiB, NVMLBytes: 183359 * MiB, CC: "10.0", Bandwidth: 8e12, FLOPS: 2.25e15},
}

// KVBytesPerElement returns the bytes one KV-cache element costs in the
// given --kv-cache-dtype, and the dtype's reported name (auto → bf16).
// NVFP4 costs half a byte plus one FP8 scale per 16 elements.
func KVBytesPerElement(dtype string) (float64, string, error) {
	switch strings.ToLower(dtype) {
	case "", "auto":
		return 2, "bf16", nil
	case "bf16", "bfloat16", "fp16", "float16", "half":
		return 2, dtype, nil
	case "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc":
		return 1, dtype, nil
	case "nvfp4", "fp4":
		return 0.5 + 1.0/16, dtype, nil
	}
	return 0, "", fmt.Errorf("unknown kv cache dtype %q", dtype)
}

// ModelConfig is the part of a Hugging Face config.json the simulation needs.
type ModelConfig struct {
	Layers  int `json:"num_hidden_layers"`
	KVHeads int `json:"num_key_value_heads"`
	Heads   int `json:"num_attention_heads"`
	HeadDim int `json:"head_dim"`
	Hidden  int `json:"hidden_size"`
	MaxPos  int `json:"max_position_embeddings"`
	// KVLoraRank and QKRopeHeadDim are set for an MLA model (DeepSeek-V2/V3
	// and kin), whose KV cache holds one latent of their sum per layer.
	KVLoraRank    int `json:"kv_lora_rank"`
	QKRopeHeadDim int `json:"qk_rope_head_dim"`
	// Architectures is config.json's model class, e.g. Qwen3ForCausalLM.
	Architectures []string `json:"architectures"`
}

// ParseConfig decodes config.json, filling head_dim from hidden_size /
// num_attention_heads and num_key_value_heads from num_attention_heads when
// absent.
func ParseConfig(data []byte) (ModelConfig, error) {
	var c ModelConfig
	if err := json.Unmarshal(data, &c); err != nil {
		return c, fmt.Errorf("config.json: %w", err)
	}
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.Hidden / c.Heads
	}
	if c.MaxPos == 0 {
		c.MaxPos = 32768
	}
	if c.Layers <= 0 || c.KVHeads <= 0 || c.HeadDim <= 0 {
		return c, fmt.Errorf("config.json: need num_hidden_layers, num_key_value_heads and head_dim (or hidden_size/num_attention_heads), got %+v", c)
	}
	return c, nil
}

// Weights is what the simulation takes from a checkpoint's safetensors.
type Weights struct {
	Bytes  float64 // TensorBytes, unscaled
	Params float64 // logical parameter count, unscaled
}

// WeightsOf summarises a checkpoint. The logical parameter count is the sum
// of tensor elements, except that integer tensors (packed 4-bit weights in
// U8/I8/I32 storage) count 8/4 parameters per byte, i.e. they are assumed to
// hold 4-bit values.
func WeightsOf(c *safetensors.Checkpoint) Weights {
	var w Weights
	for _, t := range c.Tensors() {
		w.Bytes += float64(t.Bytes())
		switch t.DType {
		case safetensors.U8, safetensors.I8, safetensors.I32, safetensors.U32:
			w.Params += float64(t.Bytes()) * 2
		default:
			w.Params += float64(t.NumElements())
		}
	}
	return w
}

// LoadedModel is a checkpoint read from disk.
type LoadedModel struct {
	Name       string
	Config     ModelConfig
	Weights    Weights
	Checkpoint *safetensors.Checkpoint
}

// LoadCheckpoint reads config.json and the safetensors headers of dir.
// Safetensors errors are wrapped so that safetensors.CodeOf still finds them.
func LoadCheckpoint(dir string) (LoadedModel, error) {
	m := LoadedModel{Name: filepath.Base(filepath.Clean(dir))}
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return m, fmt.Errorf("config.json: %w", err)
	}
	if m.Config, err = ParseConfig(data); err != nil {
		return m, err
	}
	c, err := safetensors.ReadCheckpoint(dir)
	if err != nil {
		return m, fmt.Errorf("safetensors: %w", err)
	}
	m.Weights, m.Checkpoint = WeightsOf(c), c
	return m, nil
}

// Plan is the engine's memory layout and speed model, all in scaled bytes.
type Plan struct {
	GPU             GPU
	CapBytes        float64
	WeightsBytes    float64
	Params          float64
	OtherBytes      float64
	KVPoolBytes     float64
	KVBytesPerToken float64
	KVDType         string // reported name
	MaxModelLen     int
	StepOverhead    time.Duration
	// BlockTokens is the KV cache's block (page) size in tokens; 0 means
	// the default BlockTokens.
	BlockTokens int
}

// OOMError is the failure of an engine whose cap leaves no room for the KV
// cache of one max-length sequence.
type OOMError struct {
	TryBytes, CapBytes, FreeBytes float64
}

func (e *OOMError) Error() string {
	return fmt.Sprintf("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate %.2f GiB. GPU 0 has a total capacity of %.2f GiB of which %.2f GiB is free.",
		e.TryBytes/GiB, e.CapBytes/GiB, math.Max(e.FreeBytes, 0)/GiB)
}

// ErrOOM matches any *OOMError with errors.Is.
var ErrOOM = errors.New("out of memory")

// Is makes errors.Is(err, ErrOOM) true.
func (e *OOMError) Is(target error) bool { return target == ErrOOM }

// PlanInput gathers what NewPlan needs.
type PlanInput struct {
	GPU      GPU
	CapBytes float64 // 0 means the GPU's total
	Config   ModelConfig
	Weights  Weights
	KVDType  string
	Scale    float64 // 0 means 1
	// KVScale multiplies the KV bytes per token instead of Scale when set,
	// so a tiny checkpoint can stand in for a large model's weights
	// without a KV cache of the same inflation (0 means Scale).
	KVScale      float64
	StepOverhead time.Duration
}

// NewPlan lays out memory: weights = TensorBytes*scale, other = 1.5 GiB, and
// the KV pool takes the rest of the cap. KV bytes per token =
// 2 (K and V) * layers * kv_heads * head_dim * bytes_per_element * kv_scale.
// It fails with an *OOMError when the pool cannot hold one 2048-token
// sequence.
func NewPlan(in PlanInput) (Plan, error) {
	if in.Scale <= 0 {
		in.Scale = 1
	}
	if in.KVScale <= 0 {
		in.KVScale = in.Scale
	}
	if in.CapBytes <= 0 {
		in.CapBytes = in.GPU.TotalBytes
	}
	bpe, name, err := KVBytesPerElement(in.KVDType)
	if err != nil {
		return Plan{}, err
	}
	p := Plan{
		GPU:          in.GPU,
		CapBytes:     in.CapBytes,
		WeightsBytes: in.Weights.Bytes * in.Scale,
		Params:       in.Weights.Params * in.Scale,
		OtherBytes:   OtherBytes,
		KVDType:      name,
		MaxModelLen:  in.Config.MaxPos,
		StepOverhead: in.StepOverhead,
	}
	p.KVBytesPerToken = 2 * float64(in.Config.Layers*in.Config.KVHeads*in.Config.HeadDim) * bpe * in.KVScale
	p.KVPoolBytes = p.CapBytes - p.WeightsBytes - p.OtherBytes
	need := p.KVBytesPerToken * MinSeqTokens
	if p.KVPoolBytes < need {
		free := p.CapBytes - p.WeightsBytes - p.OtherBytes
		try := need
		if free < 0 {
			try = p.WeightsBytes
			free = p.CapBytes - p.OtherBytes
		}
		return p, &OOMError{TryBytes: try, CapBytes: p.CapBytes, FreeBytes: free}
	}
	return p, nil
}

// KVTokens is how many tokens the KV pool holds.
func (p Plan) KVTokens() int64 {
	if p.KVBytesPerToken <= 0 {
		return 0
	}
	return int64(p.KVPoolBytes / p.KVBytesPerToken)
}

// StepTime is the roofline time of one step for a batch of b running
// sequences holding ctxTokens tokens of context in total, with
// prefillTokens prompt tokens of newly admitted sequences prefilled in the
// same step (a mixed batch, as chunked prefill runs it):
// max(memory, compute) + overhead, where memory = (weights + KV of the
// context) / bandwidth and compute = 2*params*(b + prefillTokens) / flops.
// The step reads the weights once for the decode and the prefill tokens
// alike, so a short prompt rides a memory-bound step nearly free and a
// long one makes it compute bound.
func (p Plan) StepTime(b int, ctxTokens, prefillTokens int64) time.Duration {
	mem := (p.WeightsBytes + p.KVBytesPerToken*float64(ctxTokens)) / p.GPU.Bandwidth
	comp := 2 * p.Params * float64(int64(b)+prefillTokens) / p.GPU.FLOPS
	if b == 0 && prefillTokens == 0 {
		return p.StepOverhead
	}
	return time.Duration(math.Max(mem, comp)*float64(time.Second)) + p.StepOverhead
}
