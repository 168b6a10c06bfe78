package analyze

import (
	"errors"
	"fmt"
)

// Code is a stable reason code of an input the analysis cannot use. Like
// violation codes, codes are data and are never renamed.
type Code string

// The reason codes of Analyze.
const (
	// CodeConfigInvalid: config.json is not a JSON object or is too large.
	CodeConfigInvalid Code = "config_invalid"
	// CodeSourceInvalid: the campaign's source model (its config or tensor
	// index) is missing or invalid; this is the campaign's fault, not the
	// participant's.
	CodeSourceInvalid Code = "source_invalid"
	// CodeLabelInvalid: the declared precision is not W{w}A{a}KV{kv}.
	CodeLabelInvalid Code = "label_invalid"
	// CodeKVDTypeUnknown: the engine's KV cache dtype is not one the
	// contract knows the width of.
	CodeKVDTypeUnknown Code = "kv_dtype_unknown"
	// CodeCheckpointMissing: no safetensors headers were given.
	CodeCheckpointMissing Code = "checkpoint_missing"
)

// Error is an input Analyze refuses, with a stable Code.
type Error struct {
	Code   Code
	Detail string
	Err    error
}

// Error formats the code and the detail.
func (e *Error) Error() string {
	msg := string(e.Code) + ": " + e.Detail
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the underlying error, if any.
func (e *Error) Unwrap() error { return e.Err }

// CodeOf returns the code of the first *Error in err's chain, or "".
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func fail(code Code, err error, format string, args ...any) *Error {
	return &Error{Code: code, Detail: fmt.Sprintf(format, args...), Err: err}
}

// Violation codes: each broken contract rule of a record.Contract.
const (
	// ViolationRopeChanged: the checkpoint's rope_theta, rope_type or rope
	// scaling differ from the source model's.
	ViolationRopeChanged = "rope_changed"
	// ViolationForeignTensors: tensors that are neither in the source model
	// nor allowed quantization companions hold more than the policy's share
	// of the tensor bytes.
	ViolationForeignTensors = "foreign_tensors"
	// ViolationPackingMismatch: a decoder linear's quantized tensor packs
	// another width than its quantization config gives it (a GPTQ qweight
	// of 8-bit rows under "bits": 4): the config does not say what the
	// checkpoint is.
	ViolationPackingMismatch = "packing_mismatch"
	// ViolationPrecisionWider: the detected precision is wider than the
	// declared one on W, A or KV.
	ViolationPrecisionWider = "precision_wider_than_declared"
	// ViolationSparseWeights: the checkpoint is sparse and the campaign does
	// not allow it.
	ViolationSparseWeights = "sparse_weights"
	// ViolationShapeMismatch: a source tensor is missing, or stored with a
	// shape that is not the source's (packing accounted for).
	ViolationShapeMismatch = "shape_mismatch"
	// ViolationUnaccountedBytes: the data section of a safetensors file
	// holds bytes that belong to no tensor (a standard writer leaves none),
	// where a payload could hide from every other check.
	ViolationUnaccountedBytes = "unaccounted_bytes"
)
