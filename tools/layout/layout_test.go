// Package layout holds the repository's shape to its rules: every package
// is named for what it holds (no two library packages share a name, none
// takes a standard-library package's name), and every module's go.mod
// replaces exactly the arena modules it builds with.
package layout

import (
	"bufio"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// arena is the module path every arena module starts with.
const arena = "github.com/lowbarena/lowbarena"

// root is the repository's root, two folders up from here.
var root = filepath.Join("..", "..")

// stdExceptions are standard-library package names a package of the arena
// may take, each with its reason. go/build is a toolchain package that no
// program of the arena imports; the build stage keeps the name it has on
// the wire, in its binary and in every deployment.
var stdExceptions = map[string]string{
	"build": "services/build: go/build is a toolchain package the arena never imports",
}

// packages returns each folder holding Go code (tests aside) with its
// package name, skipping what the go command skips (testdata, folders
// starting with . or _) and nested worktrees of other repositories.
func packages(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.PackageClauseOnly)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		out[filepath.ToSlash(rel)] = f.Name.Name
		return nil
	})
	require.NoError(t, err)
	return out
}

// TestPackageNames: no two library packages share a name (eight packages
// named service, each imported under an alias, is what this prevents), and
// none takes the name of a standard-library package (runtime was one)
// unless stdExceptions says why.
func TestPackageNames(t *testing.T) {
	pkgs := packages(t)
	require.Greater(t, len(pkgs), 50, "the walk found the repository's packages")

	byName := map[string][]string{}
	for dir, name := range pkgs {
		if name == "main" {
			continue
		}
		byName[name] = append(byName[name], dir)
	}
	for name, dirs := range byName {
		sort.Strings(dirs)
		require.Len(t, dirs, 1, "package %s is defined in several folders: %v", name, dirs)
	}

	std, err := exec.Command("go", "list", "std").Output()
	require.NoError(t, err)
	stdNames := map[string]string{}
	for _, p := range strings.Fields(string(std)) {
		if strings.Contains(p, "internal") || strings.HasPrefix(p, "vendor/") {
			continue // not importable
		}
		stdNames[p[strings.LastIndex(p, "/")+1:]] = p
	}
	require.Contains(t, stdNames, "runtime")
	for name, dirs := range byName {
		if p, ok := stdNames[name]; ok {
			_, excused := stdExceptions[name]
			require.True(t, excused, "package %s (%s) takes the name of the standard library's %s", name, dirs[0], p)
		}
	}
	for name := range stdExceptions {
		require.Contains(t, byName, name, "stdExceptions names %s, which no package takes any more: remove it", name)
	}
}

// goMod is what TestReplaceLines reads of a go.mod.
type goMod struct {
	path     string
	requires map[string]bool // arena modules required, direct or indirect
	replaces map[string]string
}

func readGoMod(t *testing.T, file string) goMod {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	m := goMod{requires: map[string]bool{}, replaces: map[string]string{}}
	block := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if i := strings.Index(line, "//"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		switch {
		case line == "":
			continue
		case line == ")":
			block = ""
			continue
		case strings.HasSuffix(line, "("):
			block = strings.TrimSpace(strings.TrimSuffix(line, "("))
			continue
		}
		verb, rest := block, line
		if block == "" {
			verb, rest, _ = strings.Cut(line, " ")
		}
		fields := strings.Fields(rest)
		switch verb {
		case "module":
			m.path = fields[0]
		case "require":
			if strings.HasPrefix(fields[0], arena) {
				m.requires[fields[0]] = true
			}
		case "replace":
			if strings.HasPrefix(fields[0], arena) {
				m.replaces[fields[0]] = fields[len(fields)-1]
			}
		}
	}
	require.NoError(t, sc.Err())
	return m
}

// TestReplaceLines: each module outside the root replaces exactly the
// arena modules its go.mod requires (a build with GOWORK=off needs every
// one of them, and nothing else), each pointing at the folder that holds
// that module; the root module requires and replaces none. go.work uses
// every module but deploy/check and examples/cloudevents-go, which are
// built with GOWORK=off on purpose.
func TestReplaceLines(t *testing.T) {
	work, err := os.ReadFile(filepath.Join(root, "go.work"))
	require.NoError(t, err)
	var dirs []string
	inUse := false
	for _, line := range strings.Split(string(work), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "use ("):
			inUse = true
		case inUse && line == ")":
			inUse = false
		case inUse && strings.HasPrefix(line, "."):
			dirs = append(dirs, line)
		}
	}
	require.Contains(t, dirs, ".")
	mods, err := filepath.Glob(filepath.Join(root, "*", "*", "go.mod"))
	require.NoError(t, err)
	for _, m := range mods {
		rel, err := filepath.Rel(root, filepath.Dir(m))
		require.NoError(t, err)
		rel = "./" + filepath.ToSlash(rel)
		if rel == "./deploy/check" || rel == "./examples/cloudevents-go" {
			dirs = append(dirs, rel)
			continue
		}
		require.Contains(t, dirs, rel, "%s has a go.mod that go.work does not use", rel)
	}

	for _, dir := range dirs {
		m := readGoMod(t, filepath.Join(root, dir, "go.mod"))
		if dir == "." {
			require.Equal(t, arena, m.path)
			require.Empty(t, m.requires, "the root module needs no other arena module")
			require.Empty(t, m.replaces)
			continue
		}
		require.Equal(t, arena+"/"+strings.TrimPrefix(dir, "./"), m.path, "%s's module path", dir)
		want := map[string]bool{}
		for r := range m.requires {
			want[r] = true
		}
		got := map[string]bool{}
		for r, to := range m.replaces {
			got[r] = true
			target := readGoMod(t, filepath.Join(root, dir, to, "go.mod"))
			require.Equal(t, r, target.path, "%s replaces %s with %s, which holds %s", dir, r, to, target.path)
		}
		require.Equal(t, want, got, "%s: the replace lines must be exactly the arena modules it requires", dir)
	}
}
