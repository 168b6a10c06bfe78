// Package enginepatch checks a participant's engine patch against the
// engine source a campaign pins (campaign.EngineSource), and applies it.
//
// A patch is a unified diff, as `git diff` or `diff -ruN` write it, with
// the a/ b/ prefixes or without. It is read strictly and applied exactly:
// every hunk's context and removed lines must be the source's lines at
// the line the hunk names: no fuzz, no offset, no whitespace leniency
// (a CRLF file takes a CRLF patch). New, deleted, renamed and copied
// files are supported within the allowed paths.
//
// A refused patch is an *Error with a stable code (reason.Patch*) and a
// sentence naming the file and hunk. The refusals, checked in this
// order, are:
//   - reason.PatchUnknownSource: the campaign pins no engine source;
//   - reason.PatchTooLarge: more bytes than EngineSource.MaxPatchBytes;
//   - reason.PatchMalformed: empty, or not a unified diff;
//   - reason.PatchBinary: a GIT binary patch, a "Binary files ... differ"
//     line, or content with NUL bytes;
//   - reason.PatchPathForbidden: a path escaping the tree (.., absolute,
//     through or onto a symbolic link), or outside EngineSource.Allow;
//   - reason.PatchBuildScript: a build script (BuildScript), unless
//     EngineSource.AllowBuildScripts;
//   - reason.PatchDoesNotApply: a hunk that does not match the source.
//
// Identity: the patched tree's digest (TreeDigest's, over sorted paths
// and file contents) is the engine's identity before it is built: the
// same source and the same patch always give the same digest, whatever
// folder the source is in and whatever modes its files have.
package enginepatch

import (
	"errors"
	"fmt"

	"github.com/lowbarena/lowbarena/events/reason"
)

// DefaultMaxPatchBytes bounds a patch when the campaign's
// EngineSource.MaxPatchBytes is not set.
const DefaultMaxPatchBytes = 1 << 20

// Error is a refused patch: a stable code and a sentence the participant
// can act on.
type Error struct {
	Code    reason.Code
	Message string
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// AsError returns the *Error in err's chain, or nil.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// Codes returns every code a patch is refused with.
func Codes() []reason.Code {
	return []reason.Code{
		reason.PatchUnknownSource, reason.PatchTooLarge, reason.PatchMalformed, reason.PatchBinary,
		reason.PatchPathForbidden, reason.PatchBuildScript, reason.PatchDoesNotApply,
	}
}

func refuse(code reason.Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Summary describes a patch that applies.
type Summary struct {
	// SHA256 is the patch's own digest (its bytes).
	SHA256 string `json:"sha256"`
	// Files are the paths (relative to the source tree) the patch
	// touches, sorted: both names of a rename or copy.
	Files []string `json:"files"`
	// LinesAdded and LinesRemoved count the hunks' + and - lines.
	LinesAdded   int `json:"lines_added"`
	LinesRemoved int `json:"lines_removed"`
	// SourceDigest is the pinned source tree's digest (TreeDigest).
	SourceDigest string `json:"source_digest"`
	// EngineDigest is the patched tree's digest (TreeDigest of the tree
	// Apply writes): the engine's identity before it is built.
	EngineDigest string `json:"engine_digest"`
}
