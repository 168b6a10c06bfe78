package query

import (
	"strings"
)

// tokenKind is what a token is.
type tokenKind int

const (
	tokWord    tokenKind = iota // an identifier or keyword, bare
	tokQuoted                   // an identifier in "..." or `...`
	tokString                   // a string literal, '...' or $tag$...$tag$
	tokNumber                   // a number
	tokOp                       // punctuation and operators
	tokSpace                    // whitespace
	tokComment                  // -- ..., # ..., /* ... */
)

// token is one lexeme of a statement, with its text as written.
type token struct {
	kind tokenKind
	text string
	pos  int // byte offset in the statement
}

// name is the token's identifier as ClickHouse reads it, unquoted (for a
// quoted identifier, the raw text between the quotes, escapes left as
// they are: enough to compare against plain names).
func (t token) name() string {
	if t.kind == tokQuoted && len(t.text) >= 2 {
		return t.text[1 : len(t.text)-1]
	}
	return t.text
}

// is reports whether the token is the bare keyword kw (any case).
func (t token) is(kw string) bool { return t.kind == tokWord && strings.EqualFold(t.text, kw) }

// lex splits a statement into tokens the way ClickHouse's lexer does:
// quoted strings and identifiers end at an unescaped quote (a backslash
// escapes the next byte, a doubled quote is one quote), heredocs
// ($tag$...$tag$) end at their tag, block comments nest, "--" and "#"
// comments end at a line's end. Anything it cannot place is malformed, so
// that nothing the checks do not see can reach the engine: the statement
// run is rebuilt from these tokens (see Statement.SQL).
//
// What it is for: Check reads tokens, not text, so a keyword or a
// function name in a string, a quoted name or a comment is not mistaken
// for one, and one hidden there is not missed. It is hand-written because
// no Go ClickHouse lexer is in the module graph; FuzzCheckAgreesWithEngine
// holds it to the engine itself (chDB's EXPLAIN AST). What it saves,
// measured (BenchmarkCheckVsEngine, docs/operators/sql.md's 252-byte leaderboard
// query, 2 shared cores, 2026-12-06): Check takes 4-8 µs and 18 allocs,
// running the statement on chDB 2.3-5.8 ms, and chDB's own refusal of a
// write 1.7-4.0 ms; so a refusal here spares the engine a round trip and
// a slot, for well under 1% of an accepted query's time. More than time,
// it guards what readonly = 1 does not: chDB under readonly = 1 still
// runs the scalar file(), which reads any file the process can, and
// INTO OUTFILE, which writes one (TestEngineRunsWhatCheckAccepts).
func lex(s string) ([]token, error) { //nolint:gocyclo // a hand-written SQL lexer, one case per token class; every byte must be placed (see the doc comment)
	var out []token
	i := 0
	emit := func(k tokenKind, end int) {
		out = append(out, token{kind: k, text: s[i:end], pos: i})
		i = end
	}
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			j := i
			for j < len(s) && strings.IndexByte(" \t\n\r\f\v", s[j]) >= 0 {
				j++
			}
			emit(tokSpace, j)
		case c == '-' && strings.HasPrefix(s[i:], "--"), c == '#':
			j := strings.IndexByte(s[i:], '\n')
			if j < 0 {
				j = len(s) - i
			}
			emit(tokComment, i+j)
		case c == '/' && strings.HasPrefix(s[i:], "/*"):
			depth, j := 0, i
			for j < len(s) {
				if strings.HasPrefix(s[j:], "/*") {
					depth++
					j += 2
				} else if strings.HasPrefix(s[j:], "*/") {
					depth--
					j += 2
					if depth == 0 {
						break
					}
				} else {
					j++
				}
			}
			if depth != 0 {
				return nil, malformed(i, "a /* comment is not closed")
			}
			emit(tokComment, j)
		case c == '\'' || c == '"' || c == '`':
			j, ok := quoted(s, i)
			if !ok {
				what := "string"
				if c != '\'' {
					what = "quoted name"
				}
				return nil, malformed(i, "a %s that starts with %c is not closed", what, c)
			}
			k := tokString
			if c != '\'' {
				k = tokQuoted
			}
			emit(k, j)
		case c == '$':
			j, ok := heredoc(s, i)
			if !ok {
				return nil, malformed(i, "a $ that does not start a closed $tag$...$tag$ string")
			}
			emit(tokString, j)
		case isDigit(c) || (c == '.' && i+1 < len(s) && isDigit(s[i+1])):
			emit(tokNumber, number(s, i))
		case isWordStart(c):
			j := i + 1
			for j < len(s) && (isWordStart(s[j]) || isDigit(s[j]) || s[j] == '$') {
				j++
			}
			emit(tokWord, j)
		case strings.IndexByte("()[]{},;.+-*/%=<>!|&:?^~@", c) >= 0:
			emit(tokOp, operator(s, i))
		default:
			if c >= 0x80 {
				return nil, malformed(i, "a character outside a string or quoted name: quote names that are not ASCII")
			}
			return nil, malformed(i, "the character %q has no place here", c)
		}
	}
	return out, nil
}

// quoted returns the end of the quoted string or name that starts at i.
func quoted(s string, i int) (int, bool) {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case q:
			if j+1 < len(s) && s[j+1] == q {
				j++
				continue
			}
			return j + 1, true
		}
	}
	return 0, false
}

// heredoc returns the end of the $tag$...$tag$ string that starts at i.
func heredoc(s string, i int) (int, bool) {
	j := i + 1
	for j < len(s) && (isWordStart(s[j]) || isDigit(s[j])) {
		j++
	}
	if j >= len(s) || s[j] != '$' {
		return 0, false
	}
	tag := s[i : j+1]
	k := strings.Index(s[j+1:], tag)
	if k < 0 {
		return 0, false
	}
	return j + 1 + k + len(tag), true
}

// number returns the end of the number that starts at i: decimal with
// an optional fraction and exponent, or 0x / 0b literals.
func number(s string, i int) int {
	j := i
	if strings.HasPrefix(s[i:], "0x") || strings.HasPrefix(s[i:], "0X") || strings.HasPrefix(s[i:], "0b") || strings.HasPrefix(s[i:], "0B") {
		j += 2
	}
	for j < len(s) {
		c := s[j]
		switch {
		case isDigit(c) || isWordStart(c) || c == '.':
			j++
		case (c == '+' || c == '-') && (s[j-1] == 'e' || s[j-1] == 'E' || s[j-1] == 'p' || s[j-1] == 'P'):
			j++
		default:
			return j
		}
	}
	return j
}

// operator returns the end of the operator that starts at i.
func operator(s string, i int) int {
	for _, op := range []string{"<=>", "->", "<=", ">=", "!=", "<>", "==", "||", "::"} {
		if strings.HasPrefix(s[i:], op) {
			return i + len(op)
		}
	}
	return i + 1
}

func isDigit(c byte) bool     { return c >= '0' && c <= '9' }
func isWordStart(c byte) bool { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') }
