package api

import (
	"errors"
	"net/http"
	"strings"

	"github.com/lowbarena/lowbarena/domain/participant"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/services/gateway/participants"
)

// viewer returns who makes the request: the public without an
// Authorization header, else the token's participant or operator. A
// header that is there but does not hold a valid token is refused (401),
// never taken as the public, so a participant whose token broke learns
// it at once. It answers the refusal itself (JSON) and reports false.
func (a *API) viewer(w http.ResponseWriter, r *http.Request) (participant.Viewer, bool) {
	v, p, err := a.identify(r)
	switch {
	case err != nil:
		a.unavailable(w, r, err)
		return participant.Viewer{}, false
	case p != nil:
		a.refuse(w, r, p.status, p.code, p.message)
		return participant.Viewer{}, false
	}
	return v, true
}

// refusal is a request refused with a status, a code and a sentence.
type refusal struct {
	status  int
	code    reason.Code
	message string
}

// identify reads the request's token: the viewer, or the refusal of a
// bad token, or the error of a registry that does not answer.
func (a *API) identify(r *http.Request) (participant.Viewer, *refusal, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return participant.Public, nil, nil
	}
	scheme, token, _ := strings.Cut(h, " ")
	token = strings.TrimSpace(token)
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		return participant.Viewer{}, &refusal{http.StatusUnauthorized, reason.TokenMalformed, "the Authorization header must read `Bearer <token>`"}, nil
	}
	v, err := a.o.Registry.Authenticate(r.Context(), token)
	switch {
	case err == nil:
		return v, nil, nil
	case errors.Is(err, participants.ErrMalformed):
		// err says what is wrong with the form, never the token.
		return participant.Viewer{}, &refusal{http.StatusUnauthorized, reason.TokenMalformed,
			"the token is not an arena token: " + strings.TrimPrefix(err.Error(), participants.ErrMalformed.Error()+": ")}, nil
	case errors.Is(err, participants.ErrInvalid):
		return participant.Viewer{}, &refusal{http.StatusUnauthorized, reason.TokenInvalid,
			"the token is not one of this arena's (a token of another arena, or mistyped); ask its operators for yours"}, nil
	case errors.Is(err, participants.ErrRevoked):
		return participant.Viewer{}, &refusal{http.StatusUnauthorized, reason.TokenRevoked, "the token was revoked; ask the arena's operators for a new one"}, nil
	}
	return participant.Viewer{}, nil, err
}
