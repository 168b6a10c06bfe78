package safetensors

// DType is a safetensors element type, spelled as in the header.
type DType string

// The element types safetensors defines (as of safetensors 0.6). Packed
// 4-bit weights of compressed-tensors or ModelOpt are stored in U8 or I32 and
// are read here as their storage dtype; F4 and F6_* are genuinely sub-byte.
const (
	BOOL   DType = "BOOL"
	F4     DType = "F4"
	F6E2M3 DType = "F6_E2M3"
	F6E3M2 DType = "F6_E3M2"
	U8     DType = "U8"
	I8     DType = "I8"
	F8E5M2 DType = "F8_E5M2"
	F8E4M3 DType = "F8_E4M3"
	F8E8M0 DType = "F8_E8M0"
	I16    DType = "I16"
	U16    DType = "U16"
	F16    DType = "F16"
	BF16   DType = "BF16"
	I32    DType = "I32"
	U32    DType = "U32"
	F32    DType = "F32"
	C64    DType = "C64"
	F64    DType = "F64"
	I64    DType = "I64"
	U64    DType = "U64"
)

var dtypeBits = map[DType]int64{
	BOOL: 8, F4: 4, F6E2M3: 6, F6E3M2: 6,
	U8: 8, I8: 8, F8E5M2: 8, F8E4M3: 8, F8E8M0: 8,
	I16: 16, U16: 16, F16: 16, BF16: 16,
	I32: 32, U32: 32, F32: 32,
	C64: 64, F64: 64, I64: 64, U64: 64,
}

// Bits returns the width of one element in bits, or 0 for a dtype
// safetensors does not define.
func (d DType) Bits() int64 { return dtypeBits[d] }

// Known reports whether safetensors defines the dtype.
func (d DType) Known() bool { return dtypeBits[d] != 0 }

// IsFloat reports whether the dtype is a floating-point type (including the
// FP8, FP6 and FP4 formats and the E8M0 scale format).
func (d DType) IsFloat() bool {
	switch d {
	case F4, F6E2M3, F6E3M2, F8E5M2, F8E4M3, F8E8M0, F16, BF16, F32, F64, C64:
		return true
	}
	return false
}
