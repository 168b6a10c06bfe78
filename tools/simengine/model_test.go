package main

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var testConfig = ModelConfig{Layers: 32, KVHeads: 8, HeadDim: 128, MaxPos: 32768}

func TestKVBytesPerElement(t *testing.T) {
	for _, tc := range []struct {
		dtype string
		want  float64
		name  string
	}{
		{"auto", 2, "bf16"}, {"bf16", 2, "bf16"}, {"fp16", 2, "fp16"},
		{"fp8", 1, "fp8"}, {"fp8_e4m3", 1, "fp8_e4m3"}, {"nvfp4", 0.5625, "nvfp4"},
	} {
		t.Run(tc.dtype, func(t *testing.T) {
			got, name, err := KVBytesPerElement(tc.dtype)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.name, name)
		})
	}
	_, _, err := KVBytesPerElement("int3")
	require.Error(t, err)
}

func TestKVBytesPerToken(t *testing.T) {
	for _, tc := range []struct {
		dtype string
		scale float64
		want  float64
	}{
		{"auto", 1, 2 * 32 * 8 * 128 * 2},
		{"fp8", 1, 2 * 32 * 8 * 128},
		{"nvfp4", 1, 2 * 32 * 8 * 128 * 0.5625},
		{"bf16", 3, 3 * 2 * 32 * 8 * 128 * 2},
	} {
		p, err := NewPlan(PlanInput{GPU: GPUs["h200"], Config: testConfig, Weights: Weights{Bytes: 16e9, Params: 8e9}, KVDType: tc.dtype, Scale: tc.scale})
		require.NoError(t, err, tc.dtype)
		require.Equal(t, tc.want, p.KVBytesPerToken, tc.dtype)
		require.InDelta(t, 141*GiB-tc.scale*16e9-1.5*GiB, p.KVPoolBytes, 1, tc.dtype)
	}
}

func TestStepTimeByWeightBits(t *testing.T) {
	const params = 8e9
	step := func(bits float64) time.Duration {
		p, err := NewPlan(PlanInput{GPU: GPUs["h200"], Config: testConfig, Weights: Weights{Bytes: params * bits / 8, Params: params}, StepOverhead: time.Millisecond / 2})
		require.NoError(t, err)
		return p.StepTime(16, 16*1024, 0)
	}
	s4, s8, s16 := step(4), step(8), step(16)
	require.Less(t, s4, s8)
	require.Less(t, s8, s16)
	// 16-bit 8B at batch 16 is memory bound: (16 GB weights + 16Ki tokens
	// of 128 KiB KV) / 4.8 TB/s + 0.5 ms overhead.
	require.InDelta(t, (16e9+16*1024*131072)/4.8e12+0.5e-3, s16.Seconds(), 1e-6)
}

func TestStepTimeComputeBoundAndPrefill(t *testing.T) {
	p, err := NewPlan(PlanInput{GPU: GPUs["h200"], Config: testConfig, Weights: Weights{Bytes: 16e9, Params: 8e9}})
	require.NoError(t, err)
	// Large batches become compute bound: 2*8e9*4096/989e12 ≈ 66 ms.
	require.InDelta(t, 2*8e9*4096/989e12, p.StepTime(4096, 0, 0).Seconds(), 1e-3)
	require.Greater(t, p.StepTime(1, 100, 2000), p.StepTime(1, 100, 0))
}

func TestPlanOOM(t *testing.T) {
	for _, tc := range []struct {
		name   string
		capGiB float64
		oom    bool
	}{
		{"weights do not fit", 10, true},
		{"no room for one sequence", 16e9/GiB + 1.5 + 0.1, true},
		{"fits", 20, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewPlan(PlanInput{GPU: GPUs["h100"], CapBytes: tc.capGiB * GiB, Config: testConfig, Weights: Weights{Bytes: 16e9, Params: 8e9}})
			if !tc.oom {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrOOM)
			var oom *OOMError
			require.True(t, errors.As(err, &oom))
			require.Contains(t, err.Error(), "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate")
		})
	}
}

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`{"num_hidden_layers":2,"num_attention_heads":4,"hidden_size":64,"max_position_embeddings":4096}`))
	require.NoError(t, err)
	require.Equal(t, ModelConfig{Layers: 2, KVHeads: 4, Heads: 4, HeadDim: 16, Hidden: 64, MaxPos: 4096}, c)
	_, err = ParseConfig([]byte(`{}`))
	require.Error(t, err)
	_, err = ParseConfig([]byte(`{`))
	require.Error(t, err)
}

func TestParseFault(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Fault
		bad  bool
	}{
		{"none", Fault{Kind: "none"}, false},
		{"", Fault{Kind: "none"}, false},
		{"lie-tokens", Fault{Kind: "lie-tokens"}, false},
		{"die-after-tokens=5", Fault{Kind: "die-after-tokens", N: 5}, false},
		{"hang-after-tokens=0", Fault{Kind: "hang-after-tokens"}, false},
		{"hang-after-tokens", Fault{}, true},
		{"zero-tokens=3", Fault{}, true},
		{"melt", Fault{}, true},
	} {
		got, err := ParseFault(tc.in)
		if tc.bad {
			require.Error(t, err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got)
	}
}
