package ctl

import (
	"time"

	"github.com/lowbarena/lowbarena/domain/participant"
)

// The gateway keeps the arena's participants and operators (bucket
// participants, which it alone writes) and answers the operator's CLI on
// these subjects. A token travels only in the reply to add and token,
// once; the gateway stores its argon2id hash.
const (
	ServiceGateway = "gateway"

	SubjectParticipantAdd    = "lowbarena.ctl.participant.add"
	SubjectParticipantToken  = "lowbarena.ctl.participant.token"
	SubjectParticipantList   = "lowbarena.ctl.participant.list"
	SubjectParticipantRevoke = "lowbarena.ctl.participant.revoke"
)

// AddParticipant is `arena participant add NAME` (or `arena operator add
// NAME`): a new name of Kind, with quota overrides (zero fields keep the
// arena's defaults).
type AddParticipant struct {
	Name   string             `json:"name"`
	Kind   participant.Kind   `json:"kind"`
	Limits participant.Limits `json:"limits,omitempty"`
}

// IssueToken is `arena participant token NAME`: a further token for a
// name that exists (to rotate: issue, switch, revoke the old one).
type IssueToken struct {
	Name string `json:"name"`
}

// NewToken answers AddParticipant and IssueToken: the token, shown once.
type NewToken struct {
	Name    string           `json:"name"`
	Kind    participant.Kind `json:"kind"`
	TokenID string           `json:"token_id"`
	Token   string           `json:"token"`
}

// ListParticipants is `arena participant list`.
type ListParticipants struct{}

// Participants answers ListParticipants, by name.
type Participants struct {
	Participants []ParticipantInfo `json:"participants"`
}

// ParticipantInfo is one participant or operator as the operator sees
// it: never a secret or a hash.
type ParticipantInfo struct {
	Name      string           `json:"name"`
	Kind      participant.Kind `json:"kind"`
	CreatedAt time.Time        `json:"created_at"`
	// Limits are the quotas in force (its overrides over the arena's
	// defaults); none for an operator.
	Limits *participant.Limits `json:"limits,omitempty"`
	Tokens []TokenInfo         `json:"tokens"`
	// Usage is what counts against its quotas now; nil for an operator.
	Usage *UsageInfo `json:"usage,omitempty"`
}

// TokenInfo is a token by its public id.
type TokenInfo struct {
	ID        string     `json:"id"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// UsageInfo is a participant's use of its quotas.
type UsageInfo struct {
	SubmissionsLastDay int     `json:"submissions_last_day"`
	GPUHoursLastWeek   float64 `json:"gpu_hours_last_week"`
	// Refused is the code and sentence with which its next submission
	// would be refused now, if it would.
	Refused string `json:"refused,omitempty"`
}

// RevokeTokens is `arena participant revoke NAME [--token ID]`: every
// token of the name, or the one named.
type RevokeTokens struct {
	Name    string `json:"name"`
	TokenID string `json:"token_id,omitempty"`
}

// Revoked answers RevokeTokens: the ids revoked now (none when every
// token was revoked already).
type Revoked struct {
	Revoked []string `json:"revoked"`
}
