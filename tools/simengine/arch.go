package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/lowbarena/lowbarena/domain/safetensors"
)

// Role is what a tensor does in a decoder-only transformer of the Llama
// and Qwen families. Each role's bytes per parameter are measured on the
// submitted checkpoint and applied to the full-size model's shapes.
type Role string

// The tensor roles. RoleOther holds what matches none (an adapter, an
// extra head): it scales with the model's parameter count.
const (
	RoleEmbed  Role = "embed_tokens"
	RoleLMHead Role = "lm_head"
	RoleQ      Role = "q_proj"
	RoleK      Role = "k_proj"
	RoleV      Role = "v_proj"
	RoleO      Role = "o_proj"
	RoleGate   Role = "gate_proj"
	RoleUp     Role = "up_proj"
	RoleDown   Role = "down_proj"
	RoleNorm   Role = "norm"
	RoleOther  Role = "other"
)

// Roles are the roles an Arch has parameters in, in the order they are
// reported.
var Roles = []Role{RoleEmbed, RoleLMHead, RoleQ, RoleK, RoleV, RoleO, RoleGate, RoleUp, RoleDown, RoleNorm}

// RoleOf names the role of a tensor by its Hugging Face name, the weight
// and everything a quantization stores beside it (weight_packed,
// weight_scale, weight_zero_point, weight_shape, global scales).
func RoleOf(name string) Role {
	parts := strings.Split(name, ".")
	if slices.ContainsFunc(parts, func(p string) bool { return strings.HasPrefix(p, "lora") || p == "adapter" }) {
		return RoleOther
	}
	for _, p := range parts {
		switch r := Role(p); r {
		case RoleEmbed, RoleLMHead, RoleQ, RoleK, RoleV, RoleO, RoleGate, RoleUp, RoleDown:
			return r
		}
		if strings.HasSuffix(p, "norm") || strings.HasSuffix(p, "layernorm") {
			return RoleNorm
		}
	}
	return RoleOther
}

// Arch is the shape of a decoder-only transformer, in a Hugging Face
// config.json's terms.
type Arch struct {
	Hidden       int  `json:"hidden_size"`
	Layers       int  `json:"num_hidden_layers"`
	Heads        int  `json:"num_attention_heads"`
	KVHeads      int  `json:"num_key_value_heads"`
	HeadDim      int  `json:"head_dim"`
	Intermediate int  `json:"intermediate_size"`
	Vocab        int  `json:"vocab_size"`
	Tied         bool `json:"tie_word_embeddings"`
	MaxPos       int  `json:"max_position_embeddings"`
	// KVLoraRank and QKRopeHeadDim are an MLA model's latent KV shapes
	// (zero for multi-head attention).
	KVLoraRank    int `json:"kv_lora_rank"`
	QKRopeHeadDim int `json:"qk_rope_head_dim"`
}

// ParseArch decodes the shapes from a config.json, filling head_dim from
// hidden_size / num_attention_heads and num_key_value_heads from
// num_attention_heads when absent, and checks every shape is positive.
func ParseArch(data []byte) (Arch, error) {
	var a Arch
	if err := json.Unmarshal(data, &a); err != nil {
		return a, fmt.Errorf("config: %w", err)
	}
	return a.complete()
}

func (a Arch) complete() (Arch, error) {
	if a.KVHeads == 0 {
		a.KVHeads = a.Heads
	}
	if a.HeadDim == 0 && a.Heads > 0 {
		a.HeadDim = a.Hidden / a.Heads
	}
	if a.MaxPos == 0 {
		a.MaxPos = 32768
	}
	var missing []string
	for _, f := range []struct {
		key string
		v   int
	}{
		{"hidden_size", a.Hidden}, {"num_hidden_layers", a.Layers}, {"num_attention_heads", a.Heads},
		{"num_key_value_heads", a.KVHeads}, {"head_dim", a.HeadDim}, {"intermediate_size", a.Intermediate}, {"vocab_size", a.Vocab},
	} {
		if f.v <= 0 {
			missing = append(missing, f.key)
		}
	}
	if len(missing) > 0 {
		return a, fmt.Errorf("config: %s must be positive integers (a Hugging Face config.json of a Llama or Qwen decoder)", strings.Join(missing, ", "))
	}
	return a, nil
}

// ReadSourceArch reads --source-config: a path to the source model's
// config.json, or its shapes inline as comma-separated key=value pairs in
// config.json's names (hidden_size=4096,num_hidden_layers=36,...), which
// an engine command can carry to any runner.
func ReadSourceArch(v string) (Arch, error) {
	if !strings.Contains(v, "=") {
		data, err := os.ReadFile(v)
		if err != nil {
			return Arch{}, fmt.Errorf("source config: %w", err)
		}
		a, err := ParseArch(data)
		if err != nil {
			return a, fmt.Errorf("source %w", err)
		}
		return a, nil
	}
	m := map[string]any{}
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return Arch{}, fmt.Errorf("source config: %q is not key=value", kv)
		}
		switch {
		case val == "true" || val == "false":
			m[k] = val == "true"
		default:
			n, err := strconv.Atoi(val)
			if err != nil {
				return Arch{}, fmt.Errorf("source config: %s=%q is not an integer", k, val)
			}
			m[k] = n
		}
	}
	data, _ := json.Marshal(m)
	a, err := ParseArch(data)
	if err != nil {
		return a, fmt.Errorf("source %w", err)
	}
	return a, nil
}

// Params returns each role's logical parameter count: the projections'
// [out, in] matrices, the embeddings and lm_head [vocab, hidden] (lm_head
// none when tied), and per layer two hidden-wide norms and Qwen3's
// head_dim-wide q_norm and k_norm, plus the final norm.
func (a Arch) Params() map[Role]float64 {
	h, l := float64(a.Hidden), float64(a.Layers)
	q, kv := float64(a.Heads*a.HeadDim), float64(a.KVHeads*a.HeadDim)
	inter := float64(a.Intermediate)
	p := map[Role]float64{
		RoleEmbed: float64(a.Vocab) * h,
		RoleQ:     l * q * h, RoleK: l * kv * h, RoleV: l * kv * h, RoleO: l * h * q,
		RoleGate: l * inter * h, RoleUp: l * inter * h, RoleDown: l * h * inter,
		RoleNorm: l*(2*h+2*float64(a.HeadDim)) + h,
	}
	if !a.Tied {
		p[RoleLMHead] = float64(a.Vocab) * h
	}
	return p
}

// RoleBytes sums a checkpoint's tensor bytes by role.
func RoleBytes(c *safetensors.Checkpoint) map[Role]float64 {
	out := map[Role]float64{}
	for _, t := range c.Tensors() {
		out[RoleOf(t.Name)] += float64(t.Bytes())
	}
	return out
}

// FullSize is a full-size model's weights as the submitted checkpoint
// stores them.
type FullSize struct {
	Weights Weights
	// BytesPerParam is each role's measured average, scales and zero
	// points included.
	BytesPerParam map[Role]float64
	// RoleBytes is each role's bytes at full size.
	RoleBytes map[Role]float64
}

// FullSizeWeights computes the full-size model's weight bytes: for each
// role, its full-size parameters (Arch.Params of full) times the bytes per
// parameter the checkpoint stores that role in, measured as the role's
// tensor bytes over its parameters at the checkpoint's own shapes (tiny).
// A tied checkpoint stores lm_head in the embeddings: an untied full-size
// lm_head then takes the embeddings' bytes per parameter. Bytes matching no
// role (RoleOther) scale with the total parameter count. Params, what
// compute is charged for, leaves out the embeddings (a gather, not a
// matmul).
func FullSizeWeights(c *safetensors.Checkpoint, tiny, full Arch) (FullSize, error) {
	bytes, tp, fp := RoleBytes(c), tiny.Params(), full.Params()
	fs := FullSize{BytesPerParam: map[Role]float64{}, RoleBytes: map[Role]float64{}}
	var tinyTotal, fullTotal float64
	for _, r := range Roles {
		tinyTotal += tp[r]
		fullTotal += fp[r]
	}
	for _, r := range Roles {
		if fp[r] == 0 {
			continue
		}
		src := r
		if r == RoleLMHead && tp[RoleLMHead] == 0 {
			src = RoleEmbed
		}
		if tp[src] == 0 || bytes[src] == 0 {
			return fs, fmt.Errorf("the checkpoint has no %s tensors to measure its bytes per parameter by", src)
		}
		bpp := bytes[src] / tp[src]
		fs.BytesPerParam[r] = bpp
		fs.RoleBytes[r] = bpp * fp[r]
		fs.Weights.Bytes += fs.RoleBytes[r]
		if r != RoleEmbed {
			fs.Weights.Params += fp[r]
		}
	}
	if o := bytes[RoleOther]; o > 0 {
		fs.RoleBytes[RoleOther] = o * fullTotal / tinyTotal
		fs.Weights.Bytes += fs.RoleBytes[RoleOther]
	}
	return fs, nil
}

// FullSizeOf reads the checkpoint's own shapes from its config.json and
// returns the full-size model's weights as it stores them.
func FullSizeOf(dir string, m LoadedModel, full Arch) (FullSize, error) {
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return FullSize{}, fmt.Errorf("config.json: %w", err)
	}
	tiny, err := ParseArch(data)
	if err != nil {
		return FullSize{}, fmt.Errorf("checkpoint %w", err)
	}
	return FullSizeWeights(m.Checkpoint, tiny, full)
}
