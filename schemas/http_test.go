package schemas_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/schemas"
)

// TestHandlerServesEverySchemaAtItsID fetches, for every event type, the
// URL its dataschema names (the schema's $id) from the handler: the body
// is the schema whose $id that is.
func TestHandlerServesEverySchemaAtItsID(t *testing.T) {
	srv := httptest.NewServer(schemas.Handler())
	defer srv.Close()
	v, err := schemas.Default()
	require.NoError(t, err)
	uris := []string{schemas.RecordSchema}
	for _, typ := range v.EventTypes() {
		uris = append(uris, schemas.EventSchemaURI(typ))
	}
	for _, uri := range uris {
		t.Run(uri, func(t *testing.T) {
			path, ok := strings.CutPrefix(uri, strings.TrimSuffix(schemas.Base, schemas.PathPrefix))
			require.True(t, ok)
			resp, err := http.Get(srv.URL + path)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Equal(t, "application/schema+json", resp.Header.Get("Content-Type"))
			var s struct {
				ID string `json:"$id"`
			}
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&s))
			require.Equal(t, uri, s.ID)
		})
	}
	resp, err := http.Get(srv.URL + "/schemas/")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, len(uris), strings.Count(string(body), "\n"), "the index lists every schema once: %s", body)
}

func TestHandlerRefuses(t *testing.T) {
	srv := httptest.NewServer(schemas.Handler())
	defer srv.Close()
	cases := []struct {
		method, path string
		code         int
	}{
		{http.MethodGet, "/schemas/events/dev.lowbarena.nothing.v1.json", http.StatusNotFound},
		{http.MethodGet, "/schemas/events/../validate.go", http.StatusNotFound},
		{http.MethodGet, "/schemas/events/%2e%2e/record/submission.schema.json", http.StatusNotFound},
		{http.MethodGet, "/schemas/clickhouse/0001_init.sql", http.StatusNotFound},
		{http.MethodPost, "/schemas/record/submission.schema.json", http.StatusMethodNotAllowed},
		{http.MethodDelete, "/schemas/record/submission.schema.json", http.StatusMethodNotAllowed},
	}
	for _, tc := range cases {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, nil)
			require.NoError(t, err)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, tc.code, resp.StatusCode)
		})
	}
}
