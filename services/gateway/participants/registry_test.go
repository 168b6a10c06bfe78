package participants_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/participant"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/services/gateway/participants"
)

// cheap are argon2id parameters small enough for tests; the defaults are
// checked in the participant package.
var cheap = participant.HashParams{Memory: 64, Time: 1, Threads: 1, KeyLen: 32}

func registry(t *testing.T) (*participants.Registry, jetstream.KeyValue) {
	t.Helper()
	b, _ := bustest.Bus(t)
	kv, err := b.JetStream().KeyValue(context.Background(), bus.BucketParticipants)
	require.NoError(t, err)
	return participants.New(kv, participants.Options{Hash: cheap}), kv
}

func TestAddAndAuthenticate(t *testing.T) {
	r, kv := registry(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	tok, info, err := r.Add(ctx, "team-a", participant.KindParticipant, participant.Limits{SubmissionsPerDay: 3})
	require.NoError(t, err)
	opTok, _, err := r.Add(ctx, "ops", participant.KindOperator, participant.Limits{SubmissionsPerDay: 3})
	require.NoError(t, err)

	v, err := r.Authenticate(ctx, tok)
	require.NoError(t, err)
	require.Equal(t, participant.Viewer{Kind: participant.KindParticipant, Name: "team-a"}, v)
	v, err = r.Authenticate(ctx, tok)
	require.NoError(t, err, "a second use (verified from the cache)")
	require.Equal(t, "team-a", v.Name)
	v, err = r.Authenticate(ctx, opTok)
	require.NoError(t, err)
	require.True(t, v.Operator())

	// Only the hash is stored, in PHC form; the secret is nowhere.
	parsed, err := participant.Parse(tok)
	require.NoError(t, err)
	e, err := kv.Get(ctx, "t."+parsed.ID)
	require.NoError(t, err)
	require.NotContains(t, string(e.Value()), parsed.Secret)
	var stored participant.Token
	require.NoError(t, json.Unmarshal(e.Value(), &stored))
	require.Equal(t, info.Hash, stored.Hash)
	require.Regexp(t, `^\$argon2id\$v=19\$m=64,t=1,p=1\$`, stored.Hash)

	p, err := r.Get(ctx, "team-a")
	require.NoError(t, err)
	require.Equal(t, 3, p.Limits.SubmissionsPerDay)
	op, err := r.Get(ctx, "ops")
	require.NoError(t, err)
	require.Zero(t, op.Limits, "operators have no quota")

	// A second token for the same participant: both work.
	tok2, _, err := r.Issue(ctx, "team-a")
	require.NoError(t, err)
	require.NotEqual(t, tok, tok2)
	_, err = r.Authenticate(ctx, tok2)
	require.NoError(t, err)

	list, err := r.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, "ops", list[0].Name)
	require.Equal(t, "team-a", list[1].Name)
	require.Len(t, list[1].Tokens, 2)
	require.Equal(t, parsed.ID, list[1].Tokens[0].ID, "oldest first")
}

func TestAddRefuses(t *testing.T) {
	r, _ := registry(t)
	ctx := context.Background()
	_, _, err := r.Add(ctx, "team-a", participant.KindParticipant, participant.Limits{})
	require.NoError(t, err)
	tests := []struct {
		name, who string
		kind      participant.Kind
		limits    participant.Limits
		err       error
		text      string
	}{
		{"a name taken", "team-a", participant.KindParticipant, participant.Limits{}, participants.ErrExists, "team-a is a participant already"},
		{"an operator's name taken by a participant", "team-a", participant.KindOperator, participant.Limits{}, participants.ErrExists, "is a participant already"},
		{"upper case", "Team-B", participant.KindParticipant, participant.Limits{}, participants.ErrBadRequest, "lower-case"},
		{"a dot", "team.b", participant.KindParticipant, participant.Limits{}, participants.ErrBadRequest, "not 1 to 64"},
		{"an unknown kind", "team-b", "viewer", participant.Limits{}, participants.ErrBadRequest, "neither participant nor operator"},
		{"a negative quota", "team-b", participant.KindParticipant, participant.Limits{SubmissionsPerDay: -1}, participants.ErrBadRequest, "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := r.Add(ctx, tt.who, tt.kind, tt.limits)
			require.ErrorIs(t, err, tt.err)
			require.ErrorContains(t, err, tt.text)
		})
	}
	_, _, err = r.Issue(ctx, "nobody")
	require.ErrorIs(t, err, participants.ErrNotFound)
}

func TestAuthenticateRefuses(t *testing.T) {
	r, kv := registry(t)
	ctx := context.Background()
	tok, _, err := r.Add(ctx, "team-a", participant.KindParticipant, participant.Limits{})
	require.NoError(t, err)
	p, err := participant.Parse(tok)
	require.NoError(t, err)
	_, fresh, err := participant.NewToken(participant.KindParticipant)
	require.NoError(t, err)
	wrongSecret, err := participant.Parsed{Kind: p.Kind, ID: p.ID, Secret: fresh.Secret}.Format()
	require.NoError(t, err)
	unknownID, err := participant.Parsed{Kind: p.Kind, ID: fresh.ID, Secret: p.Secret}.Format()
	require.NoError(t, err)
	asOperator, err := participant.Parsed{Kind: participant.KindOperator, ID: p.ID, Secret: p.Secret}.Format()
	require.NoError(t, err)

	// A damaged entry authenticates nobody.
	damaged, _, err := r.Add(ctx, "team-d", participant.KindParticipant, participant.Limits{})
	require.NoError(t, err)
	dp, _ := participant.Parse(damaged)
	e, err := kv.Get(ctx, "t."+dp.ID)
	require.NoError(t, err)
	var dt participant.Token
	require.NoError(t, json.Unmarshal(e.Value(), &dt))
	dt.Hash = "$argon2id$v=19$m=1048576,t=1,p=1$c2FsdHNhbHRzYWx0$8r/k6m1oAnWd3WJOcgoNRx249sh7vlr3HF/DSGfdC9A"
	body, _ := json.Marshal(dt)
	_, err = kv.Put(ctx, "t."+dp.ID, body)
	require.NoError(t, err)

	for name, tt := range map[string]struct {
		token string
		err   error
	}{
		"malformed":                       {"Bearer " + tok, participants.ErrMalformed},
		"mistyped":                        {mistype(tok, 30), participants.ErrMalformed},
		"the right id, a wrong secret":    {wrongSecret, participants.ErrInvalid},
		"an id the arena never issued":    {unknownID, participants.ErrInvalid},
		"a participant's id as operator":  {asOperator, participants.ErrInvalid},
		"a damaged entry (a GiB of hash)": {damaged, participants.ErrInvalid},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := r.Authenticate(ctx, tt.token)
			require.ErrorIs(t, err, tt.err)
		})
	}
}

// mistype changes the character at i to another of the token alphabet.
func mistype(tok string, i int) string {
	c := byte('a')
	if tok[i] == 'a' {
		c = 'b'
	}
	return tok[:i] + string(c) + tok[i+1:]
}

func TestRevoke(t *testing.T) {
	r, _ := registry(t)
	ctx := context.Background()
	tok1, t1, err := r.Add(ctx, "team-a", participant.KindParticipant, participant.Limits{})
	require.NoError(t, err)
	tok2, t2, err := r.Issue(ctx, "team-a")
	require.NoError(t, err)
	_, err = r.Authenticate(ctx, tok1)
	require.NoError(t, err, "verified once, and remembered")

	revoked, err := r.Revoke(ctx, "team-a", t1.ID)
	require.NoError(t, err)
	require.Equal(t, []string{t1.ID}, revoked)
	_, err = r.Authenticate(ctx, tok1)
	require.ErrorIs(t, err, participants.ErrRevoked, "the remembered verification does not outlive the revocation")
	_, err = r.Authenticate(ctx, tok2)
	require.NoError(t, err, "the other token still works")

	revoked, err = r.Revoke(ctx, "team-a", "")
	require.NoError(t, err)
	require.Equal(t, []string{t2.ID}, revoked, "the one left")
	_, err = r.Authenticate(ctx, tok2)
	require.ErrorIs(t, err, participants.ErrRevoked)
	revoked, err = r.Revoke(ctx, "team-a", "")
	require.NoError(t, err)
	require.Empty(t, revoked, "nothing left to revoke")

	// A revoked token with a wrong secret is invalid, not revoked: only
	// the secret's holder learns of the revocation.
	p, _ := participant.Parse(tok1)
	_, fresh, _ := participant.NewToken(participant.KindParticipant)
	guess, _ := participant.Parsed{Kind: p.Kind, ID: p.ID, Secret: fresh.Secret}.Format()
	_, err = r.Authenticate(ctx, guess)
	require.ErrorIs(t, err, participants.ErrInvalid)

	_, err = r.Revoke(ctx, "nobody", "")
	require.ErrorIs(t, err, participants.ErrNotFound)
	_, err = r.Revoke(ctx, "team-a", "aaaaaaaaaaaaaaaa")
	require.ErrorIs(t, err, participants.ErrNotFound)
	require.True(t, errors.Is(err, participants.ErrNotFound))

	list, err := r.List(ctx)
	require.NoError(t, err)
	require.Len(t, list[0].Tokens, 2)
	for _, tk := range list[0].Tokens {
		require.NotNil(t, tk.RevokedAt, "revoked tokens stay listed")
	}
}
