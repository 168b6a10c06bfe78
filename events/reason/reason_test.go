package reason_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/events/reason/internal/catalogue"
)

// root is the repository's root, from this package's folder.
const root = "../.."

func entries(t *testing.T) []catalogue.Entry {
	t.Helper()
	data, err := os.ReadFile("reasons.json")
	require.NoError(t, err)
	es, err := catalogue.Parse(data)
	require.NoError(t, err, "reasons.json")
	return es
}

// TestGeneratedFilesAreUpToDate renders the generated files again from
// reasons.json: a difference means go generate ./events/reason was not run.
func TestGeneratedFilesAreUpToDate(t *testing.T) {
	es := entries(t)
	src, err := catalogue.Go(es)
	require.NoError(t, err)
	have, err := os.ReadFile("reasons_generated.go")
	require.NoError(t, err)
	require.Equal(t, string(src), string(have), "reasons_generated.go is out of date: run go generate ./events/reason")
	have, err = os.ReadFile(filepath.Join(root, "docs", "reasons.md"))
	require.NoError(t, err)
	require.Equal(t, string(catalogue.Markdown(es)), string(have), "docs/reasons.md is out of date: run go generate ./events/reason")
}

var snake = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

func TestCatalogue(t *testing.T) {
	es := entries(t)
	all := reason.All()
	require.Len(t, all, len(es))
	seen := map[reason.Code]bool{}
	for i, info := range all {
		require.Equal(t, es[i].Code, string(info.Code))
		require.Regexp(t, snake, string(info.Code))
		require.False(t, seen[info.Code], "%s appears twice", info.Code)
		seen[info.Code] = true
		require.NotEmpty(t, strings.TrimSpace(info.Description), info.Code)
		require.NotEmpty(t, info.GivenBy, info.Code)
		require.True(t, reason.Known(info.Code), info.Code)
		got, ok := reason.Describe(info.Code)
		require.True(t, ok, info.Code)
		require.Equal(t, info.Description, got.Description)
		require.Equal(t, string(info.Code), info.Code.String())
	}
	_, ok := reason.Describe("no_such_code")
	require.False(t, ok)
	require.False(t, reason.Known("no_such_code"))
}

func TestParseRefusesABadCatalogue(t *testing.T) {
	for name, data := range map[string]string{
		"not snake_case":      `[{"code":"BadCode","name":"BadCode","description":"It is bad.","given_by":["x"]}]`,
		"no description":      `[{"code":"a_b","name":"AB","description":"","given_by":["x"]}]`,
		"no giver":            `[{"code":"a_b","name":"AB","description":"It is.","given_by":[]}]`,
		"unexported name":     `[{"code":"a_b","name":"aB","description":"It is.","given_by":["x"]}]`,
		"a code twice":        `[{"code":"a_b","name":"AB","description":"It is.","given_by":["x"]},{"code":"a_b","name":"AB2","description":"It is.","given_by":["x"]}]`,
		"a name twice":        `[{"code":"a_b","name":"AB","description":"It is.","given_by":["x"]},{"code":"a_c","name":"AB","description":"It is.","given_by":["x"]}]`,
		"unsorted":            `[{"code":"a_c","name":"AC","description":"It is.","given_by":["x"]},{"code":"a_b","name":"AB","description":"It is.","given_by":["x"]}]`,
		"an unknown field":    `[{"code":"a_b","name":"AB","description":"It is.","given_by":["x"],"status":400}]`,
		"not one sentence or": `[{"code":"a_b","name":"AB","description":"no full stop","given_by":["x"]}]`,
	} {
		_, err := catalogue.Parse([]byte(data))
		require.Error(t, err, name)
	}
}

// TestEveryCodeIsCatalogued reads every Go file of the repository (but
// deploy/check, a tool with problem codes of its own) and fails on a
// reason code that is not in the catalogue: a Reason*/Code* constant
// holding a code, a code given as a literal to a refusal or a poison
// (Refuse, Refusef, RefuseWith, Poison, Fail), in a Code or Reason field
// of a composite literal, or converted with reason.Code. Test files and
// test kits (packages ending in "test") may use codes of their own, except
// in reason.Code conversions.
func TestEveryCodeIsCatalogued(t *testing.T) {
	known := map[string]bool{}
	for _, info := range reason.All() {
		known[string(info.Code)] = true
	}
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "vendor" ||
				rel == "deploy/check" || rel == "events/reason") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		files++
		lax := strings.HasSuffix(path, "_test.go") || strings.HasSuffix(filepath.Base(filepath.Dir(path)), "test")
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		require.NoError(t, err)
		check := func(e ast.Expr, what string) {
			lit, ok := e.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil || !snake.MatchString(s) {
				return
			}
			require.True(t, known[s], "%s: %s %q is not in events/reason/reasons.json", fset.Position(lit.Pos()), what, s)
		}
		inspectCodes(f, lax, check)
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, files, 100, "the walk found the repository's Go files")
}

// codeConst is the name of a constant that holds a reason code, and
// codeCalls the functions whose literal arguments are codes.
var (
	codeConst = regexp.MustCompile(`^(Reason|Code)[A-Z]`)
	codeCalls = map[string]bool{"Refuse": true, "Refusef": true, "RefuseWith": true, "Poison": true, "Fail": true}
)

// inspectCodes calls check on every expression of f that gives a reason
// code (see TestEveryCodeIsCatalogued); lax files check only reason.Code
// conversions.
func inspectCodes(f *ast.File, lax bool, check func(e ast.Expr, what string)) {
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GenDecl:
			if n.Tok != token.CONST {
				return true
			}
			for _, spec := range n.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if codeConst.MatchString(name.Name) && i < len(vs.Values) && !lax {
						check(vs.Values[i], "the constant "+name.Name)
					}
				}
			}
		case *ast.CallExpr:
			var fn string
			switch f := n.Fun.(type) {
			case *ast.Ident:
				fn = f.Name
			case *ast.SelectorExpr:
				fn = f.Sel.Name
				if x, ok := f.X.(*ast.Ident); ok && x.Name == "reason" && fn == "Code" && len(n.Args) == 1 {
					check(n.Args[0], "the code")
				}
			}
			if codeCalls[fn] && !lax {
				for _, a := range n.Args {
					check(a, "the code given to "+fn)
				}
			}
		case *ast.KeyValueExpr:
			if k, ok := n.Key.(*ast.Ident); ok && (k.Name == "Code" || k.Name == "Reason") && !lax {
				check(n.Value, "the "+k.Name)
			}
		}
		return true
	})
}
