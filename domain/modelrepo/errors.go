package modelrepo

import (
	"errors"
	"fmt"

	"github.com/lowbarena/lowbarena/events/reason"
)

// Code is a stable reason code of a reference the arena could not read,
// one of the arena's catalogue (package reason). Codes are data:
// build.failed, contract.failed and runner.job.failed carry them, and
// records, dashboards and participants' scripts match on them, so a code
// is never renamed, only added.
type Code = reason.Code

// Codes returns every code of this package, for tests and documentation.
func Codes() []Code {
	return []Code{
		reason.ReferenceURLInvalid, reason.ReferenceURLCredentials, reason.ReferenceRevisionInvalid,
		reason.ReferenceHostNotAllowed, reason.ReferenceNotFound, reason.ReferenceUnauthorized,
		reason.ReferenceRangeIgnored, reason.ReferenceRedirectLoop, reason.ReferenceRedirectScheme,
		reason.ReferenceDigestMismatch, reason.ReferenceFileTooLarge, reason.ReferenceTimeout,
		reason.ReferenceUnavailable,
	}
}

// Error is a reference the arena could not read: a stable Code, the file
// of the repository it concerns (empty for the repository itself) and a
// sentence. Its text never holds a credential: URLs in it have no user
// information and no query, and request headers are never quoted.
type Error struct {
	Code Code
	// File is the path in the repository, or "".
	File string
	// Message is the sentence for people.
	Message string
	// Err is the cause, if any (a network error, never a header).
	Err error
}

// Error formats the code and the sentence.
func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Transient reports whether trying again later may help: a timeout or an
// unavailable repository, not a refusal of what was declared.
func (e *Error) Transient() bool {
	return e.Code == reason.ReferenceTimeout || e.Code == reason.ReferenceUnavailable
}

// AsError returns the *Error in err's chain, or nil.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// CodeOf returns the code of the *Error in err's chain, or "".
func CodeOf(err error) Code {
	if e := AsError(err); e != nil {
		return e.Code
	}
	return ""
}

func Refuse(code Code, file string, format string, args ...any) *Error {
	return &Error{Code: code, File: file, Message: fmt.Sprintf(format, args...)}
}
