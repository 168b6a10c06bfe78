package query_test

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/store/query"
)

func TestCheckAccepts(t *testing.T) {
	cases := []struct {
		name, sql, kind, run string
	}{
		{"select", "SELECT 1", query.KindSelect, "SELECT 1"},
		{"lower case, final semicolon and spaces", "  select count() from scores final ;  ", query.KindSelect, "select count() from scores final"},
		{"with", "WITH 2 AS x SELECT x * 3", query.KindSelect, "WITH 2 AS x SELECT x * 3"},
		{"in parentheses, union", "(SELECT 1) UNION ALL (SELECT 2)", query.KindSelect, "(SELECT 1) UNION ALL (SELECT 2)"},
		{"comments are dropped", "-- the leaderboard\nSELECT 1 /* a /* nested */ comment */ + 1 # end", query.KindSelect, "SELECT 1   + 1"},
		{"a semicolon in a string or comment", "SELECT ';', 'a;b' -- ; DROP TABLE scores", query.KindSelect, "SELECT ';', 'a;b'"},
		{"quotes and escapes", `SELECT 'it''s', 'a\'b', "col", ` + "`x``y`", query.KindSelect, `SELECT 'it''s', 'a\'b', "col", ` + "`x``y`"},
		{"heredoc", "SELECT $$it's; -- not a comment$$ AS s", query.KindSelect, "SELECT $$it's; -- not a comment$$ AS s"},
		{"format() the function", "SELECT format('{}-{}', 1, 2)", query.KindSelect, "SELECT format('{}-{}', 1, 2)"},
		{"system tables named like clauses", "SELECT name FROM system.settings WHERE name = 'into'", query.KindSelect, "SELECT name FROM system.settings WHERE name = 'into'"},
		{"a table function inside the store", "SELECT number FROM numbers(3)", query.KindSelect, "SELECT number FROM numbers(3)"},
		{"a URL function that reads a string", "SELECT URLHierarchy('https://a/b')", query.KindSelect, "SELECT URLHierarchy('https://a/b')"},
		{"lambda and operators", "SELECT arrayMap(x -> x * 2, [1, 2]) AS a, 1 <=> 2, 2 >= 1, 1 != 2, 'a' || 'b'", query.KindSelect, ""},
		{"numbers", "SELECT 1.5e-3, .5, 0x1F, 0b101, 1e+10", query.KindSelect, ""},
		{"show", "SHOW TABLES", query.KindShow, "SHOW TABLES"},
		{"show create", "SHOW CREATE TABLE scores", query.KindShow, ""},
		{"describe", "DESCRIBE TABLE scores", query.KindDescribe, ""},
		{"desc", "desc scores", query.KindDescribe, ""},
		{"explain", "EXPLAIN SELECT 1", query.KindExplain, ""},
		{"explain plan with its settings", "EXPLAIN PLAN header = 1, actions = 1 SELECT count() FROM scores", query.KindExplain, ""},
		{"explain query tree", "EXPLAIN QUERY TREE (SELECT 1)", query.KindExplain, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, err := query.Check(tc.sql)
			require.NoError(t, err)
			require.Equal(t, tc.kind, st.Kind)
			if tc.run != "" {
				require.Equal(t, tc.run, st.SQL)
			}
			if !strings.Contains(tc.sql, "$$") {
				require.NotContains(t, st.SQL, "--")
				require.NotContains(t, st.SQL, "/*")
			}
		})
	}
}

func TestCheckRefuses(t *testing.T) {
	cases := []struct {
		name, sql string
		code      reason.Code
		says      string
	}{
		{"empty", "", reason.SQLEmpty, "no statement"},
		{"only a comment and a semicolon", "-- nothing\n ;", reason.SQLEmpty, "no statement"},
		{"too long", "SELECT '" + strings.Repeat("x", query.MaxStatementBytes) + "'", reason.SQLTooLong, "limit"},
		{"unclosed string", "SELECT 'abc", reason.SQLMalformed, "offset 7"},
		{"string closed only by an escaped quote", `SELECT 'abc\'`, reason.SQLMalformed, "not closed"},
		{"unclosed quoted name", `SELECT "abc`, reason.SQLMalformed, "quoted name"},
		{"unclosed comment", "SELECT 1 /* a /* b */", reason.SQLMalformed, "comment"},
		{"unclosed heredoc", "SELECT $x$abc", reason.SQLMalformed, "$"},
		{"a stray backslash", `SELECT 1 \ 2`, reason.SQLMalformed, `'\\'`},
		{"a non-ASCII name", "SELECT 1 AS é", reason.SQLMalformed, "quote names"},
		{"two statements", "SELECT 1; SELECT 2", reason.SQLManyStatements, "more than one"},
		{"a statement hidden after a semicolon", "SELECT 1; DROP TABLE scores", reason.SQLManyStatements, "more than one"},
		{"two semicolons", "SELECT 1;;", reason.SQLManyStatements, "more than one"},
		{"insert", "INSERT INTO scores VALUES (1)", reason.SQLNotReadOnly, "INSERT is not read-only"},
		{"drop", "drop table scores", reason.SQLNotReadOnly, "DROP is not read-only"},
		{"alter", "ALTER TABLE scores DELETE WHERE 1", reason.SQLNotReadOnly, "ALTER"},
		{"create", "CREATE TABLE x (a UInt8) ENGINE = Memory", reason.SQLNotReadOnly, "CREATE"},
		{"truncate", "TRUNCATE TABLE scores", reason.SQLNotReadOnly, "TRUNCATE"},
		{"set", "SET readonly = 0", reason.SQLNotReadOnly, "SET"},
		{"system", "SYSTEM FLUSH LOGS", reason.SQLNotReadOnly, "SYSTEM"},
		{"optimize", "OPTIMIZE TABLE scores FINAL", reason.SQLNotReadOnly, "OPTIMIZE"},
		{"kill", "KILL QUERY WHERE 1", reason.SQLNotReadOnly, "KILL"},
		{"use", "USE system", reason.SQLNotReadOnly, "USE"},
		{"a comment hides nothing", "/* SELECT */ DELETE FROM scores WHERE 1", reason.SQLNotReadOnly, "DELETE"},
		{"a keyword in quotes is a name, not SELECT", `"SELECT" 1`, reason.SQLNotReadOnly, "not read-only"},
		{"parentheses around a write", "(INSERT INTO scores VALUES (1))", reason.SQLNotReadOnly, "parentheses"},
		{"explain of an insert", "EXPLAIN AST INSERT INTO scores VALUES (1)", reason.SQLNotReadOnly, "EXPLAIN is taken for a SELECT only, not for INSERT"},
		{"explain of nothing", "EXPLAIN", reason.SQLNotReadOnly, "nothing"},
		{"into outfile", "SELECT * FROM scores INTO OUTFILE '/tmp/x.csv'", reason.SQLIntoOutfile, "writes a file"},
		{"show into outfile", "SHOW TABLES INTO OUTFILE 'x'", reason.SQLIntoOutfile, "writes a file"},
		{"settings clause", "SELECT 1 SETTINGS readonly = 0", reason.SQLClauseNotAllowed, "SETTINGS"},
		{"settings in a subquery", "SELECT * FROM (SELECT 1 SETTINGS max_execution_time = 0)", reason.SQLClauseNotAllowed, "SETTINGS"},
		{"format clause", "SELECT 1 FORMAT JSON", reason.SQLClauseNotAllowed, "--json"},
		{"file()", "SELECT * FROM file('/etc/passwd', 'LineAsString')", reason.SQLExternalFunction, "file() reads or writes outside"},
		{"file() the scalar", "SELECT file('/etc/hostname')", reason.SQLExternalFunction, "file()"},
		{"quoted file()", "SELECT * FROM `file`('/etc/passwd', 'LineAsString')", reason.SQLExternalFunction, "file()"},
		{"url()", "SELECT * FROM url('http://169.254.169.254/', CSV, 'a String')", reason.SQLExternalFunction, "url()"},
		{"URL() in capitals", "SELECT * FROM URL('http://x/', CSV, 'a String')", reason.SQLExternalFunction, "URL()"},
		{"remote()", "SELECT * FROM remote('10.0.0.1:9000', system.one)", reason.SQLExternalFunction, "remote()"},
		{"remoteSecure()", "SELECT * FROM remoteSecure('h', system.one)", reason.SQLExternalFunction, "remoteSecure()"},
		{"s3()", "SELECT * FROM s3('https://b/k', 'CSV')", reason.SQLExternalFunction, "s3()"},
		{"a new family member", "SELECT * FROM icebergS3Cluster('c', 'https://b/k')", reason.SQLExternalFunction, "icebergS3Cluster()"},
		{"mysql()", "SELECT * FROM mysql('h:3306', 'db', 't', 'u', 'p')", reason.SQLExternalFunction, "mysql()"},
		{"executable()", "SELECT * FROM executable('x.sh', TSV, 'a String')", reason.SQLExternalFunction, "executable()"},
		{"describe file()", "DESCRIBE file('/etc/passwd')", reason.SQLExternalFunction, "file()"},
		{"in a subquery of a join", "SELECT * FROM scores AS s JOIN (SELECT * FROM url('http://x', CSV, 'a String')) AS u ON 1", reason.SQLExternalFunction, "url()"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := query.Check(tc.sql)
			require.Error(t, err)
			var qe *query.Error
			require.True(t, errors.As(err, &qe), "a refusal: %v", err)
			require.Equal(t, tc.code, qe.Code, qe.Message)
			require.Contains(t, qe.Message, tc.says)
			require.Contains(t, query.Codes(), qe.Code)
		})
	}
}

// TestCheckDocsExamples checks every SQL statement that the operators'
// page on SQL (docs/operators/sql.md) shows: each is read-only and
// passes. (The end-to-end test runs them through `arena sql` against a
// live arena.)
func TestCheckDocsExamples(t *testing.T) {
	stmts := DocStatements(t, filepath.Join("..", "..", "..", "docs", "operators", "sql.md"))
	require.GreaterOrEqual(t, len(stmts), 5, "docs/operators/sql.md shows SQL")
	for _, s := range stmts {
		_, err := query.Check(s)
		require.NoError(t, err, "%s", s)
	}
}

// DocStatements returns the statements of every ```sql block of the
// Markdown page at path, one per statement, comments kept.
func DocStatements(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []string
	var cur strings.Builder
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !in && strings.TrimSpace(line) == "```sql":
			in = true
		case in && strings.TrimSpace(line) == "```":
			in = false
			if strings.TrimSpace(cur.String()) != "" {
				out = append(out, cur.String())
			}
			cur.Reset()
		case in:
			cur.WriteString(line + "\n")
			if strings.HasSuffix(strings.TrimSpace(line), ";") {
				out = append(out, cur.String())
				cur.Reset()
			}
		}
	}
	require.NoError(t, sc.Err())
	return out
}

func TestCodesAreDistinct(t *testing.T) {
	seen := map[reason.Code]bool{}
	for _, c := range query.Codes() {
		require.False(t, seen[c], c)
		require.Regexp(t, `^sql_[a-z_]+$`, c)
		seen[c] = true
	}
}
