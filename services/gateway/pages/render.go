// Package pages draws the gateway's HTML pages on the server: a round,
// a submission, the leaderboard, a participant's history, and the error
// pages. Each page is whole without script (its plots are SVG drawn by
// package plot); page.js, served beside it, only follows the live
// stream and asks the server for the page's main part again when what
// it shows changes. The page builders are pure: data in, a page out;
// the HTTP handlers (package api) gather the data.
package pages

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io"
	"net/url"
)

//go:embed templates/*.html
var files embed.FS

// Kinds of page, each a template of its own beside the layout.
const (
	KindSubmission  = "submission"
	KindRound       = "round"
	KindLeaderboard = "leaderboard"
	KindHistory     = "history"
	KindProblem     = "problem"
)

var funcs = template.FuncMap{
	"fixed":  Fixed,
	"fixedp": FixedP,
	"gib":    GiB,
	"bytes":  Bytes,
	"pct":    Percent,
	"short":  Short,
	"path":   url.PathEscape,
	"query":  url.QueryEscape,
	"inc":    func(i int) int { return i + 1 },
}

// Renderer holds the parsed templates.
type Renderer struct {
	t map[string]*template.Template
}

// NewRenderer parses the templates. It fails only on a template that
// does not parse (a fault of this package, caught by its tests).
func NewRenderer() (*Renderer, error) {
	r := &Renderer{t: map[string]*template.Template{}}
	for _, k := range []string{KindSubmission, KindRound, KindLeaderboard, KindHistory, KindProblem} {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(files, "templates/layout.html", "templates/"+k+".html")
		if err != nil {
			return nil, fmt.Errorf("pages: parse %s: %w", k, err)
		}
		r.t[k] = t
	}
	return r, nil
}

// Render writes the page of kind: the whole document, or with fragment
// only the inside of its <main> (what page.js swaps in). It renders
// into a buffer first, so a template error never leaves half a page.
func (r *Renderer) Render(w io.Writer, kind string, p Page, fragment bool) error {
	t, ok := r.t[kind]
	if !ok {
		return fmt.Errorf("pages: no page of kind %q", kind)
	}
	name := "layout.html"
	if fragment {
		name = "body"
	}
	var b bytes.Buffer
	if err := t.ExecuteTemplate(&b, name, p); err != nil {
		return fmt.Errorf("pages: render %s: %w", kind, err)
	}
	_, err := b.WriteTo(w)
	return err
}
