package examples

import "math"

// Number formats the example checkpoints store: bfloat16, FP8 E4M3 (the
// "fn" variant: no infinities, one NaN pattern per sign) and FP4 E2M1.
// Every encoder rounds to the nearest representable value, ties to the
// value whose last mantissa bit is 0 (round half to even).

// fp8Max is the largest finite FP8 E4M3 value.
const fp8Max = 448.0

// fp4Max is the largest FP4 E2M1 value.
const fp4Max = 6.0

// fp4Values are the magnitudes of the eight FP4 E2M1 codes 0-7.
var fp4Values = [8]float64{0, 0.5, 1, 1.5, 2, 3, 4, 6}

// bf16FromFloat32 returns the bfloat16 bits nearest to f, ties to even. A
// NaN becomes a quiet NaN of the same sign; infinities stay infinite.
func bf16FromFloat32(f float32) uint16 {
	b := math.Float32bits(f)
	if f != f {
		return uint16(b>>16) | 0x0040
	}
	b += 0x7FFF + (b>>16)&1
	return uint16(b >> 16)
}

// bf16ToFloat32 returns the value of bfloat16 bits.
func bf16ToFloat32(h uint16) float32 {
	return math.Float32frombits(uint32(h) << 16)
}

// fp8FromFloat returns the FP8 E4M3 (fn) code nearest to x, ties to
// even. Magnitudes beyond 448, infinities included, saturate to ±448; NaN
// becomes 0x7F (or 0xFF when its sign bit is set).
func fp8FromFloat(x float64) uint8 {
	var sign uint8
	if math.Signbit(x) {
		sign = 0x80
	}
	a := math.Abs(x)
	switch {
	case math.IsNaN(x):
		return sign | 0x7F
	case a >= fp8Max:
		return sign | 0x7E
	case a < 0x1p-6:
		// Subnormals (and zero): steps of 2^-9. A round up to 8 steps is
		// the smallest normal, code 0x08, so the step count is the code.
		return sign | uint8(math.RoundToEven(a*0x1p9))
	}
	frac, exp := math.Frexp(a) // a = frac × 2^exp, frac in [0.5, 1)
	e := exp - 1               // a = (2 frac) × 2^e, 2 frac in [1, 2)
	m := int(math.RoundToEven((2*frac - 1) * 8))
	if m == 8 {
		m, e = 0, e+1
	}
	code := uint8(e+7)<<3 | uint8(m)
	if e+7 > 15 || code == 0x7F {
		code = 0x7E
	}
	return sign | code
}

// fp8ToFloat returns the value of an FP8 E4M3 (fn) code; 0x7F and 0xFF
// are NaN.
func fp8ToFloat(c uint8) float64 {
	e, m := int(c>>3&0xF), float64(c&7)
	var v float64
	switch {
	case e == 15 && m == 7:
		return math.NaN()
	case e == 0:
		v = m * 0x1p-9
	default:
		v = math.Ldexp(1+m/8, e-7)
	}
	if c&0x80 != 0 {
		v = -v
	}
	return v
}

// fp4FromFloat returns the FP4 E2M1 code (a nibble: sign bit 3,
// magnitude code 0-7) nearest to x, ties to the even code. Magnitudes
// beyond 6 saturate; NaN encodes as 0.
func fp4FromFloat(x float64) uint8 {
	if math.IsNaN(x) {
		return 0
	}
	var sign uint8
	if math.Signbit(x) {
		sign = 0x8
	}
	a := math.Abs(x)
	code := uint8(7)
	for i := 0; i < 7; i++ {
		mid := (fp4Values[i] + fp4Values[i+1]) / 2
		if a < mid || (a == mid && i%2 == 0) {
			code = uint8(i)
			break
		}
	}
	return sign | code
}

// fp4ToFloat returns the value of an FP4 E2M1 nibble (its low four
// bits).
func fp4ToFloat(c uint8) float64 {
	v := fp4Values[c&7]
	if c&0x8 != 0 {
		v = -v
	}
	return v
}
