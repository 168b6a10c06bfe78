package hub

import (
	"errors"
	"fmt"
)

// Code is a stable reason code of a reference the arena could not read.
// Codes are data: build.failed, contract.failed and runner.job.failed carry
// them, and records, dashboards and participants' scripts match on them, so
// a code is never renamed, only added.
type Code string

// The reason codes of this package. Build, contract and the runner pass
// them on unchanged; each Error carries a sentence the participant (or the
// operator, for the last two) can act on.
const (
	// CodeURLInvalid: the repository is not an http(s) URL with a host
	// and a path, or carries a query or a fragment.
	CodeURLInvalid Code = "reference_url_invalid"
	// CodeURLCredentials: the repository URL carries a user name or a
	// password. The credentials are never echoed.
	CodeURLCredentials Code = "reference_url_credentials"
	// CodeRevisionInvalid: the revision is empty or not a plain branch,
	// tag or commit name.
	CodeRevisionInvalid Code = "reference_revision_invalid"
	// CodeHostNotAllowed: the arena's operator does not let participants
	// name this host (or plain http for it).
	CodeHostNotAllowed Code = "reference_host_not_allowed"
	// CodeNotFound: the repository answered 404 or 410 for a file.
	CodeNotFound Code = "reference_not_found"
	// CodeUnauthorized: the repository answered 401 or 403 (a private or
	// gated repository the operator's token, if any, may not read).
	CodeUnauthorized Code = "reference_unauthorized"
	// CodeRangeIgnored: a Range request was answered with the whole file
	// (200) or with other bytes than asked; the answer is not read.
	CodeRangeIgnored Code = "reference_range_ignored"
	// CodeRedirectLoop: more redirects than the client follows.
	CodeRedirectLoop Code = "reference_redirect_loop"
	// CodeRedirectScheme: a redirect to another scheme than https (or
	// http from http), such as file: or a downgrade from https to http.
	CodeRedirectScheme Code = "reference_redirect_scheme"
	// CodeDigestMismatch: the file the repository serves is not the one
	// checkpoint.json declares: another size or sha256.
	CodeDigestMismatch Code = "reference_digest_mismatch"
	// CodeFileTooLarge: a file the arena fetches whole (config, index,
	// tokenizer) is over the limit for such files.
	CodeFileTooLarge Code = "reference_file_too_large"
	// CodeTimeout: the repository did not answer, or stopped sending,
	// within the client's deadlines.
	CodeTimeout Code = "reference_timeout"
	// CodeUnavailable: the repository could not be reached, or kept
	// answering with a server error.
	CodeUnavailable Code = "reference_unavailable"
)

// Codes returns every code of this package, for tests and documentation.
func Codes() []Code {
	return []Code{CodeURLInvalid, CodeURLCredentials, CodeRevisionInvalid, CodeHostNotAllowed, CodeNotFound, CodeUnauthorized,
		CodeRangeIgnored, CodeRedirectLoop, CodeRedirectScheme, CodeDigestMismatch, CodeFileTooLarge, CodeTimeout, CodeUnavailable}
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
func (e *Error) Transient() bool { return e.Code == CodeTimeout || e.Code == CodeUnavailable }

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

func refuse(code Code, file string, format string, args ...any) *Error {
	return &Error{Code: code, File: file, Message: fmt.Sprintf(format, args...)}
}
