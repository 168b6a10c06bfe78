package api

import (
	"errors"
	"net/http"
	"strings"

	"github.com/lowbarena/lowbarena/services/domain/participant"
	"github.com/lowbarena/lowbarena/services/gateway/participants"
)

// viewer returns who makes the request: the public without an
// Authorization header, else the token's participant or operator. A
// header that is there but does not hold a valid token is refused (401),
// never taken as the public, so a participant whose token broke learns
// it at once. It answers the refusal itself and reports false.
func (a *API) viewer(w http.ResponseWriter, r *http.Request) (participant.Viewer, bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return participant.Public, true
	}
	scheme, token, _ := strings.Cut(h, " ")
	token = strings.TrimSpace(token)
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		a.refuse(w, r, http.StatusUnauthorized, CodeTokenMalformed, "the Authorization header must read `Bearer <token>`")
		return participant.Viewer{}, false
	}
	v, err := a.o.Registry.Authenticate(r.Context(), token)
	switch {
	case err == nil:
		return v, true
	case errors.Is(err, participants.ErrMalformed):
		// err says what is wrong with the form, never the token.
		a.refuse(w, r, http.StatusUnauthorized, CodeTokenMalformed, "the token is not an arena token: "+strings.TrimPrefix(err.Error(), participants.ErrMalformed.Error()+": "))
	case errors.Is(err, participants.ErrInvalid):
		a.refuse(w, r, http.StatusUnauthorized, CodeTokenInvalid, "the token is not one of this arena's (a token of another arena, or mistyped); ask its operators for yours")
	case errors.Is(err, participants.ErrRevoked):
		a.refuse(w, r, http.StatusUnauthorized, CodeTokenRevoked, "the token was revoked; ask the arena's operators for a new one")
	default:
		a.unavailable(w, r, err)
	}
	return participant.Viewer{}, false
}
