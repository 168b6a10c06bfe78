// Package docs_test holds the README and the pages under docs/ together:
// the README stays a newcomer's page, and every relative link of the
// README and of every page leads to a file that exists.
package docs_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// maxREADMELines is the most lines the README may hold.
const maxREADMELines = 250

// generated lists the pages other tools write: a link to one passes while
// it is missing, because its generator's own test holds it.
var generated = []string{
	"docs/reasons.md", // the table of reason codes, from the reason catalogue
}

func TestREADMEIsANewcomersPage(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	if n := strings.Count(strings.TrimRight(s, "\n"), "\n") + 1; n > maxREADMELines {
		t.Errorf("README.md holds %d lines, more than %d: move the rest into docs/", n, maxREADMELines)
	}
	for _, cmd := range []string{"make run", "make test"} {
		if !strings.Contains(s, cmd) {
			t.Errorf("README.md does not say %q", cmd)
		}
	}
}

var (
	fenced    = regexp.MustCompile("(?ms)^```.*?^```")
	inline    = regexp.MustCompile("`[^`\n]*`")
	link      = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	reference = regexp.MustCompile(`(?m)^\[[^\]]+\]:\s*(\S+)`)
)

func TestRelativeLinksLeadToFiles(t *testing.T) {
	root := ".."
	pages := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			pages = append(pages, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{}
	for _, g := range generated {
		allowed[g] = true
	}
	checked := 0
	for _, page := range pages {
		raw, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		text := inline.ReplaceAllString(fenced.ReplaceAllString(string(raw), ""), "")
		var targets []string
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			targets = append(targets, m[1])
		}
		for _, m := range reference.FindAllStringSubmatch(text, -1) {
			targets = append(targets, m[1])
		}
		for _, target := range targets {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") || strings.HasPrefix(target, "#") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			dest := filepath.ToSlash(filepath.Join(filepath.Dir(page), target))
			checked++
			if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
				if allowed[dest] {
					continue
				}
				t.Errorf("%s links to %s, which does not exist", page, target)
			}
		}
	}
	if checked == 0 {
		t.Error("no relative link was found: the test reads nothing")
	}
}
