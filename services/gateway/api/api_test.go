package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/participant"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/services/gateway/participants"
	"github.com/lowbarena/lowbarena/services/gateway/rounds"
	"github.com/lowbarena/lowbarena/services/gateway/usage"
)

var testQuotas = participant.Limits{SubmissionsPerDay: 5, BytesPerSubmission: 1 << 20, GPUHoursPerWeek: 1}

// fixture is an API over a real embedded NATS: its buckets, a registry
// with cheap hashes, and tokens of two participants and an operator.
type fixture struct {
	b              *bus.Bus
	records, views jetstream.KeyValue
	reg            *participants.Registry
	alice, bob, op string
	srv            *httptest.Server
}

func newFixture(t testing.TB, edit func(*Options)) *fixture {
	t.Helper()
	b, _ := bustest.Bus(t)
	ctx := context.Background()
	kv := func(name string) jetstream.KeyValue {
		k, err := b.JetStream().KeyValue(ctx, name)
		require.NoError(t, err)
		return k
	}
	f := &fixture{b: b, records: kv(bus.BucketSubmissions), views: kv(bus.BucketRoundViews)}
	f.reg = participants.New(kv(bus.BucketParticipants), participants.Options{Hash: participant.HashParams{Memory: 64, Time: 1, Threads: 1, KeyLen: 32}})
	var err error
	f.alice, _, err = f.reg.Add(ctx, "alice", participant.KindParticipant, participant.Limits{})
	require.NoError(t, err)
	f.bob, _, err = f.reg.Add(ctx, "bob", participant.KindParticipant, participant.Limits{})
	require.NoError(t, err)
	f.op, _, err = f.reg.Add(ctx, "ops", participant.KindOperator, participant.Limits{})
	require.NoError(t, err)
	o := Options{Records: f.records, Views: f.views, Registry: f.reg, Ledger: usage.New(kv(bus.BucketUsage), nil), Bus: b, NC: b.Conn(),
		Defaults: testQuotas, Spool: t.TempDir()}
	if edit != nil {
		edit(&o)
	}
	a, err := New(o)
	require.NoError(t, err)
	f.srv = httptest.NewServer(a)
	t.Cleanup(f.srv.Close)
	return f
}

// get requests path with token ("" for none) and returns the status, the
// decoded JSON body (nil when not JSON) and the response.
func (f *fixture) get(t *testing.T, path, token string) (int, map[string]any, *http.Response) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if resp.Header.Get("Content-Type") == "application/json" {
		require.NoError(t, json.Unmarshal(raw, &m), string(raw))
	}
	return resp.StatusCode, m, resp
}

func code(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func (f *fixture) putRecord(t *testing.T, id, who, split string, created time.Time) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"id": id, "participant": who, "split": split, "status": "running", "created_at": created.UTC()})
	_, err := f.records.Put(context.Background(), id, body)
	require.NoError(t, err)
}

// TestReadAPI: who reads which record, over a real HTTP server on
// loopback against an embedded NATS. A dev record is its participant's
// and the operators'; to anyone else it is 404, the very answer of an id
// that does not exist. Ranked records and rounds are public.
func TestReadAPI(t *testing.T) {
	f := newFixture(t, nil)
	f.putRecord(t, "alice-dev", "alice", "dev", time.Unix(100, 0))
	f.putRecord(t, "alice-ranked", "alice", "ranked", time.Unix(200, 0))
	f.putRecord(t, "bob-dev", "bob", "dev", time.Unix(300, 0))
	for id, started := range map[string]*time.Time{"old-r": new(time.Unix(100, 0).UTC()), "new-r": new(time.Unix(200, 0).UTC()), "early": nil} {
		body, _ := json.Marshal(rounds.View{RoundID: id, Status: rounds.StatusRunning, StartedAt: started, Candidates: []string{}, Steps: []rounds.Step{}})
		_, err := f.views.Put(context.Background(), id, body)
		require.NoError(t, err)
	}
	ids := func(m map[string]any) []string {
		var out []string
		for _, s := range m["submissions"].([]any) {
			out = append(out, s.(map[string]any)["id"].(string))
		}
		return out
	}
	tests := []struct {
		name, path, token string
		status            int
		code              string
		check             func(t *testing.T, m map[string]any)
	}{
		{"health", "/healthz", "", 200, "", nil},
		{"the public reads a ranked record", "/v1/submissions/alice-ranked", "", 200, "", func(t *testing.T, m map[string]any) { require.Equal(t, "alice-ranked", m["id"]) }},
		{"the public does not read a dev record", "/v1/submissions/alice-dev", "", 404, string(reason.SubmissionNotFound), nil},
		{"its participant reads its dev record", "/v1/submissions/alice-dev", "alice", 200, "", func(t *testing.T, m map[string]any) { require.Equal(t, "alice", m["participant"]) }},
		{"another participant does not", "/v1/submissions/alice-dev", "bob", 404, string(reason.SubmissionNotFound), func(t *testing.T, m map[string]any) {
			require.Equal(t, "the arena has no submission alice-dev that this token may read", m["error"].(map[string]any)["message"], "the answer of an id that does not exist")
		}},
		{"an id that does not exist", "/v1/submissions/nope", "bob", 404, string(reason.SubmissionNotFound), nil},
		{"an operator reads every record", "/v1/submissions/bob-dev", "ops", 200, "", nil},
		{"a bad id", "/v1/submissions/a.b", "", 400, string(reason.InvalidID), nil},
		{"the public lists ranked records", "/v1/submissions", "", 200, "", func(t *testing.T, m map[string]any) { require.Equal(t, []string{"alice-ranked"}, ids(m)) }},
		{"a participant lists its own and the ranked", "/v1/submissions", "alice", 200, "", func(t *testing.T, m map[string]any) {
			require.Equal(t, []string{"alice-ranked", "alice-dev"}, ids(m), "newest first")
		}},
		{"an operator lists everything", "/v1/submissions?limit=2", "ops", 200, "", func(t *testing.T, m map[string]any) { require.Equal(t, []string{"bob-dev", "alice-ranked"}, ids(m)) }},
		{"a participant filter keeps the rule", "/v1/submissions?participant=bob", "alice", 200, "", func(t *testing.T, m map[string]any) { require.Empty(t, ids(m)) }},
		{"a bad limit", "/v1/submissions?limit=0", "", 400, string(reason.InvalidQuery), nil},
		{"rounds are public", "/v1/rounds/new-r", "", 200, "", func(t *testing.T, m map[string]any) { require.Equal(t, "new-r", m["round_id"]) }},
		{"round not found", "/v1/rounds/nope", "", 404, string(reason.RoundNotFound), nil},
		{"rounds newest first", "/v1/rounds", "", 200, "", func(t *testing.T, m map[string]any) {
			var got []string
			for _, r := range m["rounds"].([]any) {
				got = append(got, r.(map[string]any)["round_id"].(string))
			}
			require.Equal(t, []string{"new-r", "old-r", "early"}, got, "newest first, not yet started last")
		}},
		{"me", "/v1/me", "alice", 200, "", func(t *testing.T, m map[string]any) {
			require.Equal(t, "alice", m["name"])
			require.Equal(t, float64(5), m["limits"].(map[string]any)["submissions_per_day"])
		}},
		{"me without a token", "/v1/me", "", 401, string(reason.TokenMissing), nil},
		{"an unknown path", "/v2/anything", "", 404, string(reason.NotFound), nil},
		{"a method no endpoint takes", "/v1/rounds", "", 404, string(reason.NotFound), nil},
	}
	tokens := map[string]string{"": "", "alice": f.alice, "bob": f.bob, "ops": f.op}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var status int
			var m map[string]any
			if tt.name == "a method no endpoint takes" {
				resp, err := http.Post(f.srv.URL+tt.path, "application/json", nil)
				require.NoError(t, err)
				status = resp.StatusCode
				require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
				resp.Body.Close()
			} else {
				status, m, _ = f.get(t, tt.path, tokens[tt.token])
			}
			require.Equal(t, tt.status, status)
			require.Equal(t, tt.code, code(m))
			if tt.check != nil {
				tt.check(t, m)
			}
		})
	}
}

// TestBadTokens: a token that is there but not valid is refused, never
// read as the public.
func TestBadTokens(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	revoked, tk, err := f.reg.Add(ctx, "carol", participant.KindParticipant, participant.Limits{})
	require.NoError(t, err)
	_, err = f.reg.Revoke(ctx, "carol", tk.ID)
	require.NoError(t, err)
	other, _, err := participant.NewToken(participant.KindParticipant)
	require.NoError(t, err)
	c := byte('a')
	if f.alice[40] == 'a' {
		c = 'b'
	}
	mistyped := f.alice[:40] + string(c) + f.alice[41:]
	for name, tt := range map[string]struct{ header, code string }{
		"not bearer":             {"Basic YWxpY2U6c2VjcmV0", string(reason.TokenMalformed)},
		"bearer without a token": {"Bearer ", string(reason.TokenMalformed)},
		"not an arena token":     {"Bearer ghp_16C7e42F292c6912E7710c838347Ae178B4a", string(reason.TokenMalformed)},
		"mistyped":               {"Bearer " + mistyped, string(reason.TokenMalformed)},
		"another arena's token":  {"Bearer " + other, string(reason.TokenInvalid)},
		"revoked":                {"Bearer " + revoked, string(reason.TokenRevoked)},
	} {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/v1/submissions", nil)
			req.Header.Set("Authorization", tt.header)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			var m map[string]any
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
			require.Equal(t, tt.code, code(m))
			require.Contains(t, resp.Header.Get("WWW-Authenticate"), "Bearer")
			msg := m["error"].(map[string]any)["message"].(string)
			require.NotContains(t, msg, f.alice[20:], "never the token")
		})
	}
}

// TestSecurityHeaders: the page is served with a policy that allows only
// its own script and style, no framing, no sniffing and no referrer; API
// answers allow nothing and are never cached.
func TestSecurityHeaders(t *testing.T) {
	f := newFixture(t, nil)
	for _, tt := range []struct {
		path, contentType, csp, contains string
	}{
		{"/", "text/html; charset=utf-8", pageCSP, `<script src="/ui/app.js" defer></script>`},
		{"/ui/app.js", "text/javascript; charset=utf-8", pageCSP, `fetch("/v1/live?recent="`},
		{"/ui/app.css", "text/css; charset=utf-8", pageCSP, "progress"},
		{"/ui/page.js", "text/javascript; charset=utf-8", pageCSP, `"Lowbarena-Fragment": "main"`},
		{"/ui/pages.css", "text/css; charset=utf-8", pageCSP, "svg.plot"},
		{"/ui/favicon.svg", "image/svg+xml", pageCSP, "<svg"},
		{"/v1/submissions", "application/json", apiCSP, `"submissions"`},
		{"/v1/nothing", "application/json", apiCSP, string(reason.NotFound)},
	} {
		t.Run(tt.path, func(t *testing.T) {
			resp, err := http.Get(f.srv.URL + tt.path)
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			h := resp.Header
			require.Equal(t, tt.contentType, h.Get("Content-Type"))
			require.Equal(t, tt.csp, h.Get("Content-Security-Policy"))
			require.Contains(t, h.Get("Content-Security-Policy"), "frame-ancestors 'none'")
			require.Equal(t, "nosniff", h.Get("X-Content-Type-Options"))
			require.Equal(t, "no-referrer", h.Get("Referrer-Policy"))
			require.Equal(t, "DENY", h.Get("X-Frame-Options"))
			require.Len(t, h.Get("X-Request-Id"), 16)
			require.Empty(t, h.Get("Strict-Transport-Security"), "no HSTS over plain HTTP")
			require.Contains(t, string(body), tt.contains)
			if tt.csp == apiCSP {
				require.Equal(t, "no-store", h.Get("Cache-Control"))
			}
		})
	}
	// The page holds no inline script or style for the policy to allow.
	page, err := ui.ReadFile("ui/index.html")
	require.NoError(t, err)
	require.NotRegexp(t, `<script>|<style|style=|onclick=|onload=`, string(page))
	for _, name := range []string{"ui/app.js", "ui/page.js"} {
		js, err := ui.ReadFile(name)
		require.NoError(t, err)
		require.NotContains(t, string(js), "style=", name)
		require.NotContains(t, string(js), "eval(", name)
	}
}

// TestPanicIsNotShown: a fault of the gateway's own answers 500 with the
// request id; the stack and the panic's text go to the log only.
func TestPanicIsNotShown(t *testing.T) {
	var logged []string
	a := &API{o: Options{WriteTimeout: time.Second, Log: captureLog(&logged)}}
	h := a.harden(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("open /srv/lowbarena/secret/spool/upload-123: permission denied")
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	require.Contains(t, string(body), string(reason.InternalError))
	require.Contains(t, string(body), resp.Header.Get("X-Request-Id"))
	for _, leak := range []string{"/srv/lowbarena", "goroutine", ".go:", "panic"} {
		require.NotContains(t, string(body), leak)
	}
	require.Len(t, logged, 1)
	require.Contains(t, logged[0], "/srv/lowbarena/secret/spool")
	require.Contains(t, logged[0], "goroutine")
}

// The schemas events name in their dataschema are served, public and
// read-only, at the path of their $id.
func TestSchemasAreServed(t *testing.T) {
	f := newFixture(t, nil)
	for _, tc := range []struct {
		path   string
		status int
	}{
		{"/schemas/events/dev.lowbarena.submission.received.v1.json", 200},
		{"/schemas/record/submission.schema.json", 200},
		{"/schemas/events/dev.lowbarena.nothing.v1.json", 404},
		{"/schemas/../go.mod", 404},
	} {
		t.Run(tc.path, func(t *testing.T) {
			resp, err := http.Get(f.srv.URL + tc.path)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, tc.status, resp.StatusCode)
			if tc.status != 200 {
				return
			}
			require.Equal(t, "application/schema+json", resp.Header.Get("Content-Type"))
			var doc struct {
				ID string `json:"$id"`
			}
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&doc))
			require.True(t, strings.HasSuffix(doc.ID, strings.TrimPrefix(tc.path, "/schemas/")), doc.ID)
		})
	}
}
