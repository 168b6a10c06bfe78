package examples

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// fp8Finite returns the values of every finite FP8 E4M3 code.
func fp8Finite() map[uint8]float64 {
	out := map[uint8]float64{}
	for c := range 256 {
		if v := fp8ToFloat(uint8(c)); !math.IsNaN(v) {
			out[uint8(c)] = v
		}
	}
	return out
}

func TestFP8Table(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   float64
		want uint8
	}{
		{0, 0x00},
		{math.Copysign(0, -1), 0x80},
		{1, 0x38},
		{-1, 0xB8},
		{1.125, 0x39},
		{1.0625, 0x38}, // tie between 1 and 1.125: even mantissa
		{1.1875, 0x3A}, // tie between 1.125 and 1.25: even mantissa
		{2, 0x40},
		{0.5, 0x30},
		{448, 0x7E},
		{-448, 0xFE},
		{449, 0x7E},     // saturates
		{1e9, 0x7E},     // saturates
		{-1e9, 0xFE},    // saturates
		{432, 0x7E},     // tie between 416 and 448: 448 has the even mantissa (110)
		{420, 0x7D},     // nearer 416
		{240, 0x77},     // 1.875 × 2^7
		{0x1p-6, 0x08},  // smallest normal
		{0x1p-9, 0x01},  // smallest subnormal
		{0x1p-10, 0x00}, // tie between 0 and 2^-9: to 0
		{0x3p-10, 0x02}, // tie between 2^-9 and 2^-8: to the even code
		{7 * 0x1p-9, 0x07},
		{7.5 * 0x1p-9, 0x08}, // tie between the largest subnormal and the smallest normal
		{0.1, 0x1D},          // 0.1015625
		{math.Inf(1), 0x7E},
		{math.Inf(-1), 0xFE},
		{math.NaN(), 0x7F},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, fp8FromFloat(tt.in), "e4m3(%v)", tt.in)
	}
	require.True(t, math.IsNaN(fp8ToFloat(0x7F)))
	require.True(t, math.IsNaN(fp8ToFloat(0xFF)))
	require.Equal(t, 448.0, fp8ToFloat(0x7E))
	require.Equal(t, 0x1p-9, fp8ToFloat(0x01))
	require.Equal(t, -0.1015625, fp8ToFloat(0x9D))
}

// TestFP8RoundTrip checks every finite code decodes and encodes back, and
// that the encoder picks the nearest value (ties to the even code) against
// a brute-force search over a sweep of inputs.
func TestFP8RoundTrip(t *testing.T) {
	t.Parallel()
	values := fp8Finite()
	require.Len(t, values, 254)
	for c, v := range values {
		require.Equal(t, c, fp8FromFloat(v), "code %#x (%v)", c, v)
	}
	nearest := func(x float64) uint8 {
		best, bestErr := uint8(0), math.Inf(1)
		for c := range 256 {
			v, ok := values[uint8(c)]
			if !ok || math.Signbit(v) != math.Signbit(x) {
				continue
			}
			e := math.Abs(v - x)
			if e < bestErr || (e == bestErr && c&1 == 0) {
				best, bestErr = uint8(c), e
			}
		}
		return best
	}
	for x := -460.0; x <= 460; x += 0.37 {
		if math.Abs(x) > 448 {
			continue
		}
		require.Equal(t, nearest(x), fp8FromFloat(x), "e4m3(%v)", x)
	}
	for x := -0.05; x <= 0.05; x += 0.0001 {
		got := fp8FromFloat(x)
		require.Equal(t, nearest(x), got, "e4m3(%v)", x)
		if math.Abs(x) < 0x1p-6 {
			require.LessOrEqual(t, math.Abs(fp8ToFloat(got)-x), 0x1p-10, "e4m3(%v): within half the subnormal step", x)
		}
	}
	for x := 0x1p-6; x < 448; x *= 1.01 {
		got := fp8ToFloat(fp8FromFloat(x))
		require.LessOrEqual(t, math.Abs(got-x), x*0x1p-4, "e4m3(%v) = %v: within half a step (2^-4 relative)", x, got)
	}
}

func TestFP4Table(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   float64
		want uint8
	}{
		{0, 0x0}, {0.5, 0x1}, {1, 0x2}, {1.5, 0x3}, {2, 0x4}, {3, 0x5}, {4, 0x6}, {6, 0x7},
		{-0.5, 0x9}, {-1, 0xA}, {-6, 0xF}, {math.Copysign(0, -1), 0x8},
		{0.25, 0x0}, {0.75, 0x2}, {1.25, 0x2}, {1.75, 0x4}, {2.5, 0x4}, {3.5, 0x6}, {5, 0x6}, // ties to even
		{0.26, 0x1}, {0.74, 0x1}, {2.49, 0x4}, {2.51, 0x5}, {5.01, 0x7},
		{7, 0x7}, {100, 0x7}, {-100, 0xF}, {math.Inf(1), 0x7}, // saturates
		{-0.1, 0x8},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, fp4FromFloat(tt.in), "e2m1(%v)", tt.in)
	}
	for c := range uint8(16) {
		require.Equal(t, c, fp4FromFloat(fp4ToFloat(c)), "code %#x", c)
	}
	for x := -6.0; x <= 6; x += 0.01 {
		got := fp4ToFloat(fp4FromFloat(x))
		step := 0.5
		switch a := math.Abs(x); {
		case a > 4:
			step = 2
		case a > 2:
			step = 1
		}
		require.LessOrEqual(t, math.Abs(got-x), step/2+1e-12, "e2m1(%v) = %v", x, got)
	}
}

func TestBF16(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   float32
		want uint16
	}{
		{0, 0x0000},
		{1, 0x3F80},
		{-2, 0xC000},
		{0.02, 0x3CA4}, // 0.0200195...
		{math.Float32frombits(0x3F808000), 0x3F80}, // tie: to even (down)
		{math.Float32frombits(0x3F818000), 0x3F82}, // tie: to even (up)
		{math.Float32frombits(0x3F808001), 0x3F81}, // above the tie
		{math.Float32frombits(0x7F7FFFFF), 0x7F80}, // rounds to infinity
		{float32(math.Inf(-1)), 0xFF80},
		{math.Float32frombits(0x00000001), 0x0000}, // tiny subnormal
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, bf16FromFloat32(tt.in), "bf16(%v)", tt.in)
	}
	require.True(t, math.IsNaN(float64(bf16ToFloat32(bf16FromFloat32(float32(math.NaN()))))))
	for x := float32(-3); x <= 3; x += 0.0013 {
		got := bf16ToFloat32(bf16FromFloat32(x))
		require.LessOrEqual(t, math.Abs(float64(got-x)), math.Abs(float64(x))*0x1p-8, "bf16(%v) = %v: within half a step", x, got)
	}
}
