package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/participant"
	"github.com/lowbarena/lowbarena/platform/ctl"
)

// TestParticipantEndpoints: what `arena participant` asks the gateway:
// add (the token once), list (ids, dates, quotas and usage; never a
// secret or a hash), a further token, revoke; each refusal with its code.
func TestParticipantEndpoints(t *testing.T) {
	g := startGateway(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc := g.b.Conn()

	added, err := ctl.Call[ctl.NewToken](ctx, nc, ctl.SubjectParticipantAdd, ctl.AddParticipant{Name: "team-a", Limits: participant.Limits{SubmissionsPerDay: 3}})
	require.NoError(t, err)
	require.Equal(t, participant.KindParticipant, added.Kind, "participant by default")
	p, err := participant.Parse(added.Token)
	require.NoError(t, err)
	require.Equal(t, added.TokenID, p.ID)
	require.Equal(t, http.StatusOK, g.get(t, "/v1/me", added.Token).status)

	second, err := ctl.Call[ctl.NewToken](ctx, nc, ctl.SubjectParticipantToken, ctl.IssueToken{Name: "team-a"})
	require.NoError(t, err)
	require.NotEqual(t, added.Token, second.Token)
	_, err = ctl.Call[ctl.NewToken](ctx, nc, ctl.SubjectParticipantAdd, ctl.AddParticipant{Name: "root", Kind: participant.KindOperator})
	require.NoError(t, err)
	accepted := g.post(t, added.Token, packed(t, "team-a", "dev", nil))
	require.Equal(t, http.StatusAccepted, accepted.status, accepted.raw)

	msg, err := nc.RequestWithContext(ctx, ctl.SubjectParticipantList, []byte(`{}`))
	require.NoError(t, err)
	require.NotContains(t, string(msg.Data), "argon2id", "no hash leaves the gateway")
	require.NotContains(t, string(msg.Data), p.Secret)
	var list ctl.Participants
	require.NoError(t, json.Unmarshal(msg.Data, &list))
	require.Len(t, list.Participants, 2)
	root, team := list.Participants[0], list.Participants[1]
	require.Equal(t, "root", root.Name)
	require.Nil(t, root.Limits, "operators have no quota")
	require.Nil(t, root.Usage)
	require.Equal(t, "team-a", team.Name)
	require.Equal(t, &participant.Limits{SubmissionsPerDay: 3, BytesPerSubmission: 2 << 30, GPUHoursPerWeek: 10}, team.Limits, "its override over the defaults")
	require.Equal(t, 1, team.Usage.SubmissionsLastDay)
	require.Len(t, team.Tokens, 2)
	require.Equal(t, added.TokenID, team.Tokens[0].ID)

	revoked, err := ctl.Call[ctl.Revoked](ctx, nc, ctl.SubjectParticipantRevoke, ctl.RevokeTokens{Name: "team-a", TokenID: added.TokenID})
	require.NoError(t, err)
	require.Equal(t, []string{added.TokenID}, revoked.Revoked)
	a := g.get(t, "/v1/me", added.Token)
	require.Equal(t, http.StatusUnauthorized, a.status)
	require.Equal(t, "token_revoked", a.code())
	require.Equal(t, http.StatusOK, g.get(t, "/v1/me", second.Token).status)

	for name, tt := range map[string]struct {
		subject string
		req     any
		code    string
		text    string
	}{
		"a name taken":       {ctl.SubjectParticipantAdd, ctl.AddParticipant{Name: "team-a"}, ctl.CodeConflict, "team-a is a participant already"},
		"a bad name":         {ctl.SubjectParticipantAdd, ctl.AddParticipant{Name: "Team A"}, ctl.CodeBadRequest, "lower-case"},
		"a bad kind":         {ctl.SubjectParticipantAdd, ctl.AddParticipant{Name: "x", Kind: "viewer"}, ctl.CodeBadRequest, "neither participant nor operator"},
		"a token for nobody": {ctl.SubjectParticipantToken, ctl.IssueToken{Name: "nobody"}, ctl.CodeNotFound, "nobody"},
		"revoke nobody":      {ctl.SubjectParticipantRevoke, ctl.RevokeTokens{Name: "nobody"}, ctl.CodeNotFound, "nobody"},
		"revoke a token id it does not have": {ctl.SubjectParticipantRevoke, ctl.RevokeTokens{Name: "team-a", TokenID: "aaaaaaaaaaaaaaaa"}, ctl.CodeNotFound,
			"team-a has no token aaaaaaaaaaaaaaaa"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ctl.Call[ctl.NewToken](ctx, nc, tt.subject, tt.req)
			var e *ctl.Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, tt.code, e.Code)
			require.Contains(t, e.Message, tt.text)
			require.NotContains(t, e.Message, "participants:", "a sentence, not a Go error")
		})
	}
}
