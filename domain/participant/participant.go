// Package participant is who may use the arena and what each may do:
// participants and operators, their API tokens (an id the gateway finds
// the token by and a secret of which only an argon2id hash is stored),
// the quotas a participant's submissions count against, and which records
// a viewer may read. There is no NATS in it: the gateway keeps
// participants, tokens and usage in KV buckets it alone writes.
package participant

import (
	"regexp"
	"time"
)

// Kind says what a name is: a participant (untrusted: submits, reads its
// own dev results and everything public) or an operator (trusted: reads
// everything, submits over NATS).
type Kind string

// Kinds of principal.
const (
	KindParticipant Kind = "participant"
	KindOperator    Kind = "operator"
)

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool { return k == KindParticipant || k == KindOperator }

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// ValidName reports whether name can name a participant or an operator:
// 1 to 64 lower-case letters, digits, '-' or '_', starting with a letter
// or a digit. Names are compared exactly (submission.json's participant
// must be the token's name), so upper case is refused rather than folded.
func ValidName(name string) bool { return nameRE.MatchString(name) }

// NameRule is ValidName's rule in words, for refusals.
const NameRule = "1 to 64 lower-case letters, digits, '-' or '_', starting with a letter or a digit"

// Participant is a participant or an operator as the arena keeps it.
type Participant struct {
	Name      string    `json:"name"`
	Kind      Kind      `json:"kind"`
	CreatedAt time.Time `json:"created_at"`
	// Limits overrides the arena's default quotas for this participant;
	// a zero field keeps the default. Operators have no quota.
	Limits Limits `json:"limits"`
}

// Token is an API token as the arena keeps it: never the secret, only its
// hash.
type Token struct {
	// ID is the token's public part, the key it is found by.
	ID   string `json:"id"`
	Kind Kind   `json:"kind"`
	// Name is the participant or operator the token acts as.
	Name string `json:"name"`
	// Hash is the argon2id hash of the secret, in PHC form (see
	// HashSecret).
	Hash      string     `json:"hash"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// Revoked reports whether the token has been revoked.
func (t Token) Revoked() bool { return t.RevokedAt != nil }

// Viewer is who reads: the public (the zero Viewer: no token), a
// participant, or an operator.
type Viewer struct {
	Kind Kind   `json:"kind,omitempty"`
	Name string `json:"name,omitempty"`
}

// Public is the viewer without a token.
var Public = Viewer{}

// Operator reports whether v is an operator.
func (v Viewer) Operator() bool { return v.Kind == KindOperator }

// SplitRanked is the split whose results are public. Every other split
// (dev, or anything a record might carry) is private to its participant:
// the rule fails closed.
const SplitRanked = "ranked"

// CanRead reports whether v may read a record of owner's on split:
// operators read everything, everyone reads ranked records, and a
// participant reads its own records of any split.
func (v Viewer) CanRead(owner, split string) bool {
	switch {
	case v.Kind == KindOperator:
		return true
	case split == SplitRanked:
		return true
	case v.Kind == KindParticipant && v.Name != "" && v.Name == owner:
		return true
	}
	return false
}
