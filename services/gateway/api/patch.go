package api

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/domain/participant"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/bus"
)

// maxPatchText bounds the patch text served: the build stage refuses
// larger patches long before (a campaign's max_patch_bytes).
const maxPatchText = 16 << 20

// getPatch serves GET /v1/submissions/{id}/patch: the text of the
// submission's engine patch, as the build stage checked it, for the
// operators and the participant who wrote it (404 to anyone else, as for
// a record they may not read: a patch is a participant's own work even
// where its scores are public). The text is read from the artifact store
// by the digest the record names and checked against it, so what is
// served is what was built.
func (a *API) getPatch(w http.ResponseWriter, r *http.Request) {
	v, ok := a.viewer(w, r)
	if !ok {
		return
	}
	msg := func(id string) string {
		return "the arena has no engine patch of a submission " + id + " that this token may read"
	}
	id, e, ok := a.submissionEntry(w, r, reason.PatchNotFound, msg)
	if !ok {
		return
	}
	notFound := msg(id)
	var rec record.Submission
	if json.Unmarshal(e.Value(), &rec) != nil || !mayReadPatch(v, rec) {
		a.refuse(w, r, http.StatusNotFound, reason.PatchNotFound, notFound)
		return
	}
	if rec.Bundle == nil || rec.Bundle.Patch == nil || rec.Bundle.Patch.SHA256 == "" {
		a.refuse(w, r, http.StatusNotFound, reason.PatchNotFound, "submission "+id+" carries no engine patch that its build checked")
		return
	}
	p := rec.Bundle.Patch
	text, err := a.patchText(r, p)
	switch {
	case errors.Is(err, artifact.ErrNotFound):
		a.refuse(w, r, http.StatusNotFound, reason.PatchNotFound, "the text of submission "+id+"'s engine patch is no longer in the artifact store (collected with its artifacts)")
		return
	case err != nil:
		a.unavailable(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Disposition", "inline")
	w.Header().Set("Cache-Control", "private, max-age=3600, immutable")
	w.Header().Set("ETag", `"`+p.SHA256+`"`)
	_, _ = w.Write(text)
}

// mayReadPatch says whether v may read rec's engine patch: an operator,
// or the participant who wrote it.
func mayReadPatch(v participant.Viewer, rec record.Submission) bool {
	return v.Kind == participant.KindOperator || v.Kind == participant.KindParticipant && v.Name == rec.Participant
}

// patchText reads a patch's bytes from the artifact store and checks
// them against the record's digest.
func (a *API) patchText(r *http.Request, p *record.Patch) ([]byte, error) {
	if a.o.Bus == nil {
		return nil, errors.New("no artifact store: the gateway runs without a bus")
	}
	arts, err := artifact.NewJetStream(r.Context(), a.o.Bus.JetStream(), bus.ObjectArtifacts)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("%w: %w", artifact.ErrNotFound, err)
	}
	if err != nil {
		return nil, err
	}
	f, err := arts.OpenFile(r.Context(), p.SHA256)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	text, err := io.ReadAll(io.LimitReader(f, maxPatchText+1))
	if err != nil {
		return nil, fmt.Errorf("gateway: read the patch %s: %w", p.SHA256, err)
	}
	sum := sha256.Sum256(text)
	if len(text) > maxPatchText || hex.EncodeToString(sum[:]) != p.SHA256 {
		return nil, fmt.Errorf("gateway: the artifact store's patch %s does not match its digest", p.SHA256)
	}
	return text, nil
}
