// Package campaign loads the campaigns an arena runs: for each task, the
// source model the submissions are checked against (its config.json and
// the index of its BF16 tensors, no weights) and the campaign's policy.
//
// A campaign is a folder:
//
//	<task_id>/campaign.json   {"task_id", "name", "family", "policy": {"allow_sparse", "foreign_share_limit"}}
//	<task_id>/config.json     the source model's config.json
//	<task_id>/tensors.json    {"tensors": {"name": {"dtype", "shape"}}}
//	<task_id>/reference/      the BF16 reference checkpoint (config.json,
//	                          *.safetensors) the efficiency stage measures
//	                          every submission beside, when the campaign
//	                          has an "engine"
//
// campaign.json may also say how the campaign serves checkpoints:
// "engine": {"command", "max_num_seqs"} (the operator's command template:
// a submission never chooses what runs), "efficiency": {"requests_per_slot",
// "max_tokens", "prompt_words", "long_prompt_words", "budget_factor"} and
// "reference" (the folder above, relative to the campaign's).
//
// and a folder of campaigns holds one such folder per task.
package campaign

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lowbarena/lowbarena/domain/analyze"
	"github.com/lowbarena/lowbarena/domain/record"
)

// Files of a campaign folder.
const (
	File        = "campaign.json"
	ConfigFile  = "config.json"
	TensorsFile = "tensors.json"
)

// maxFileBytes bounds campaign.json and config.json.
const maxFileBytes = 4 << 20

// ErrUnknownTask is returned by Lookup for a task no campaign runs.
var ErrUnknownTask = errors.New("campaign: no campaign runs this task")

// Campaign is one task of the arena.
type Campaign struct {
	// TaskID is the id submissions name in submission.json.
	TaskID string `json:"task_id"`
	// Name is for people.
	Name string `json:"name"`
	// Family is the model family ("qwen3").
	Family string `json:"family,omitempty"`
	// Policy is what the campaign allows.
	Policy Policy `json:"policy"`

	// Engine is how the campaign serves checkpoints; nil when it measures
	// no efficiency.
	Engine *EngineSpec `json:"engine,omitempty"`
	// Efficiency sizes the efficiency stage's workloads.
	Efficiency Efficiency `json:"efficiency"`
	// Reference is the BF16 reference checkpoint's folder, relative to the
	// campaign folder; default "reference".
	Reference string `json:"reference,omitempty"`
	// Quality is the quality stage's suite and sampling; nil when the
	// campaign measures no quality.
	Quality *Quality `json:"quality,omitempty"`

	// Source is the source model, read from config.json and tensors.json.
	Source analyze.Source `json:"-"`
	// Dir is the campaign folder.
	Dir string `json:"-"`
}

// Efficiency sizes the efficiency stage.
type Efficiency struct {
	WorkloadSpec
	// BudgetFactor is the budget replay's allowance over the measured
	// peak; default 1.02.
	BudgetFactor float64 `json:"budget_factor,omitempty"`
}

// Quality is the campaign's eval suite and its fixed sampling settings.
type Quality struct {
	// Suite is the dev suite folder, relative to the campaign folder;
	// RankedSuite the held-out ranked one ("" when the campaign ranks
	// nothing yet).
	Suite       string   `json:"suite"`
	RankedSuite string   `json:"ranked_suite,omitempty"`
	Sampling    Sampling `json:"sampling"`
}

// SuiteDir is the absolute folder of the quality suite.
func (c *Campaign) SuiteDir() string {
	if c.Quality == nil {
		return ""
	}
	return filepath.Join(c.Dir, c.Quality.Suite)
}

// RankedSuiteDir is the absolute folder of the ranked suite, or "".
func (c *Campaign) RankedSuiteDir() string {
	if c.Quality == nil || c.Quality.RankedSuite == "" {
		return ""
	}
	return filepath.Join(c.Dir, c.Quality.RankedSuite)
}

// ReferenceDir is the absolute folder of the BF16 reference checkpoint.
func (c *Campaign) ReferenceDir() string {
	ref := c.Reference
	if ref == "" {
		ref = "reference"
	}
	return filepath.Join(c.Dir, ref)
}

// EngineSourceDir is the absolute folder of the pinned engine source
// (engine.source.dir), or "" for a campaign that pins none or names a
// folder outside its own (which the build stage refuses to check
// patches against, see domain/enginepatch.ForCampaign).
func (c *Campaign) EngineSourceDir() string {
	if c.Engine == nil || c.Engine.Source == nil || !filepath.IsLocal(filepath.FromSlash(c.Engine.Source.Dir)) {
		return ""
	}
	return filepath.Join(c.Dir, filepath.FromSlash(c.Engine.Source.Dir))
}

// ErrNoReference is a campaign whose BF16 reference folder is missing or
// holds no weights.
var ErrNoReference = errors.New("no BF16 reference checkpoint")

// CheckReference reports, wrapping ErrNoReference, a campaign whose BF16
// reference folder (ReferenceDir) is missing or holds no *.safetensors;
// its message is a sentence for the participant and the operator. It
// only reads the folder: every stage that stores the reference (quality,
// efficiency, round) calls it first and refuses with
// campaign_no_reference, so nothing is stored for a folder without
// weights.
func (c *Campaign) CheckReference() error {
	dir := c.ReferenceDir()
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("campaign %s has %w: the folder %s does not exist", c.TaskID, ErrNoReference, dir)
	}
	// Glob fails only on a malformed pattern, which this one is not.
	w, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if len(w) == 0 {
		return fmt.Errorf("campaign %s has %w: no *.safetensors in %s", c.TaskID, ErrNoReference, dir)
	}
	return nil
}

// Policy is the campaign's contract policy.
type Policy struct {
	AllowSparse       bool    `json:"allow_sparse"`
	ForeignShareLimit float64 `json:"foreign_share_limit,omitempty"`
}

// Analyze returns the policy in the analyzer's terms.
func (p Policy) Analyze() analyze.Policy {
	return analyze.Policy{AllowSparse: p.AllowSparse, ForeignShareLimit: p.ForeignShareLimit}
}

// Load reads one campaign folder.
func Load(dir string) (*Campaign, error) {
	meta, err := readBounded(filepath.Join(dir, File), maxFileBytes)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(meta))
	dec.DisallowUnknownFields()
	var c Campaign
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("campaign: %s: %w", filepath.Join(dir, File), err)
	}
	if !record.ValidID(c.TaskID) {
		return nil, fmt.Errorf("campaign: %s: task_id %q must be 1-128 letters, digits, '-' or '_'", filepath.Join(dir, File), c.TaskID)
	}
	if l := c.Policy.ForeignShareLimit; l < 0 || l >= 1 {
		return nil, fmt.Errorf("campaign: %s: policy.foreign_share_limit %v must be in [0, 1)", filepath.Join(dir, File), l)
	}
	if c.Engine != nil && strings.TrimSpace(c.Engine.Command) == "" {
		return nil, fmt.Errorf("campaign: %s: engine.command is empty", filepath.Join(dir, File))
	}
	if c.Reference != "" && (filepath.IsAbs(c.Reference) || !filepath.IsLocal(c.Reference)) {
		return nil, fmt.Errorf("campaign: %s: reference %q must be a folder inside the campaign's", filepath.Join(dir, File), c.Reference)
	}
	if q := c.Quality; q != nil && (q.Suite == "" || !filepath.IsLocal(q.Suite) || (q.RankedSuite != "" && !filepath.IsLocal(q.RankedSuite))) {
		return nil, fmt.Errorf("campaign: %s: quality.suite %q and quality.ranked_suite %q must be folders inside the campaign's", filepath.Join(dir, File), q.Suite, q.RankedSuite)
	}
	if c.Efficiency.BudgetFactor == 0 {
		c.Efficiency.BudgetFactor = 1.02
	}
	if f := c.Efficiency.BudgetFactor; f < 1 || f > 2 {
		return nil, fmt.Errorf("campaign: %s: efficiency.budget_factor %v must be in [1, 2]", filepath.Join(dir, File), f)
	}
	if c.Dir, err = filepath.Abs(dir); err != nil {
		return nil, fmt.Errorf("campaign: %w", err)
	}
	if c.Source.Config, err = readBounded(filepath.Join(dir, ConfigFile), maxFileBytes); err != nil {
		return nil, err
	}
	if !json.Valid(c.Source.Config) {
		return nil, fmt.Errorf("campaign: %s is not valid JSON", filepath.Join(dir, ConfigFile))
	}
	idx, err := readBounded(filepath.Join(dir, TensorsFile), analyze.MaxTensorIndexSize)
	if err != nil {
		return nil, err
	}
	if c.Source.Tensors, err = analyze.ParseTensorIndex(idx); err != nil {
		return nil, fmt.Errorf("campaign: %s: %w", filepath.Join(dir, TensorsFile), err)
	}
	return &c, nil
}

// Source is where a service finds the campaigns the arena runs now: a
// Set loaded once from a folder, or a live holder that follows the
// campaigns bucket and swaps in each new version as it is pushed. A
// service asks it at the moment it needs a campaign, so what it gets is
// the version current then.
type Source interface {
	// Lookup returns the campaign of a task, or an error wrapping
	// ErrUnknownTask.
	Lookup(taskID string) (*Campaign, error)
	// Tasks returns the task ids, sorted.
	Tasks() []string
}

// Set is the campaigns of an arena, by task id. It is a Source whose
// campaigns never change.
type Set map[string]*Campaign

var _ Source = Set(nil)

// LoadDir loads every campaign folder under dir (each sub-folder holding a
// campaign.json). Two campaigns with one task id are an error.
func LoadDir(dir string) (Set, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("campaign: read campaigns folder: %w", err)
	}
	set := Set{}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		sub := filepath.Join(dir, e.Name())
		if _, err := os.Stat(filepath.Join(sub, File)); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		c, err := Load(sub)
		if err != nil {
			return nil, err
		}
		if _, dup := set[c.TaskID]; dup {
			return nil, fmt.Errorf("campaign: two campaigns run task %s (one in %s)", c.TaskID, sub)
		}
		set[c.TaskID] = c
	}
	if len(set) == 0 {
		return nil, fmt.Errorf("campaign: %s holds no campaign (a folder with %s)", dir, File)
	}
	return set, nil
}

// Lookup returns the campaign of a task, or an error wrapping
// ErrUnknownTask that lists the tasks there are.
func (s Set) Lookup(taskID string) (*Campaign, error) {
	if c, ok := s[taskID]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("%w: %q (this arena runs %s)", ErrUnknownTask, taskID, strings.Join(s.Tasks(), ", "))
}

// Tasks returns the task ids, sorted.
func (s Set) Tasks() []string {
	out := make([]string, 0, len(s))
	for k := range s {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("campaign: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("campaign: %w", err)
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("campaign: %s is %d bytes, over the limit of %d", path, st.Size(), limit)
	}
	data := make([]byte, st.Size())
	if _, err := f.ReadAt(data, 0); err != nil && st.Size() > 0 {
		return nil, fmt.Errorf("campaign: read %s: %w", path, err)
	}
	return data, nil
}
