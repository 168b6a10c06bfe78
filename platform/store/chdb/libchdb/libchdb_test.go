package libchdb

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeLib writes a file that starts like an ELF object at p.
func fakeLib(t *testing.T, p string) string {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte("\x7fELF\x02\x01\x01"), 0o644))
	return p
}

func TestSearch(t *testing.T) {
	if check("/usr/local/lib/libchdb.so") == "" {
		t.Skip("/usr/local/lib/libchdb.so exists on this machine; the search cases assume it does not")
	}
	root := t.TempDir()
	good := fakeLib(t, filepath.Join(root, "env", "libchdb.so"))
	pointer := filepath.Join(root, "lfs", "libchdb.so")
	require.NoError(t, os.MkdirAll(filepath.Dir(pointer), 0o755))
	require.NoError(t, os.WriteFile(pointer, []byte("version https://git-lfs.github.com/spec/v1\n"), 0o644))
	short := filepath.Join(root, "short", "libchdb.so")
	require.NoError(t, os.MkdirAll(filepath.Dir(short), 0o755))
	require.NoError(t, os.WriteFile(short, []byte("\x7fE"), 0o644))
	exeDir := filepath.Join(root, "app", "bin")
	exeLib := fakeLib(t, filepath.Join(exeDir, "libchdb.so"))
	exeLibDir := filepath.Join(root, "app2", "bin")
	libDirLib := fakeLib(t, filepath.Join(root, "app2", "lib", "libchdb.so"))
	repo := filepath.Join(root, "repo")
	depsLib := fakeLib(t, filepath.Join(repo, DepsPath))
	deep := filepath.Join(repo, "services", "store", "chdb")
	require.NoError(t, os.MkdirAll(deep, 0o755))
	empty := filepath.Join(root, "empty")
	require.NoError(t, os.MkdirAll(empty, 0o755))

	tests := []struct {
		name       string
		env        string
		exe        string
		wd         string
		wantPath   string // "" means not found
		wantSource string
		wantWhy    string // a reason in r.looked, when not found
	}{
		{"env", good, "", "", good, "CHDB_LIB_PATH", ""},
		{"env relative to wd", "env/libchdb.so", "", root, good, "CHDB_LIB_PATH", ""},
		{"env with dots", filepath.Join(root, "env", "..", "env", "libchdb.so"), "", "", good, "CHDB_LIB_PATH", ""},
		{"env wins over exe and wd", good, filepath.Join(exeDir, "arena"), deep, good, "CHDB_LIB_PATH", ""},
		{"env missing: nothing else is tried", filepath.Join(root, "nope.so"), filepath.Join(exeDir, "arena"), deep, "", "", "no such file"},
		{"env is a folder", root, "", "", "", "", "not a regular file"},
		{"env is a Git LFS pointer", pointer, "", "", "", "", "not an ELF"},
		{"env is truncated", short, "", "", "", "", "not an ELF"},
		{"next to the executable", "", filepath.Join(exeDir, "arena"), deep, exeLib, "executable", ""},
		{"../lib of the executable", "", filepath.Join(exeLibDir, "arena"), deep, libDirLib, "executable", ""},
		{"deps in the working folder", "", filepath.Join(empty, "arena"), repo, depsLib, "working directory", ""},
		{"deps in a folder above", "", filepath.Join(empty, "arena"), deep, depsLib, "working directory", ""},
		{"nowhere", "", filepath.Join(empty, "arena"), empty, "", "", "/usr/local/lib/libchdb.so"},
		{"nothing known", "", "", "", "", "", "/usr/local/lib/libchdb.so"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := search(tt.env, tt.exe, tt.wd)
			require.Equal(t, tt.wantPath, r.path)
			require.Equal(t, tt.wantSource, r.source)
			require.Equal(t, tt.env != "", r.envSet)
			if tt.wantPath == "" {
				require.NotEmpty(t, r.looked)
				require.Contains(t, strings.Join(r.looked, "\n"), tt.wantWhy)
				if tt.env != "" {
					require.Len(t, r.looked, 1, "only CHDB_LIB_PATH is tried when it is set")
				}
			}
		})
	}
}

func TestMessage(t *testing.T) {
	tests := []struct {
		name string
		r    result
		want []string
	}{
		{"env set", result{envSet: true, looked: []string{"/x/libchdb.so (no such file or directory)"}},
			[]string{"libchdb.so was not found", "CHDB_LIB_PATH is set, so only it was tried", "  /x/libchdb.so (no such file or directory)\n", "make deps", "-tags nochdb"}},
		{"env not set", result{looked: []string{"/a (x)", "/b (y)"}},
			[]string{"CHDB_LIB_PATH is not set; looked in:", "  /a (x)\n  /b (y)\n", DepsPath}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := message(tt.r)
			for _, w := range tt.want {
				require.Contains(t, msg, w)
			}
			require.True(t, strings.HasSuffix(msg, "\n"))
		})
	}
}

func TestPathHelpers(t *testing.T) {
	tests := []struct{ in, clean, dir string }{
		{"/", "/", "/"},
		{"/a", "/a", "/"},
		{"/a/b", "/a/b", "/a"},
		{"/a//b/", "/a/b", "/a//b"},
		{"/a/./b/../c", "/a/c", "/a/./b/.."},
		{"/../a", "/a", "/.."},
		{"/a/b/../..", "/", "/a/b/.."},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			require.Equal(t, tt.clean, clean(tt.in))
			require.Equal(t, tt.dir, dir(tt.in))
		})
	}
	require.Equal(t, "/a/b", join("/a", "b"))
	require.Equal(t, "/a/b", join("/a/", "b"))
}

// TestFoundInTests checks the library this test binary loaded: the package
// init ran and set CHDB_LIB_PATH to what it found.
func TestFoundInTests(t *testing.T) {
	require.NotEmpty(t, Path())
	require.NotEmpty(t, Source())
	require.Equal(t, Path(), os.Getenv("CHDB_LIB_PATH"))
	require.Empty(t, check(Path()))
}
