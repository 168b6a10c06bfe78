package analyze

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/lowbarena/lowbarena/events/reason"
)

// Label is a precision label W{w}A{a}KV{kv}: weight, activation and KV cache
// bits.
type Label struct {
	W, A, KV int
}

var labelRE = regexp.MustCompile(`^W([0-9]{1,2})A([0-9]{1,2})KV([0-9]{1,2})$`)

// ParseLabel parses a label such as "W4A16KV8".
func ParseLabel(s string) (Label, error) {
	m := labelRE.FindStringSubmatch(s)
	if m == nil {
		return Label{}, fail(reason.LabelInvalid, nil, "%q is not of the form W{w}A{a}KV{kv}", s)
	}
	w, _ := strconv.Atoi(m[1])
	a, _ := strconv.Atoi(m[2])
	kv, _ := strconv.Atoi(m[3])
	return Label{W: w, A: a, KV: kv}, nil
}

// String formats the label as W{w}A{a}KV{kv}.
func (l Label) String() string { return fmt.Sprintf("W%dA%dKV%d", l.W, l.A, l.KV) }

// Wider lists the parts of l that are wider than declared, as "W (16 > 4)".
func (l Label) Wider(declared Label) []string {
	var out []string
	add := func(part string, got, want int) {
		if got > want {
			out = append(out, fmt.Sprintf("%s (%d > %d)", part, got, want))
		}
	}
	add("W", l.W, declared.W)
	add("A", l.A, declared.A)
	add("KV", l.KV, declared.KV)
	return out
}

// KVCacheBits returns the width in bits of an engine's KV cache dtype, as
// vLLM and SGLang spell it: fp8 (and fp8_e4m3, fp8_e5m2...) and int8 are 8,
// nvfp4, mxfp4, fp4 and int4 are 4, and auto, bf16, fp16 and their long
// names are 16 (auto keeps the model's dtype). The empty string means not
// known yet and returns ok false.
func KVCacheBits(dtype string) (bits int, ok bool, err error) {
	d := strings.ToLower(strings.TrimSpace(dtype))
	switch {
	case d == "":
		return 0, false, nil
	case strings.HasPrefix(d, "fp8") || d == "float8" || d == "int8":
		return 8, true, nil
	case d == "nvfp4" || d == "fp4" || d == "mxfp4" || d == "int4":
		return 4, true, nil
	case d == "auto" || d == "bf16" || d == "bfloat16" || d == "fp16" || d == "float16" || d == "half":
		return 16, true, nil
	case d == "fp32" || d == "float32" || d == "float":
		return 32, true, nil
	}
	return 0, false, fail(reason.KVDTypeUnknown, nil, "KV cache dtype %q", dtype)
}
