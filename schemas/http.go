package schemas

import (
	"net/http"
	"strings"
)

// EventSchemaURI is the $id of the JSON Schema of an event type's data,
// the URI the arena sets as each event's dataschema attribute.
func EventSchemaURI(eventType string) string { return Base + "events/" + eventType + ".json" }

// PathPrefix is the path under which Handler serves the schemas: the path
// of Base, so an event's dataschema names the file to fetch from the
// gateway (https://lowbarena.dev/schemas/events/T.json is
// http://GATEWAY/schemas/events/T.json).
const PathPrefix = "/schemas/"

// Handler serves the embedded schemas read-only: GET (or HEAD)
// /schemas/events/<type>.json and /schemas/record/submission.schema.json,
// as application/schema+json; /schemas/ lists them. Anything else is a
// 404 with a sentence; the handler never reads the file system.
func Handler() http.Handler {
	files := http.FileServerFS(jsonFS)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "the schemas are read-only", http.StatusMethodNotAllowed)
			return
		}
		name, ok := strings.CutPrefix(r.URL.Path, PathPrefix)
		if !ok {
			http.NotFound(w, r)
			return
		}
		if name == "" {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			for _, n := range list() {
				_, _ = w.Write([]byte(PathPrefix + n + "\n"))
			}
			return
		}
		if _, err := jsonFS.Open(name); err != nil || !strings.HasSuffix(name, ".json") || strings.Contains(name, "..") {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte("no schema " + r.URL.Path + "; " + PathPrefix + " lists them\n"))
			return
		}
		w.Header().Set("Content-Type", "application/schema+json")
		w.Header().Set("Cache-Control", "public, max-age=300")
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/" + name
		files.ServeHTTP(w, r2)
	})
}

// list names every embedded schema file, events first.
func list() []string {
	var out []string
	for _, dir := range []string{"events", "record"} {
		entries, err := jsonFS.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			out = append(out, dir+"/"+e.Name())
		}
	}
	return out
}
