package query

import (
	"fmt"
	"strings"

	"github.com/lowbarena/lowbarena/events/reason"
)

// MaxStatementBytes bounds a statement's text.
const MaxStatementBytes = 64 << 10

// Kinds of statement Check lets through.
const (
	KindSelect   = "select"
	KindShow     = "show"
	KindDescribe = "describe"
	KindExplain  = "explain"
)

// Statement is a statement Check found read-only: its kind and the text
// to run, rebuilt from its tokens without comments or a final semicolon.
type Statement struct {
	Kind string
	SQL  string
}

// externalFunctions name the functions (table functions, and file as a
// scalar function too) that read or write outside the store: files, URLs,
// other servers and databases, programs. Matching is by name, without
// regard to case, wherever a call to one appears, so a quoted name does
// not hide it. Beside these, every name that starts with a prefix of
// externalPrefixes is refused (the families ClickHouse keeps adding to:
// iceberg*, deltaLake*, s3*, ...). readonly = 1, under which every
// statement runs, refuses the table functions too; this list also stops
// the scalar file(), which readonly = 1 lets through on chDB
// (TestEngineRunsWhatCheckAccepts), and gives a sentence that says why.
var externalFunctions = map[string]bool{
	"file": true, "filecluster": true, "url": true, "urlcluster": true, "remote": true, "remotesecure": true,
	"cluster": true, "clusterallreplicas": true, "gcs": true, "oss": true, "cosn": true, "hive": true,
	"mysql": true, "postgresql": true, "mongodb": true, "redis": true, "sqlite": true, "odbc": true, "jdbc": true,
	"executable": true, "executablepool": true, "input": true, "ytsaurus": true, "prometheusquery": true,
}

var externalPrefixes = []string{"s3", "hdfs", "azureblob", "iceberg", "deltalake", "hudi", "paimon", "arrowflight"}

func external(name string) bool {
	n := strings.ToLower(name)
	if externalFunctions[n] {
		return true
	}
	for _, p := range externalPrefixes {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	return false
}

// explainKinds are the words that may follow EXPLAIN before the statement
// it explains.
var explainKinds = map[string]bool{"AST": true, "SYNTAX": true, "QUERY": true, "TREE": true, "PLAN": true, "PIPELINE": true, "ESTIMATE": true}

// Check decides whether sql is one read-only statement: SELECT (or WITH
// ... SELECT, in parentheses or not), SHOW, DESCRIBE (DESC) or EXPLAIN of
// a SELECT. It refuses, each with its own code:
//
//   - an empty statement, or one longer than MaxStatementBytes;
//   - text it cannot read: an unclosed string, quoted name or comment, a
//     character with no place in SQL (reason.SQLMalformed);
//   - more than one statement (reason.SQLManyStatements);
//   - any other statement (reason.SQLNotReadOnly);
//   - INTO OUTFILE, which writes a file, and which readonly = 1 does not
//     stop on chDB (reason.SQLIntoOutfile);
//   - a SETTINGS or FORMAT clause: the service sets the limits and the
//     output itself (reason.SQLClauseNotAllowed);
//   - a call to a function that reaches outside the store, such as file(),
//     url(), remote() or s3() (reason.SQLExternalFunction).
//
// Comments are dropped from the text that runs, so the engine's reading
// of a comment can never differ from Check's. Check reads the tokens of
// lex, which FuzzCheckAgreesWithEngine holds to the engine; lex's doc
// comment says what the two cost and save, measured.
func Check(sql string) (*Statement, error) {
	if len(sql) > MaxStatementBytes {
		return nil, refuse(reason.SQLTooLong, "the statement is %d bytes; the limit is %d", len(sql), MaxStatementBytes)
	}
	toks, err := lex(sql)
	if err != nil {
		return nil, err
	}
	// code are the tokens that are neither space nor comment.
	var code []int
	for i, t := range toks {
		if t.kind != tokSpace && t.kind != tokComment {
			code = append(code, i)
		}
	}
	// A final semicolon ends the statement; any other starts another.
	if n := len(code); n > 0 && toks[code[n-1]].text == ";" {
		toks = toks[:code[n-1]]
		code = code[:n-1]
	}
	if len(code) == 0 {
		return nil, refuse(reason.SQLEmpty, "there is no statement; write a SELECT, SHOW, DESCRIBE or EXPLAIN")
	}
	for _, i := range code {
		if toks[i].text == ";" {
			return nil, refuse(reason.SQLManyStatements, "the text holds more than one statement (a ';' at offset %d); send one at a time", toks[i].pos)
		}
	}
	at := func(k int) token { // the k-th code token, or a zero token
		if k >= 0 && k < len(code) {
			return toks[code[k]]
		}
		return token{}
	}
	kind, err := statementKind(at)
	if err != nil {
		return nil, err
	}
	for k, i := range code {
		t := toks[i]
		prev, next := at(k-1), at(k+1)
		qualified := k > 0 && prev.text == "."
		switch {
		case t.is("INTO") && !qualified:
			return nil, refuse(reason.SQLIntoOutfile, "INTO OUTFILE writes a file on the arena's machine; the answer comes back to you instead (use --csv, --tsv or --json)")
		case t.is("SETTINGS") && !qualified:
			return nil, refuse(reason.SQLClauseNotAllowed, "a SETTINGS clause is not taken: the arena runs every query under its own limits (--timeout and --max-rows set them)")
		case t.is("FORMAT") && !qualified && next.text != "(":
			return nil, refuse(reason.SQLClauseNotAllowed, "a FORMAT clause is not taken: choose the output with --json, --csv or --tsv")
		case (t.kind == tokWord || t.kind == tokQuoted) && next.text == "(" && !qualified && external(t.name()):
			return nil, refuse(reason.SQLExternalFunction, "%s() reads or writes outside the arena's store; only the store's own tables (and system tables) can be queried", t.name())
		}
	}
	var b strings.Builder
	for _, t := range toks {
		if t.kind == tokComment {
			b.WriteByte(' ')
			continue
		}
		b.WriteString(t.text)
	}
	return &Statement{Kind: kind, SQL: strings.TrimSpace(b.String())}, nil
}

// statementKind reads the statement's first words.
func statementKind(at func(int) token) (string, error) {
	k := 0
	for at(k).text == "(" {
		k++
	}
	first := at(k)
	switch {
	case first.is("SELECT") || first.is("WITH"):
		return KindSelect, nil
	case k > 0:
		return "", refuse(reason.SQLNotReadOnly, "only a SELECT may stand in parentheses here")
	case first.is("SHOW"):
		return KindShow, nil
	case first.is("DESCRIBE") || first.is("DESC"):
		return KindDescribe, nil
	case first.is("EXPLAIN"):
		k = 1
		for explainKinds[strings.ToUpper(at(k).text)] && at(k).kind == tokWord {
			k++
		}
		// EXPLAIN's own settings: name = value, ...
		for at(k).kind == tokWord && at(k+1).text == "=" {
			k += 3
			if at(k).text == "," {
				k++
			}
		}
		for at(k).text == "(" {
			k++
		}
		if !at(k).is("SELECT") && !at(k).is("WITH") {
			return "", refuse(reason.SQLNotReadOnly, "EXPLAIN is taken for a SELECT only, not for %s", describe(at(k)))
		}
		return KindExplain, nil
	}
	return "", refuse(reason.SQLNotReadOnly, "%s is not read-only: only SELECT, SHOW, DESCRIBE and EXPLAIN run here (the store is the arena's record, written by its services)", describe(first))
}

// describe names a token for a sentence.
func describe(t token) string {
	if t.text == "" {
		return "nothing"
	}
	if t.kind == tokWord {
		return strings.ToUpper(t.text)
	}
	return fmt.Sprintf("%q", t.text)
}
