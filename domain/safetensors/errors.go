package safetensors

import (
	"errors"
	"fmt"
)

// Code is a stable reason code of a refused checkpoint file. Codes are data:
// events, records and clients match on them, so a code is never renamed.
type Code string

// The reason codes of this package, with the sentence a participant can act
// on in Describe.
const (
	// CodeHeaderTruncated: the file is shorter than its 8-byte length
	// prefix, or than the header length it declares.
	CodeHeaderTruncated Code = "header_truncated"
	// CodeHeaderTooLarge: the declared header length exceeds MaxHeaderSize.
	CodeHeaderTooLarge Code = "header_too_large"
	// CodeHeaderInvalidJSON: the header is not one UTF-8 JSON object.
	CodeHeaderInvalidJSON Code = "header_invalid_json"
	// CodeMetadataInvalid: __metadata__ is not an object of strings.
	CodeMetadataInvalid Code = "metadata_invalid"
	// CodeTensorInvalid: a tensor entry lacks dtype, shape or data_offsets,
	// carries another key, or holds a value of the wrong type.
	CodeTensorInvalid Code = "tensor_invalid"
	// CodeTensorDuplicate: a tensor name occurs twice, in one header or
	// across the shards of one checkpoint.
	CodeTensorDuplicate Code = "tensor_duplicate"
	// CodeDTypeUnknown: a tensor's dtype is not one safetensors defines.
	CodeDTypeUnknown Code = "dtype_unknown"
	// CodeTensorSizeMismatch: shape × dtype width differs from the span of
	// the tensor's data_offsets.
	CodeTensorSizeMismatch Code = "tensor_size_mismatch"
	// CodeTensorOffsetsOutOfRange: data_offsets are reversed, or run past
	// the end of the data section.
	CodeTensorOffsetsOutOfRange Code = "tensor_offsets_out_of_range"
	// CodeTensorOffsetsOverlap: two tensors share bytes of the data section.
	CodeTensorOffsetsOverlap Code = "tensor_offsets_overlap"
	// CodeFileTruncated: the tensors lie end to end, as a writer lays them
	// out, but the file ends before the last one.
	CodeFileTruncated Code = "file_truncated"
	// CodeIndexInvalid: model.safetensors.index.json is not a valid index.
	CodeIndexInvalid Code = "index_invalid"
	// CodeIndexShardInvalidName: a shard named by the index is not a plain
	// file name in the checkpoint folder (a path, or not *.safetensors).
	CodeIndexShardInvalidName Code = "index_shard_invalid_name"
	// CodeIndexShardMissing: a shard named by the index is not in the
	// checkpoint folder.
	CodeIndexShardMissing Code = "index_shard_missing"
	// CodeIndexTensorMisplaced: a tensor the index names is not in the shard
	// the index says.
	CodeIndexTensorMisplaced Code = "index_tensor_misplaced"
	// CodeIndexTensorUnlisted: a shard holds a tensor the index does not
	// name.
	CodeIndexTensorUnlisted Code = "index_tensor_unlisted"
	// CodeNoSafetensors: the checkpoint folder holds no *.safetensors file.
	CodeNoSafetensors Code = "no_safetensors"
	// CodeIO: the file could not be read (not the participant's fault as
	// such; a retry may help).
	CodeIO Code = "io_error"
)

var descriptions = map[Code]string{
	CodeHeaderTruncated:         "The safetensors file ends before its header does; upload the complete file.",
	CodeHeaderTooLarge:          "The safetensors header is longer than 100 MiB; write the file with a standard safetensors writer.",
	CodeHeaderInvalidJSON:       "The safetensors header is not a valid UTF-8 JSON object; write the file with a standard safetensors writer.",
	CodeMetadataInvalid:         "The safetensors __metadata__ entry must map names to strings.",
	CodeTensorInvalid:           "A safetensors tensor entry must hold exactly dtype, shape and data_offsets, with non-negative integers.",
	CodeTensorDuplicate:         "A tensor name occurs more than once; each tensor must be stored once.",
	CodeDTypeUnknown:            "A tensor has a dtype that safetensors does not define.",
	CodeTensorSizeMismatch:      "A tensor's shape and dtype do not add up to the bytes its data_offsets span.",
	CodeTensorOffsetsOutOfRange: "A tensor's data_offsets are reversed or run past the end of the file.",
	CodeTensorOffsetsOverlap:    "Two tensors share bytes of the file; each byte may belong to one tensor.",
	CodeFileTruncated:           "The safetensors file ends before its last tensor does; upload the complete file.",
	CodeIndexInvalid:            "model.safetensors.index.json must be a JSON object with a weight_map of tensor names to shard file names.",
	CodeIndexShardInvalidName:   "Every shard in model.safetensors.index.json must be a plain *.safetensors file name in the checkpoint folder.",
	CodeIndexShardMissing:       "A shard named in model.safetensors.index.json is missing from the checkpoint; upload every shard.",
	CodeIndexTensorMisplaced:    "A tensor is not in the shard model.safetensors.index.json names for it; regenerate the index.",
	CodeIndexTensorUnlisted:     "A shard holds a tensor that model.safetensors.index.json does not list; regenerate the index.",
	CodeNoSafetensors:           "The checkpoint holds no .safetensors file.",
	CodeIO:                      "The checkpoint file could not be read.",
}

// Codes returns every reason code of this package.
func Codes() []Code {
	out := make([]Code, 0, len(descriptions))
	for c := range descriptions {
		out = append(out, c)
	}
	return out
}

// Describe returns the sentence a participant can act on for the code, or
// the empty string for a code this package does not define.
func (c Code) Describe() string { return descriptions[c] }

// Error is a refused checkpoint file: a stable Code, the file and tensor it
// concerns where known, and a detail sentence.
type Error struct {
	Code   Code
	File   string
	Tensor string
	Detail string
	Err    error
}

// Error formats the code, the place and the detail.
func (e *Error) Error() string {
	msg := string(e.Code)
	if e.File != "" {
		msg += ": " + e.File
	}
	if e.Tensor != "" {
		msg += fmt.Sprintf(": tensor %q", e.Tensor)
	}
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the underlying error, if any.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error with the same code, so that
// errors.Is(err, &Error{Code: CodeTensorDuplicate}) matches any duplicate.
func (e *Error) Is(target error) bool {
	var t *Error
	if !errors.As(target, &t) {
		return false
	}
	return t.Code == e.Code
}

// CodeOf returns the code of the first *Error in err's chain, or the empty
// code when there is none.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func newErr(code Code, tensor, format string, args ...any) *Error {
	return &Error{Code: code, Tensor: tensor, Detail: fmt.Sprintf(format, args...)}
}
