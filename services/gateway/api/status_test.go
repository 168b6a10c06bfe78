package api_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events/reason"
)

// TestStatusesAreTheCatalogues: wherever the gateway's code pairs an HTTP
// status with a reason code (a refuse or problem call, a refusal literal,
// a returned pair), the status is the one the catalogue gives that code
// (events/reason/reasons.json's http_status, which docs/reasons.md shows
// participants). The catalogue's statuses are data beside the code that
// answers them; this holds the two together.
func TestStatusesAreTheCatalogues(t *testing.T) {
	byName := map[string]int{}
	for code := 100; code < 600; code++ {
		if text := http.StatusText(code); text != "" {
			byName["Status"+strings.NewReplacer(" ", "", "-", "", "'", "").Replace(text)] = code
		}
	}
	require.Equal(t, http.StatusRequestEntityTooLarge, byName["StatusRequestEntityTooLarge"])

	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	pairs := 0
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		require.NoError(t, err)
		check := func(list []ast.Expr) {
			for i := 0; i+1 < len(list); i++ {
				status, ok := selector(list[i], "http")
				if !ok {
					continue
				}
				name, ok := selector(list[i+1], "reason")
				if !ok {
					continue
				}
				n, known := byName[status]
				require.True(t, known, "%s: http.%s", fset.Position(list[i].Pos()), status)
				code := codeNamed(t, name)
				pairs++
				if info, _ := reason.Describe(code); info.HTTPStatus != 0 {
					require.Equal(t, info.HTTPStatus, n, "%s: %s answered with %d; the catalogue says %d", fset.Position(list[i].Pos()), code, n, info.HTTPStatus)
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				check(n.Args)
			case *ast.CompositeLit:
				check(n.Elts)
			case *ast.ReturnStmt:
				check(n.Results)
			}
			return true
		})
	}
	require.Greater(t, pairs, 30, "the scan found the gateway's refusals")
}

// selector returns x.Sel's name when e is pkg.Sel.
func selector(e ast.Expr, pkg string) (string, bool) {
	s, ok := e.(*ast.SelectorExpr)
	if !ok {
		return "", false
	}
	x, ok := s.X.(*ast.Ident)
	if !ok || x.Name != pkg {
		return "", false
	}
	return s.Sel.Name, true
}

// codeNamed is the catalogue's code whose Go constant is name.
func codeNamed(t *testing.T, name string) reason.Code {
	t.Helper()
	for _, info := range reason.All() {
		if info.Name == name {
			return info.Code
		}
	}
	t.Fatalf("reason.%s is no code of the catalogue", name)
	return ""
}
