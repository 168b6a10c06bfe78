package main

import (
	"crypto/sha256"
	binenc "encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/lowbarena/lowbarena/domain/safetensors"
	"github.com/lowbarena/lowbarena/domain/suite"
)

// The answer model: simengine answers the arena's generated eval items
// (suite.Solve knows their answers), right with a probability set by a
// damage model of what the checkpoint really stores, deterministically
// under the request's seed. It is a simulation of accuracy, not a model:
// every figure it feeds is marked simulated.
//
// BF16 answers item i right when u_i < Accuracy[domain], u_i uniform from
// a hash of the prompt and the sample seed (the same for every checkpoint,
// so a candidate's errors pair with BF16's). A damaged checkpoint turns a
// right answer wrong with probability Damage*Sensitivity[domain], and a
// wrong one right with a third of that; it leaves the format contract with
// probability 2*Damage, and its replies grow longer with the damage.

// Accuracy is BF16's accuracy per domain.
var Accuracy = map[string]float64{"math": 0.78, "long_context": 0.86, "knowledge": 0.62, "commonsense": 0.82, "expert": 0.45, "code": 0.72}

// Sensitivity scales the damage per domain (long reasoning and retrieval
// suffer most from low precision).
var Sensitivity = map[string]float64{"math": 1.4, "long_context": 1.2, "knowledge": 1.0, "commonsense": 0.6, "expert": 1.5, "code": 1.3}

// Damage is how far a checkpoint is from BF16: from the narrowest weight
// dtype its tensors really hold, and its KV cache dtype.
func Damage(c *safetensors.Checkpoint, kvDType string) float64 {
	d := 0.0
	for _, t := range c.Tensors() {
		switch t.DType {
		case safetensors.U8, safetensors.I8:
			d = math.Max(d, 0.06) // packed FP4 (NVFP4, MXFP4)
		case safetensors.I32, safetensors.U32:
			d = math.Max(d, 0.05) // packed INT4 (compressed-tensors)
		case safetensors.F8E4M3, safetensors.F8E5M2:
			d = math.Max(d, 0.006)
		}
	}
	switch strings.ToLower(kvDType) {
	case "fp8", "fp8_e4m3", "fp8_e5m2":
		d += 0.004
	case "nvfp4", "fp4":
		d += 0.03
	}
	return d
}

// uniform is a deterministic number in [0, 1) from the parts.
func uniform(parts ...string) float64 {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return float64(binenc.BigEndian.Uint64(h.Sum(nil))>>11) / (1 << 53)
}

// Reply is the simulated model's answer to a prompt, or ok false when the
// prompt is not one of the arena's eval items.
func Reply(prompt string, seed int64, damage float64) (string, bool) {
	sol, ok := suite.Solve(prompt)
	if !ok {
		return "", false
	}
	s := fmt.Sprint(seed)
	right := uniform("bf16", prompt, s) < Accuracy[sol.Domain]
	flip := uniform("damage", prompt, s)
	p := damage * Sensitivity[sol.Domain]
	if right && flip < p || !right && flip < p/3 {
		right = !right
	}
	reply := sol.Wrong[int(uniform("which", prompt, s)*float64(len(sol.Wrong)))]
	if right {
		reply = sol.Right
		if sol.Unformatted != "" && uniform("format", prompt, s) < 0.02+2*damage {
			reply = sol.Unformatted
		}
	}
	// Longer replies as the damage grows: a hedge sentence first.
	if uniform("length", prompt, s) < 0.1+4*damage && !strings.HasPrefix(reply, "```") {
		reply = "Let me work through this carefully. " + reply
	}
	return reply, true
}

// pieces splits text into tokens of about four bytes, as CountTokens
// counts them.
func pieces(text string) []string {
	var out []string
	for len(text) > 0 {
		n := min(4, len(text))
		out = append(out, text[:n])
		text = text[n:]
	}
	return out
}

// TopLogprobs is a deterministic top-k distribution for the token at
// position pos of a reply to prompt: the chosen token first, then k-1
// alternatives; damage shifts the mass between them.
func TopLogprobs(prompt string, pos int, token string, k int, damage float64) map[string]float64 {
	if k <= 0 {
		return nil
	}
	base := 1.5 + 3*uniform("conf", prompt, fmt.Sprint(pos))
	noise := damage * 8 * (uniform("kl", prompt, fmt.Sprint(pos)) - 0.5)
	logits := []float64{base + noise}
	names := []string{token}
	for j := 1; j < k; j++ {
		logits = append(logits, -float64(j)*0.7+damage*4*(uniform("alt", prompt, fmt.Sprint(pos, j))-0.5))
		names = append(names, fmt.Sprintf("alt%d", j))
	}
	// Softmax over the k plus a tail bucket of weight exp(-3).
	z := math.Exp(-3)
	for _, l := range logits {
		z += math.Exp(l)
	}
	out := make(map[string]float64, k)
	for j, l := range logits {
		out[names[j]] = l - math.Log(z)
	}
	return out
}
