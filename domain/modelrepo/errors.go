package modelrepo

import (
	"errors"
	"fmt"
	"time"

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
		reason.ReferenceUnavailable, reason.ReferenceGated, reason.ReferenceTokenRefused,
		reason.ReferenceRateLimited,
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
	// RetryAfter is, for reason.ReferenceRateLimited, how long the host
	// asked to wait before the next request (its Retry-After or
	// RateLimit header): longer than the client waits in place, so the
	// caller waits it out (a stage retries its input with this delay).
	RetryAfter time.Duration
}

// Error formats the code and the sentence.
func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Transient reports whether trying again later may help: a timeout, an
// unavailable or rate-limited repository, not a refusal of what was
// declared.
func (e *Error) Transient() bool {
	return e.Code == reason.ReferenceTimeout || e.Code == reason.ReferenceUnavailable || e.Code == reason.ReferenceRateLimited
}

// Wait returns how long to wait before reading the repository again when
// err is a rate limit (reason.ReferenceRateLimited), and whether it is one.
func Wait(err error) (time.Duration, bool) {
	e := AsError(err)
	if e == nil || e.Code != reason.ReferenceRateLimited {
		return 0, false
	}
	return e.RetryAfter, true
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

// Refuse returns an *Error with code, the file it concerns and a
// formatted sentence.
func Refuse(code Code, file string, format string, args ...any) *Error {
	return &Error{Code: code, File: file, Message: fmt.Sprintf(format, args...)}
}
