// Package suite is the arena's eval suites: a suite is a versioned folder
// of JSONL files, one per domain, each line an item; suites ship as
// deterministic generators (a seed, not a copied dataset), and the dev
// split and the held-out ranked split come from different seeds.
//
// A suite folder:
//
//	suite.json            {"name", "version", "split", "seed", "domains": [...]}
//	<domain>.jsonl        one Item per line
package suite

import "fmt"

// Domains are the six domains of the arena's records, in their order.
var Domains = []string{"code", "commonsense", "expert", "knowledge", "long_context", "math"}

// Grader names.
const (
	GraderExact   = "exact"
	GraderNumeric = "numeric"
	GraderChoice  = "choice"
	GraderRegex   = "regex"
	GraderCode    = "code"
)

// Message is one chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Item is one eval item.
type Item struct {
	// ID is unique within the suite.
	ID     string `json:"id"`
	Domain string `json:"domain"`
	// Prompt or Messages is what the model is asked (exactly one).
	Prompt   string    `json:"prompt,omitempty"`
	Messages []Message `json:"messages,omitempty"`
	// Answer is the reference answer: the text (exact), the number
	// (numeric), the letter (choice), unused for regex and code.
	Answer string `json:"answer"`
	// Grader names how an answer is scored.
	Grader string `json:"grader"`
	// Choices are the options of a multiple-choice item, lettered A, B, ...
	Choices []string `json:"choices,omitempty"`
	// Tolerance is the numeric grader's absolute tolerance.
	Tolerance float64 `json:"tolerance,omitempty"`
	// Pattern is the regex grader's expression; an answer matching it
	// scores 1.
	Pattern string `json:"pattern,omitempty"`
	// Tests is the code grader's Python test program, run after the
	// model's program in its namespace: each top-level assert is a check,
	// `assert <expression> == <literal>` (or !=, is None/True/False, or a
	// bare assert of True or False), that the grader judges by value and
	// type, outside the program's reach; other statements are set-up
	// (see adapters/sandbox.CodeGrader).
	Tests string `json:"tests,omitempty"`
	// Samples is how many generations the item gets (default 1); its
	// score is their mean.
	Samples int `json:"samples,omitempty"`
	// MaxTokens bounds each generation.
	MaxTokens int `json:"max_tokens,omitempty"`
}

// Chance is the score of a uniform guess: 1/len(Choices) for a
// multiple-choice item, 0 otherwise.
func (it Item) Chance() float64 {
	if it.Grader == GraderChoice && len(it.Choices) > 0 {
		return 1 / float64(len(it.Choices))
	}
	return 0
}

// Letter is the letter of choice i (0: "A").
func Letter(i int) string { return string(rune('A' + i)) }

// Validate reports what is wrong with an item, or nil.
func (it Item) Validate() error {
	switch {
	case it.ID == "":
		return fmt.Errorf("item has no id")
	case (it.Prompt == "") == (len(it.Messages) == 0):
		return fmt.Errorf("item %s: needs exactly one of prompt and messages", it.ID)
	}
	switch it.Grader {
	case GraderExact, GraderNumeric:
		if it.Answer == "" {
			return fmt.Errorf("item %s: %s grader needs an answer", it.ID, it.Grader)
		}
	case GraderChoice:
		if len(it.Choices) < 2 {
			return fmt.Errorf("item %s: choice grader needs at least two choices", it.ID)
		}
		if len(it.Answer) != 1 || it.Answer[0] < 'A' || int(it.Answer[0]-'A') >= len(it.Choices) {
			return fmt.Errorf("item %s: answer %q is not the letter of one of its %d choices", it.ID, it.Answer, len(it.Choices))
		}
	case GraderRegex:
		if it.Pattern == "" {
			return fmt.Errorf("item %s: regex grader needs a pattern", it.ID)
		}
	case GraderCode:
		if it.Tests == "" {
			return fmt.Errorf("item %s: code grader needs tests", it.ID)
		}
	default:
		return fmt.Errorf("item %s: unknown grader %q (exact, numeric, choice, regex, code)", it.ID, it.Grader)
	}
	if it.Samples < 0 || it.MaxTokens < 0 {
		return fmt.Errorf("item %s: samples and max_tokens must not be negative", it.ID)
	}
	return nil
}
