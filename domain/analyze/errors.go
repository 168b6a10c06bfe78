package analyze

import (
	"errors"
	"fmt"

	"github.com/lowbarena/lowbarena/events/reason"
)

// Code is a stable reason code of an input the analysis cannot use, one of
// the arena's catalogue (package reason). Like violation codes, codes are
// data and are never renamed.
type Code = reason.Code

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
