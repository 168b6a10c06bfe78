package suite

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// File is the suite's metadata file.
const File = "suite.json"

// Splits: dev is shown to participants and never ranked; ranked is held
// out and never shown.
const (
	SplitDev    = "dev"
	SplitRanked = "ranked"
)

// Meta is suite.json.
type Meta struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Split   string `json:"split"`
	// Seed is the generator's seed; dev and ranked never share one.
	Seed    uint64   `json:"seed"`
	Domains []string `json:"domains"`
}

// Suite is a loaded suite.
type Suite struct {
	Meta
	// Items by domain, in file order.
	Items map[string][]Item
}

// Key names the suite's rows in the store: name@version/split.
func (s *Suite) Key() string { return s.Name + "@" + s.Version + "/" + s.Split }

// Count is the number of items in all domains.
func (s *Suite) Count() int {
	n := 0
	for _, its := range s.Items {
		n += len(its)
	}
	return n
}

// Errors of a suite that cannot be used.
var (
	ErrBadSuite = errors.New("suite: invalid suite")
)

// maxLine bounds one JSONL line (a long-context item is tens of KB).
const maxLine = 4 << 20

// Load reads and checks a suite folder: every domain file exists, every
// item is valid, ids are unique across the suite, and items sit in the
// file of their domain.
func Load(dir string) (*Suite, error) {
	data, err := os.ReadFile(filepath.Join(dir, File))
	if err != nil {
		return nil, fmt.Errorf("suite: %w", err)
	}
	var s Suite
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s.Meta); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadSuite, filepath.Join(dir, File), err)
	}
	if s.Name == "" || s.Version == "" || (s.Split != SplitDev && s.Split != SplitRanked) || len(s.Domains) == 0 {
		return nil, fmt.Errorf("%w: %s needs a name, a version, split dev or ranked, and domains", ErrBadSuite, filepath.Join(dir, File))
	}
	s.Items = map[string][]Item{}
	seen := map[string]string{}
	for _, d := range s.Domains {
		its, err := readDomain(filepath.Join(dir, d+".jsonl"), d, seen)
		if err != nil {
			return nil, err
		}
		s.Items[d] = its
	}
	return &s, nil
}

func readDomain(path, domain string, seen map[string]string) ([]Item, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: domain %s: %w", ErrBadSuite, domain, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	var out []Item
	line := 0
	for sc.Scan() {
		line++
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var it Item
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&it); err != nil {
			return nil, fmt.Errorf("%w: %s line %d: %w", ErrBadSuite, path, line, err)
		}
		if it.Domain != domain {
			return nil, fmt.Errorf("%w: %s line %d: item %s says domain %q", ErrBadSuite, path, line, it.ID, it.Domain)
		}
		if err := it.Validate(); err != nil {
			return nil, fmt.Errorf("%w: %s line %d: %w", ErrBadSuite, path, line, err)
		}
		if prev, dup := seen[it.ID]; dup {
			return nil, fmt.Errorf("%w: %s line %d: duplicate id %s (first in %s)", ErrBadSuite, path, line, it.ID, prev)
		}
		seen[it.ID] = fmt.Sprintf("%s line %d", filepath.Base(path), line)
		out = append(out, it)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadSuite, path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s holds no items", ErrBadSuite, path)
	}
	return out, nil
}

// Write writes a suite folder (suite.json and one JSONL file per domain).
func Write(dir string, s *Suite) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("suite: %w", err)
	}
	meta, err := json.MarshalIndent(s.Meta, "", "  ")
	if err != nil {
		return fmt.Errorf("suite: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, File), append(meta, '\n'), 0o644); err != nil {
		return fmt.Errorf("suite: %w", err)
	}
	for _, d := range s.Domains {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		for _, it := range s.Items[d] {
			if err := enc.Encode(it); err != nil {
				return fmt.Errorf("suite: %w", err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, d+".jsonl"), b.Bytes(), 0o644); err != nil {
			return fmt.Errorf("suite: %w", err)
		}
	}
	return nil
}

// Sorted returns the suite's domains sorted.
func (s *Suite) Sorted() []string { return slices.Sorted(slices.Values(s.Domains)) }

var _ = io.EOF
