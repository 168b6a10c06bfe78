package query

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/store"
	_ "github.com/lowbarena/lowbarena/platform/store/chdb"
)

// checkSeeds are statements from check_test.go's tables, accepted and
// refused, that seed FuzzCheckAgreesWithEngine.
var checkSeeds = []string{
	"SELECT 1", "  select count() from scores final ;  ", "WITH 2 AS x SELECT x * 3", "(SELECT 1) UNION ALL (SELECT 2)",
	"-- the leaderboard\nSELECT 1 /* a /* nested */ comment */ + 1 # end", "SELECT ';', 'a;b' -- ; DROP TABLE scores",
	`SELECT 'it''s', 'a\'b', "col", ` + "`x``y`", "SELECT $$it's; -- not a comment$$ AS s", "SELECT format('{}-{}', 1, 2)",
	"SELECT name FROM system.settings WHERE name = 'into'", "SELECT number FROM numbers(3)", "SELECT URLHierarchy('https://a/b')",
	"SELECT arrayMap(x -> x * 2, [1, 2]) AS a, 1 <=> 2, 2 >= 1, 1 != 2, 'a' || 'b'", "SELECT 1.5e-3, .5, 0x1F, 0b101, 1e+10",
	"SHOW TABLES", "SHOW CREATE TABLE scores", "DESCRIBE TABLE scores", "desc scores", "EXPLAIN SELECT 1",
	"EXPLAIN PLAN header = 1, actions = 1 SELECT count() FROM scores", "EXPLAIN QUERY TREE (SELECT 1)",
	"SELECT 'abc", `SELECT 'abc\'`, "SELECT 1 /* a /* b */", "SELECT $x$abc", `SELECT 1 \ 2`, "SELECT 1; DROP TABLE scores",
	"INSERT INTO scores VALUES (1)", "/* SELECT */ DELETE FROM scores WHERE 1", `"SELECT" 1`, "(INSERT INTO scores VALUES (1))",
	"EXPLAIN AST INSERT INTO scores VALUES (1)", "SELECT * FROM scores INTO OUTFILE '/tmp/x.csv'", "SELECT 1 SETTINGS readonly = 0",
	"SELECT * FROM (SELECT 1 SETTINGS max_execution_time = 0)", "SELECT 1 FORMAT JSON", "SELECT * FROM `file`('/etc/passwd', 'LineAsString')",
	"SELECT * FROM url('http://x/', CSV, 'a String')", "SELECT * FROM icebergS3Cluster('c', 'https://b/k')",
	"SELECT * FROM scores AS s JOIN (SELECT * FROM url('http://x', CSV, 'a String')) AS u ON 1",
}

// openEngine opens the embedded store (chDB) in dir: the engine Check
// shadows.
func openEngine(t testing.TB, dir string) store.Tabler {
	t.Helper()
	st, err := store.Open(context.Background(), "chdb://"+dir)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	tab, ok := st.(store.Tabler)
	require.True(t, ok)
	return tab
}

// engineLimits are those FuzzCheckAgreesWithEngine asks under: readonly,
// as the service runs every statement.
var engineLimits = store.Limits{MaxRows: 10000, MaxBytes: 1 << 20, MaxSeconds: 5, ReadOnly: true}

// engineCodeOf is ClickHouse's error code in an engine error, 0 if none.
func engineCodeOf(err error) int {
	if m := engineCode.FindStringSubmatch(err.Error()); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 0
}

// astRoot reads the kind of statement the engine parsed from the first
// line of EXPLAIN AST.
var astRoot = regexp.MustCompile(`^(SelectWithUnionQuery|Show\w*|SHOW [A-Z ]+query|DescribeQuery|Explain EXPLAIN)\b`)

func kindOfAST(root string) string {
	switch m := astRoot.FindString(root); {
	case m == "":
		return ""
	case m == "SelectWithUnionQuery":
		return KindSelect
	case m == "DescribeQuery":
		return KindDescribe
	case m == "Explain EXPLAIN":
		return KindExplain
	default:
		return KindShow
	}
}

// FuzzCheckAgreesWithEngine holds Check and its lexer to ClickHouse itself
// (chDB, the embedded store: no Go ClickHouse lexer is in the module
// graph). For any text, Check and lex do not panic, and when Check accepts
// a statement:
//
//   - lex is lossless on the input: its tokens' texts, in order, are the
//     input, each at its offset;
//   - Statement.SQL lexes to the same tokens as the input, spaces and
//     comments aside and the final semicolon dropped, and Check takes it
//     again as the same statement;
//   - the line the store appends (SETTINGS readonly = 1, ...) stays code
//     after Statement.SQL: no string, quoted name or comment swallows it;
//   - the engine, asked EXPLAIN AST of the statement as the store sends it
//     (readonly = 1 appended), does not refuse it as read-only-violating
//     (a SETTINGS clause that got past Check would be), and when it
//     parses it, it reads one statement of Check's kind, with the
//     appended settings as a settings clause (a Set node) and no FORMAT
//     or INTO OUTFILE clause on a SELECT.
//
// The engine is asked EXPLAIN AST, which parses and does not run, for
// every accepted input (about 1 ms each): running fuzzed statements would
// let a mutation ask for gigabytes or seconds. Running them, under
// readonly = 1, is left to TestEngineRunsWhatCheckAccepts on the seeds.
func FuzzCheckAgreesWithEngine(f *testing.F) {
	for _, s := range checkSeeds {
		f.Add(s)
	}
	eng := openEngine(f, f.TempDir())
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, sql string) {
		toks, lexErr := lex(sql)
		st, err := Check(sql)
		if lexErr == nil {
			var b strings.Builder
			for _, tk := range toks {
				require.Equal(t, b.Len(), tk.pos, "token %q", tk.text)
				require.NotEmpty(t, tk.text)
				b.WriteString(tk.text)
			}
			require.Equal(t, sql, b.String(), "lex is lossless")
		}
		if err != nil {
			var qe *Error
			require.True(t, errors.As(err, &qe), "a refusal: %v", err)
			return
		}
		require.NoError(t, lexErr)

		// The statement run is the statement checked.
		again, err := lex(st.SQL)
		require.NoError(t, err, "%q", st.SQL)
		want := codeTokens(toks)
		if n := len(want); n > 0 && want[n-1].text == ";" {
			want = want[:n-1]
		}
		require.Equal(t, texts(want), texts(codeTokens(again)), "rebuilt from %q", sql)
		st2, err := Check(st.SQL)
		require.NoError(t, err, "%q", st.SQL)
		require.Equal(t, *st, *st2)

		// What the store appends stays code.
		tail, err := lex(st.SQL + "\nSETTINGS readonly = 1")
		require.NoError(t, err)
		code := texts(codeTokens(tail))
		require.Equal(t, []string{"SETTINGS", "readonly", "=", "1"}, code[len(code)-4:], "%q", st.SQL)

		// The engine reads it as Check did.
		tb, err := eng.QueryTable(ctx, "EXPLAIN AST "+st.SQL, engineLimits)
		if err != nil {
			require.NotEqual(t, 164, engineCodeOf(err), "the engine found a write or a setting in %q: %v", st.SQL, err)
			return // the engine cannot parse or explain it: a refusal
		}
		var lines []string
		for _, r := range tb.Rows {
			var s string
			require.NoError(t, json.Unmarshal(r[0], &s))
			lines = append(lines, s)
		}
		require.NotEmpty(t, lines)
		outer := lines[0]
		if strings.HasPrefix(outer, "Explain EXPLAIN AST") && st.Kind != KindExplain {
			t.Fatalf("%q: the engine read an EXPLAIN AST of its own", st.SQL)
		}
		require.Equal(t, st.Kind, kindOfAST(outer), "%q: the engine read %q", st.SQL, outer)
		sawSet := false
		for i, l := range lines {
			body := strings.TrimLeft(l, " ")
			if body == "Set" {
				sawSet = true
			}
			if !strings.HasPrefix(body, "SelectWithUnionQuery") {
				continue
			}
			depth := len(l) - len(body)
			for _, c := range lines[i+1:] {
				cb := strings.TrimLeft(c, " ")
				if d := len(c) - len(cb); d <= depth {
					break
				} else if d == depth+1 && cb != "Set" && !strings.HasPrefix(cb, "ExpressionList") {
					t.Fatalf("%q: the engine read a clause Check did not see: %q", st.SQL, cb)
				}
			}
		}
		require.True(t, sawSet, "%q: the appended settings were not read as settings", st.SQL)
	})
}

func codeTokens(toks []token) []token {
	var out []token
	for _, t := range toks {
		if t.kind != tokSpace && t.kind != tokComment {
			out = append(out, t)
		}
	}
	return out
}

func texts(toks []token) []string {
	out := make([]string, len(toks))
	for i, t := range toks {
		out[i] = t.text
	}
	return out
}

// TestEngineRunsWhatCheckAccepts runs every seed Check accepts on the
// engine under readonly = 1, as the service does: the engine refuses none
// of them as a write or a setting. It also shows the division of labour:
// the scalar file() and INTO OUTFILE run under readonly = 1 and only
// Check refuses them;
// the table functions that need a grant readonly = 1 withholds (loop(),
// the format() table function, dictionary()) pass Check, which names only
// those that reach outside the store, and the engine refuses them.
func TestEngineRunsWhatCheckAccepts(t *testing.T) {
	eng := openEngine(t, t.TempDir())
	ctx := context.Background()
	n := 0
	for _, sql := range checkSeeds {
		st, err := Check(sql)
		if err != nil {
			continue
		}
		n++
		_, err = eng.QueryTable(ctx, st.SQL, store.Limits{MaxRows: 100, MaxBytes: 1 << 20, MaxSeconds: 5, ReadOnly: true})
		if err != nil {
			require.NotEqual(t, 164, engineCodeOf(err), "%q: %v", st.SQL, err)
		}
	}
	require.GreaterOrEqual(t, n, 20)
	// What only Check stops: under readonly = 1 the engine still runs the
	// scalar file(), which reads any file the process can.
	secret := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(secret, []byte("s3cret"), 0o600))
	tb, err := eng.QueryTable(ctx, "SELECT file('"+secret+"')", engineLimits)
	require.NoError(t, err, "readonly = 1 lets file() through")
	require.Equal(t, `"s3cret"`, string(tb.Rows[0][0]))
	_, err = Check("SELECT file('" + secret + "')")
	require.Error(t, err)
	// Nor does it refuse INTO OUTFILE, which writes a file.
	out := filepath.Join(t.TempDir(), "out.csv")
	_, _ = eng.QueryTable(ctx, "SELECT 42 INTO OUTFILE '"+out+"'", engineLimits)
	written, err := os.ReadFile(out)
	require.NoError(t, err, "readonly = 1 lets INTO OUTFILE through")
	require.Equal(t, "42\n", string(written))
	_, err = Check("SELECT 42 INTO OUTFILE '" + out + "'")
	require.Error(t, err)
	for _, sql := range []string{"SELECT * FROM loop(numbers(2)) LIMIT 3", `SELECT * FROM format(JSONEachRow, '{"a":1}')`, "SELECT * FROM dictionary('d')"} {
		st, err := Check(sql)
		require.NoError(t, err, sql)
		_, err = eng.QueryTable(ctx, st.SQL, engineLimits)
		require.Error(t, err, sql)
		require.Equal(t, 164, engineCodeOf(err), "%q: %v", sql, err)
	}
}

// BenchmarkCheckVsEngine puts Check's cost per statement beside the
// engine's for the same statement: the README's leaderboard query checked,
// and run on chDB (an empty store, readonly = 1).
func BenchmarkCheckVsEngine(b *testing.B) {
	const sql = `-- leaderboard of a policy, best first
SELECT submission_id, participant, method, score, efficiency_gain, drift, qualified, ranked, reason
FROM scores FINAL WHERE policy = 'lowb-score/v1' AND campaign = 'qwen3-tiny'
ORDER BY qualified DESC, score DESC;`
	st, err := Check(sql)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("check", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Check(sql); err != nil {
				b.Fatal(err)
			}
		}
	})
	eng := openEngine(b, b.TempDir())
	ctx := context.Background()
	b.Run("chdb", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := eng.QueryTable(ctx, st.SQL, engineLimits); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("chdb-refuses-insert", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := eng.QueryTable(ctx, "INSERT INTO scores (submission_id) VALUES ('x')", engineLimits); err == nil {
				b.Fatal("the engine took a write")
			}
		}
	})
}
