package libchdb_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/store/chdb/libchdb"
)

// TestInitRunsBeforeChdbGo builds a binary that imports the chDB adapter
// and runs it without the library: package libchdb's init must run before
// chdb-go's (which would panic) and exit with ExitCode and a message that
// says what to do.
func TestInitRunsBeforeChdbGo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "showlib")
	build := exec.Command("go", "build", "-o", bin, "./testdata/showlib")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	empty := t.TempDir() // a working folder with no .deps above it
	tests := []struct {
		name     string
		env      []string // added to a copy of the environment without CHDB_LIB_PATH
		wantCode int
		want     []string
	}{
		{"CHDB_LIB_PATH names a missing file", []string{"CHDB_LIB_PATH=" + filepath.Join(dir, "missing", "libchdb.so")}, libchdb.ExitCode,
			[]string{"libchdb.so was not found", "CHDB_LIB_PATH is set, so only it was tried", filepath.Join(dir, "missing", "libchdb.so"), "make deps"}},
		{"CHDB_LIB_PATH names a text file", []string{"CHDB_LIB_PATH=" + bin + ".txt"}, libchdb.ExitCode,
			[]string{"not an ELF shared library"}},
		{"CHDB_LIB_PATH names the library", []string{"CHDB_LIB_PATH=" + libchdb.Path()}, 0,
			[]string{"found " + libchdb.Path() + " (CHDB_LIB_PATH)"}},
	}
	require.NoError(t, os.WriteFile(bin+".txt", []byte("not a library"), 0o644))
	if _, err := os.Stat("/usr/local/lib/libchdb.so"); err != nil {
		tests = append(tests, struct {
			name     string
			env      []string
			wantCode int
			want     []string
		}{"CHDB_LIB_PATH not set, nothing installed", nil, libchdb.ExitCode,
			[]string{"CHDB_LIB_PATH is not set; looked in:", filepath.Join(dir, "libchdb.so"), "/usr/local/lib/libchdb.so"}})
	}
	var base []string
	for _, kv := range os.Environ() {
		if !bytes.HasPrefix([]byte(kv), []byte("CHDB_LIB_PATH=")) {
			base = append(base, kv)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(bin)
			cmd.Dir = empty
			cmd.Env = append(append([]string{}, base...), tt.env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tt.wantCode, code, "stderr: %s", stderr.String())
			got := stdout.String() + stderr.String()
			for _, w := range tt.want {
				require.Contains(t, got, w)
			}
			require.NotContains(t, got, "panic")
			require.NotContains(t, got, "goroutine ")
		})
	}
}
