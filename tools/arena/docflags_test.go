package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// verbs are the arena's verbs (run's switch), each with the sub-verbs
// that have flag sets of their own.
var verbs = map[string][]string{
	"up": nil, "demo": nil, "example": nil, "submit": nil, "reference": nil,
	"participant": {"add", "token", "list", "revoke"}, "operator": {"add", "token", "list", "revoke"},
	"watch": nil, "show": nil, "pods": nil, "leaderboard": nil, "history": nil, "rescore": nil,
	"sql": nil, "round": {"start"}, "retention": nil, "campaign": {"push", "list", "history"}, "credentials": nil, "gpu-check": nil, "gc": nil,
}

// docFlag is a flag the documentation gives a verb, and where.
type docFlag struct {
	verb, flag, where string
}

var (
	// arenaCmd finds `arena VERB` (or arena-up's) in a command line.
	arenaCmd = regexp.MustCompile(`(?:^|[\s/(\x60"'=$])arena(?:-up)?\s+([a-z][a-z-]*)(?:\s+([a-z]+))?`)
	// longFlag finds --flag.
	longFlag = regexp.MustCompile(`(?:^|[\s\[(|\x60])--([a-z][a-z0-9-]*)`)
	// cmdEnd ends a command inside a line: a pipe, a list, a redirect.
	cmdEnd = regexp.MustCompile(`\s\|\s|;|&&|\s>\s|\s#\s`)
	// tableRule is the rule under a table's header row.
	tableRule = regexp.MustCompile(`^\s*\|\s*:?-{3,}`)
	// codeSpan is an inline code span.
	codeSpan = regexp.MustCompile("`([^`]+)`")
)

// flagsOfCommands returns the flags the commands in text give their
// verbs (text is one command line, or several commands in prose).
func flagsOfCommands(text, where string) []docFlag {
	var out []docFlag
	locs := arenaCmd.FindAllStringSubmatchIndex(text, -1)
	for i, loc := range locs {
		verb := text[loc[2]:loc[3]]
		subs, ok := verbs[verb]
		if !ok {
			continue
		}
		end := len(text)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		rest := text[loc[3]:end]
		if len(subs) > 0 {
			if loc[4] < 0 || !slices.Contains(subs, text[loc[4]:loc[5]]) {
				continue
			}
			verb += " " + text[loc[4]:loc[5]]
			rest = text[loc[5]:end]
		}
		if m := cmdEnd.FindStringIndex(rest); m != nil {
			rest = rest[:m[0]]
		}
		for _, f := range longFlag.FindAllStringSubmatch(rest, -1) {
			out = append(out, docFlag{verb: verb, flag: f[1], where: where})
		}
	}
	return out
}

// documentedFlags reads every `arena VERB ... --flag` of a markdown file:
// in its code blocks (lines continued with a backslash joined, comments
// dropped), in its inline code spans, and in its flag tables (a table
// whose first header names `arena VERB` lists that verb's flags in its
// first column; a table of verbs, whose first header is "verb", lists
// `VERB --flag` in its first column).
func documentedFlags(name, text string) []docFlag {
	var out []docFlag
	lines := strings.Split(text, "\n")
	inCode := false
	tableVerb := "" // the verb of the table being read, "*" for a table of verbs
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		where := name + ":" + strconv.Itoa(i+1)
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inCode = !inCode
			continue
		}
		if inCode {
			for strings.HasSuffix(line, `\`) && i+1 < len(lines) {
				i++
				line = strings.TrimSuffix(line, `\`) + " " + lines[i]
			}
			out = append(out, flagsOfCommands(line, where)...)
			continue
		}
		trimmed := strings.TrimSpace(line)
		if !strings.HasPrefix(trimmed, "|") {
			tableVerb = ""
		} else {
			cells := strings.Split(strings.Trim(trimmed, "|"), "|")
			first := strings.TrimSpace(cells[0])
			switch {
			case i+1 < len(lines) && tableRule.MatchString(lines[i+1]):
				// A header row.
				tableVerb = ""
				if strings.EqualFold(first, "verb") {
					tableVerb = "*"
				} else if strings.Contains(strings.ToLower(first), "flag") {
					for _, m := range codeSpan.FindAllStringSubmatch(first, -1) {
						if f := arenaCmd.FindStringSubmatch(m[1]); f != nil {
							if _, ok := verbs[f[1]]; ok {
								tableVerb = f[1]
							}
						}
					}
				}
			case tableVerb == "*":
				for _, m := range codeSpan.FindAllStringSubmatch(first, -1) {
					out = append(out, flagsOfCommands("arena "+m[1], where)...)
				}
			case tableVerb != "":
				for _, m := range codeSpan.FindAllStringSubmatch(first, -1) {
					for _, f := range longFlag.FindAllStringSubmatch(m[1], -1) {
						out = append(out, docFlag{verb: tableVerb, flag: f[1], where: where})
					}
				}
			}
		}
		for _, m := range codeSpan.FindAllStringSubmatch(line, -1) {
			out = append(out, flagsOfCommands(m[1], where)...)
		}
	}
	return out
}

// verbFlags is the flag set of verb ("participant add"), read from its
// -h output as the CLI prints it.
func verbFlags(t *testing.T, verb string) map[string]bool {
	t.Helper()
	r := arena(t, append(strings.Fields(verb), "-h")...)
	require.Equal(t, 0, r.code, "arena %s -h: %s", verb, r.stderr)
	set := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  -([A-Za-z0-9][A-Za-z0-9_.-]*)`).FindAllStringSubmatch(r.stderr+r.stdout, -1) {
		set[m[1]] = true
	}
	require.NotEmpty(t, set, "arena %s -h lists no flag: %s", verb, r.stderr)
	return set
}

// TestDocumentedFlags: every flag the README, docs/**/*.md and the CLI's
// own usage give a verb of `arena` (in a command, an inline command or a
// flag table) is one that verb defines, so that no reader meets "flag
// provided but not defined".
func TestDocumentedFlags(t *testing.T) {
	root := filepath.Join("..", "..")
	var found []docFlag
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	found = append(found, documentedFlags("README.md", string(readme))...)
	require.NoError(t, filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".md") {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		found = append(found, documentedFlags(filepath.ToSlash(rel), string(data))...)
		return nil
	}))
	found = append(found, documentedFlags("the CLI's usage", "```\n"+usage+"```\n")...)
	byVerb := map[string][]docFlag{}
	for _, f := range found {
		byVerb[f.verb] = append(byVerb[f.verb], f)
	}
	require.Contains(t, byVerb, "up", "the reader finds arena up's documented flags")
	require.Contains(t, byVerb, "submit")
	var names []string
	for v := range byVerb {
		names = append(names, v)
	}
	sort.Strings(names)
	t.Logf("%d documented flags of %d verbs: %v", len(found), len(names), names)
	var wrong []string
	for _, v := range names {
		defined := verbFlags(t, v)
		for _, f := range byVerb[v] {
			if !defined[f.flag] {
				wrong = append(wrong, f.where+": arena "+v+" --"+f.flag)
			}
		}
	}
	require.Empty(t, wrong, "documented flags the verb does not define")
}
