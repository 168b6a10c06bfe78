package safetensors

import (
	"errors"
	"fmt"
	"slices"

	"github.com/lowbarena/lowbarena/events/reason"
)

// Code is a reason code of the arena's catalogue (package reason): the
// codes of a refused checkpoint file are those Codes lists. Codes are data:
// events, records and clients match on them, so a code is never renamed.
type Code = reason.Code

// codes are this package's codes. The sentence a participant can act on
// for each is its description in the catalogue (see Describe).
var codes = []Code{
	reason.HeaderTruncated,
	reason.HeaderTooLarge,
	reason.HeaderInvalidJSON,
	reason.MetadataInvalid,
	reason.TensorInvalid,
	reason.TensorDuplicate,
	reason.DTypeUnknown,
	reason.TensorSizeMismatch,
	reason.TensorOffsetsOutOfRange,
	reason.TensorOffsetsOverlap,
	reason.FileTruncated,
	reason.IndexInvalid,
	reason.IndexShardInvalidName,
	reason.IndexShardMissing,
	reason.IndexTensorMisplaced,
	reason.IndexTensorUnlisted,
	reason.NoSafetensors,
	reason.IOError,
}

// Codes returns every reason code of this package.
func Codes() []Code { return slices.Clone(codes) }

// Describe returns the sentence a participant can act on for the code, or
// the empty string for a code this package does not give.
func Describe(c Code) string {
	if !slices.Contains(codes, c) {
		return ""
	}
	info, _ := reason.Describe(c)
	return info.Description
}

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
// errors.Is(err, &Error{Code: reason.TensorDuplicate}) matches any duplicate.
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
