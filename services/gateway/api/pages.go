package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/domain/participant"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/ctl"
	"github.com/lowbarena/lowbarena/services/gateway/pages"
	"github.com/lowbarena/lowbarena/services/gateway/rounds"
)

// HeaderFragment asks a page for the inside of its <main> only: page.js
// sends it to draw the page again when the live stream says it changed.
const HeaderFragment = "Lowbarena-Fragment"

// pagePrefixes are the paths of the HTML pages: they get the page's
// Content Security Policy.
var pagePrefixes = []string{"/ui/", "/submissions/", "/rounds/", "/participants/", "/leaderboard"}

// page reports whether path is one of the HTML pages or their files.
func page(path string) bool {
	if path == "/" {
		return true
	}
	for _, p := range pagePrefixes {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// HeaderPageStatus carries a fragment's page status: a fragment is
// answered 200 whatever its page's status (the page drawn is what was
// asked for, and a browser logs every 4xx of a script's fetch as a
// console error), with the page's own status in this header.
const HeaderPageStatus = "Lowbarena-Page-Status"

// render writes a page. Pages depend on the viewer's token, so no cache
// keeps them; with HeaderFragment only the inside of <main> is written.
func (a *API) render(w http.ResponseWriter, r *http.Request, status int, kind string, p pages.Page) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Vary", "Authorization, "+HeaderFragment)
	fragment := r.Header.Get(HeaderFragment) == "main"
	if fragment {
		h.Set(HeaderPageStatus, strconv.Itoa(status))
		status = http.StatusOK
	}
	var b strings.Builder
	if err := a.pages.Render(&b, kind, p, fragment); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

// problem answers an HTML error page, counted under its code like any
// refusal. live keeps the page following what it was about (a record
// that a token may reveal, a round that may yet appear).
func (a *API) problem(w http.ResponseWriter, r *http.Request, status int, code reason.Code, title, msg, live string) {
	a.o.Refusals.Add(r.Context(), code)
	a.render(w, r, status, pages.KindProblem, pages.Page{Title: title, Live: live,
		Body: pages.Problem{Status: status, Code: string(code), Title: title, Message: msg}})
}

// pageViewer is viewer for the pages: a bad token gets an HTML page.
func (a *API) pageViewer(w http.ResponseWriter, r *http.Request) (participant.Viewer, bool) {
	v, p, err := a.identify(r)
	switch {
	case err != nil:
		a.pageUnavailable(w, r, err, "")
		return participant.Viewer{}, false
	case p != nil:
		a.problem(w, r, p.status, p.code, "Token refused", p.message+". Without a token the pages show what is public.", "")
		return participant.Viewer{}, false
	}
	return v, true
}

func (a *API) pageUnavailable(w http.ResponseWriter, r *http.Request, err error, live string) {
	id := requestID(r.Context())
	a.o.Log.Warn("store unavailable", "request_id", id, "path", r.URL.Path, "err", err)
	w.Header().Set("Retry-After", "5")
	a.problem(w, r, http.StatusServiceUnavailable, reason.Unavailable, "The arena's store does not answer",
		"The arena's store does not answer; this page will try again (request id "+id+").", live)
}

// submissionPage serves GET /submissions/{id}: the record, with the
// figures behind it from the store.
func (a *API) submissionPage(w http.ResponseWriter, r *http.Request) {
	v, ok := a.pageViewer(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	if !events.ValidID(id) {
		a.problem(w, r, http.StatusBadRequest, reason.InvalidID, "Not a submission id",
			"A submission id is 1 to 128 letters, digits, '-' or '_'; "+quote(id)+" is not one.", "")
		return
	}
	live := "record:" + id
	notFound := func() {
		msg := "The arena has no submission " + id + " that this viewer may read. "
		if v.Kind == "" {
			msg += "A dev submission is shown to its participant and the operators only: with a token (the address's #token=...), this page reads it."
		} else {
			msg += "Is the id right? A submission appears here as soon as the gateway has its first event."
		}
		a.problem(w, r, http.StatusNotFound, reason.SubmissionNotFound, "No submission "+id, msg, live)
	}
	e, err := a.o.Records.Get(r.Context(), id)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		notFound()
		return
	case err != nil:
		a.pageUnavailable(w, r, err, live)
		return
	}
	var rec record.Submission
	if json.Unmarshal(e.Value(), &rec) != nil || !v.CanRead(rec.Participant, rec.Split) {
		if rec.ID != "" {
			a.o.Refusals.Add(r.Context(), reason.RecordHidden)
		}
		notFound()
		return
	}
	tel := a.telemetry(r.Context(), id)
	body := pages.NewSubmission(rec, tel)
	if rec.Bundle != nil && rec.Bundle.Patch != nil && mayReadPatch(v, rec) {
		body.PatchText = "/v1/submissions/" + id + "/patch"
	}
	a.render(w, r, http.StatusOK, pages.KindSubmission, pages.Page{Title: "Submission " + id, Live: live, Body: body})
}

// roundPage serves GET /rounds/{id}.
func (a *API) roundPage(w http.ResponseWriter, r *http.Request) {
	v, ok := a.pageViewer(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	if !events.ValidID(id) {
		a.problem(w, r, http.StatusBadRequest, reason.InvalidID, "Not a round id",
			"A round id is 1 to 128 letters, digits, '-' or '_'; "+quote(id)+" is not one.", "")
		return
	}
	live := "round:" + id
	var e jetstream.KeyValueEntry
	var err error = jetstream.ErrKeyNotFound
	if a.o.Views != nil {
		e, err = a.o.Views.Get(r.Context(), id)
	}
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		a.problem(w, r, http.StatusNotFound, reason.RoundNotFound, "No round "+id,
			"The arena has no round "+id+". `arena round start` prints a round's id; `arena history --rounds` lists them.", live)
		return
	case err != nil:
		a.pageUnavailable(w, r, err, live)
		return
	}
	var view rounds.View
	if err := json.Unmarshal(e.Value(), &view); err != nil {
		a.fail(w, r, err)
		return
	}
	owners := map[string]pages.Owner{}
	for _, sub := range append([]string{view.Incumbent}, view.Candidates...) {
		if sub == "" || !events.ValidID(sub) {
			continue
		}
		re, err := a.o.Records.Get(r.Context(), sub)
		if err != nil {
			continue // not folded yet, or gone: the row says what it can
		}
		var rec record.Submission
		if json.Unmarshal(re.Value(), &rec) != nil || !v.CanRead(rec.Participant, rec.Split) {
			continue
		}
		o := pages.Owner{Participant: rec.Participant, Method: rec.Solution.Method, Checkpoint: rec.Solution.Checkpoint, Precision: rec.Solution.Precision}
		if rec.Bundle != nil {
			o.Patch = pages.PatchLabel(rec.Bundle.Patch)
		}
		owners[sub] = o
	}
	a.render(w, r, http.StatusOK, pages.KindRound, pages.Page{Title: "Round " + id, Live: live, Body: pages.NewRound(view, owners, a.o.Now())})
}

// leaderboardPage serves GET /leaderboard?campaign=&policy=&qualified=only|all&ranked=only|all.
func (a *API) leaderboardPage(w http.ResponseWriter, r *http.Request) {
	v, ok := a.pageViewer(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	f := pages.Filter{Campaign: q.Get("campaign"), Policy: q.Get("policy")}
	for name, dst := range map[string]*bool{"qualified": &f.QualifiedOnly, "ranked": &f.RankedOnly} {
		switch q.Get(name) {
		case "", "all":
		case "only":
			*dst = true
		default:
			a.problem(w, r, http.StatusBadRequest, reason.InvalidQuery, "Bad filter", name+" is only or all, not "+quote(q.Get(name))+".", "")
			return
		}
	}
	rows, ok := a.scoreRows(w, r, v, ctl.SubjectLeaderboard, ctl.Query{Campaign: f.Campaign, Policy: f.Policy})
	if !ok {
		return
	}
	a.render(w, r, http.StatusOK, pages.KindLeaderboard, pages.Page{Title: "Leaderboard", Live: "records", Nav: "leaderboard", Body: pages.NewLeaderboard(rows, f, a.simulated(r.Context(), rows))})
}

// historyPage serves GET /participants/{name}?campaign=: a participant's
// scores over time.
func (a *API) historyPage(w http.ResponseWriter, r *http.Request) {
	v, ok := a.pageViewer(w, r)
	if !ok {
		return
	}
	name := r.PathValue("name")
	if !events.ValidID(name) {
		a.problem(w, r, http.StatusBadRequest, reason.InvalidID, "Not a participant's name",
			"A participant's name is 1 to 128 letters, digits, '-' or '_'; "+quote(name)+" is not one.", "")
		return
	}
	campaign := r.URL.Query().Get("campaign")
	rows, ok := a.scoreRows(w, r, v, ctl.SubjectHistory, ctl.Query{Participant: name, Campaign: campaign})
	if !ok {
		return
	}
	live := "participant:" + name
	if len(rows) == 0 {
		msg := "The arena has no scores of " + name + " that this viewer may read."
		if v.Kind == "" {
			msg += " The public sees scores of the ranked split only; a participant's dev scores are its own and the operators'."
		}
		a.problem(w, r, http.StatusNotFound, reason.ParticipantNotFound, "No scores of "+name, msg, live)
		return
	}
	a.render(w, r, http.StatusOK, pages.KindHistory, pages.Page{Title: name, Live: live, Body: pages.NewHistory(name, campaign, rows, a.simulated(r.Context(), rows))})
}

// scoreRows asks the score service and keeps the rows the viewer may
// read, answering an HTML page itself when it cannot.
func (a *API) scoreRows(w http.ResponseWriter, r *http.Request, v participant.Viewer, subject string, q ctl.Query) ([]ctl.Row, bool) {
	rows, err := a.readableScores(r.Context(), v, subject, q)
	var ce *ctl.Error
	switch {
	case errors.Is(err, errScoresUnreachable):
		a.problem(w, r, http.StatusServiceUnavailable, reason.ScoresUnavailable, "Scores unavailable", "This gateway does not reach the score service.", "records")
		return nil, false
	case errors.Is(err, ctl.ErrNoService):
		a.problem(w, r, http.StatusServiceUnavailable, reason.ScoresUnavailable, "Scores unavailable",
			"No score service answers; this page will try again when the arena's score stage is up.", "records")
		return nil, false
	case errors.As(err, &ce) && ce.Code == ctl.CodeBadRequest:
		a.problem(w, r, http.StatusBadRequest, reason.InvalidQuery, "Bad query", ce.Message, "")
		return nil, false
	case err != nil:
		a.pageUnavailable(w, r, err, "records")
		return nil, false
	}
	return rows, true
}

// maxSimLookups bounds the records one page of scores reads to say which
// rows are simulated; rows past it are left unmarked (the page is still
// drawn, and each submission's own page says so). simLookups is how many
// are read at once: each is a round trip to NATS.
const (
	maxSimLookups = 500
	simLookups    = 16
)

// simulated reads the records of rows' submissions and names those whose
// figures came from a simulated engine, for the page to say so. A record
// that is not there or does not decode is left out: the score service's
// rows do not carry it.
func (a *API) simulated(ctx context.Context, rows []ctl.Row) pages.Simulated {
	var ids []string
	seen := map[string]bool{}
	for _, row := range rows {
		if !seen[row.SubmissionID] && len(ids) < maxSimLookups {
			seen[row.SubmissionID] = true
			ids = append(ids, row.SubmissionID)
		}
	}
	gpus := make([]*string, len(ids))
	var wg sync.WaitGroup
	slots := make(chan struct{}, simLookups)
	for i, id := range ids {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			e, err := a.o.Records.Get(ctx, id)
			if err != nil {
				return
			}
			var rec struct {
				Result struct {
					Simulated bool   `json:"simulated"`
					GPU       string `json:"gpu"`
				} `json:"result"`
			}
			if json.Unmarshal(e.Value(), &rec) == nil && rec.Result.Simulated {
				gpus[i] = &rec.Result.GPU
			}
		}()
	}
	wg.Wait()
	sim := pages.Simulated{}
	for i, gpu := range gpus {
		if gpu != nil {
			sim[ids[i]] = *gpu
		}
	}
	return sim
}

// unknownPage answers a path under the pages' prefixes that no page
// serves, as a page.
func (a *API) unknownPage(w http.ResponseWriter, r *http.Request) {
	a.problem(w, r, http.StatusNotFound, reason.NotFound, "No such page",
		"The gateway has no page at "+quote(r.URL.Path)+": its pages are /rounds/ID, /submissions/ID, /leaderboard and /participants/NAME.", "")
}

// quote writes a value from the request for a sentence, bounded.
func quote(s string) string {
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return `"` + s + `"`
}
