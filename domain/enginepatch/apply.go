package enginepatch

import (
	"crypto/sha256"
	"encoding/hex"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lowbarena/lowbarena/events/reason"
)

// buildScriptNames are the base names of the files a build reads as
// instructions rather than as source: changing them changes how the
// engine is built (a dependency fetched, a script run), which a campaign
// allows only with EngineSource.AllowBuildScripts.
var buildScriptNames = []string{
	"go.mod", "go.sum", "go.work", "go.work.sum",
	"setup.py", "setup.cfg", "pyproject.toml", "requirements.txt", "MANIFEST.in",
	"CMakeLists.txt", "Makefile", "makefile", "GNUmakefile", "Dockerfile",
}

// BuildScript says whether name (a slash path relative to the source
// tree) is a build script: one of go.mod, go.sum, go.work, setup.py,
// setup.cfg, pyproject.toml, requirements.txt, MANIFEST.in,
// CMakeLists.txt, a Makefile or Dockerfile, a *.sh, *.bash or *.cmake
// file, or anything under a top-level build/ folder.
func BuildScript(name string) bool {
	base := path.Base(name)
	if slices.Contains(buildScriptNames, base) {
		return true
	}
	switch path.Ext(base) {
	case ".sh", ".bash", ".cmake":
		return true
	}
	return strings.HasPrefix(name, "build/")
}

// Allowed says whether name (a slash path relative to the source tree)
// matches one of the globs: path.Match syntax, with "dir/**" (or "**")
// for everything under a folder.
func Allowed(globs []string, name string) bool {
	for _, g := range globs {
		if matchGlob(g, name) {
			return true
		}
	}
	return false
}

func matchGlob(glob, name string) bool {
	if glob == "**" {
		return true
	}
	if dir, ok := strings.CutSuffix(glob, "/**"); ok {
		gparts, nparts := strings.Split(dir, "/"), strings.Split(name, "/")
		if len(nparts) <= len(gparts) {
			return false
		}
		for i, g := range gparts {
			if ok, err := path.Match(g, nparts[i]); err != nil || !ok {
				return false
			}
		}
		return true
	}
	ok, err := path.Match(glob, name)
	return err == nil && ok
}

// result is a file of the patched tree that differs from the source: its
// new content, or gone.
type result struct {
	content string
	exec    bool
	gone    bool
}

// apply checks patch and applies it in memory: the summary, and the
// files that differ from the source.
func (s *Source) apply(patch []byte) (Summary, map[string]result, error) {
	limit := s.Spec.MaxPatchBytes
	if limit <= 0 {
		limit = DefaultMaxPatchBytes
	}
	if int64(len(patch)) > limit {
		return Summary{}, nil, refuse(reason.PatchTooLarge, "the patch is %d bytes; the campaign takes patches of at most %d bytes", len(patch), limit)
	}
	files, err := parse(patch)
	if err != nil {
		return Summary{}, nil, err
	}
	for _, f := range files {
		if f.binary {
			return Summary{}, nil, refuse(reason.PatchBinary, "%s (patch line %d) is a binary file; a patch may only change text files of the engine source", f.name(), f.line)
		}
	}
	touched := map[string]bool{}
	for _, f := range files {
		for _, name := range f.paths() {
			if err := s.checkPath(f, name); err != nil {
				return Summary{}, nil, err
			}
			if touched[name] {
				return Summary{}, nil, refuse(reason.PatchMalformed, "the patch touches %s twice (patch line %d); write one diff per file", name, f.line)
			}
			touched[name] = true
		}
	}
	out := map[string]result{}
	var sum Summary
	for _, f := range files {
		if err := s.applyFile(f, out); err != nil {
			return Summary{}, nil, err
		}
		for _, h := range f.hunks {
			for _, l := range h.lines {
				switch l.op {
				case '+':
					sum.LinesAdded++
				case '-':
					sum.LinesRemoved++
				}
			}
		}
	}
	d := sha256.Sum256(patch)
	sum.SHA256 = hex.EncodeToString(d[:])
	sum.Files = sortedKeys(touched)
	sum.SourceDigest = s.Digest
	sum.EngineDigest = s.patchedDigest(out)
	return sum, out, nil
}

// paths are the names f touches: its old name unless it creates the
// file, its new name unless it deletes it.
func (f *filePatch) paths() []string {
	var names []string
	if !f.created && f.oldName != "" {
		names = append(names, f.oldName)
	}
	if !f.deleted && f.newName != "" && f.newName != f.oldName {
		names = append(names, f.newName)
	}
	if len(names) == 0 {
		names = append(names, f.name())
	}
	return names
}

// checkPath refuses a name that escapes the tree, is not allowed, or is
// a build script the campaign does not let patches change.
func (s *Source) checkPath(f *filePatch, name string) error {
	switch {
	case name == "":
		return refuse(reason.PatchMalformed, "patch line %d names no file", f.line)
	case strings.HasPrefix(name, "/"):
		return refuse(reason.PatchPathForbidden, "%s (patch line %d) is an absolute path; a patch names files relative to the engine source", name, f.line)
	case strings.Contains(name, `\`) || !filepath.IsLocal(name) || path.Clean(name) != name:
		return refuse(reason.PatchPathForbidden, "%s (patch line %d) is not a clean path inside the engine source (no .., no . or empty parts, no backslash)", name, f.line)
	case f.mode == "120000" || f.mode == "160000":
		return refuse(reason.PatchPathForbidden, "%s (patch line %d) would become a symbolic link or a submodule (mode %s); a patch may only change files", name, f.line, f.mode)
	}
	if link, ok := s.hasLinkOnPath(name); ok {
		return refuse(reason.PatchPathForbidden, "%s (patch line %d) goes through %s, a symbolic link of the engine source; a patch may not follow links", name, f.line, link)
	}
	if BuildScript(name) && !s.Spec.AllowBuildScripts {
		return refuse(reason.PatchBuildScript, "%s (patch line %d) is a build script; the campaign does not let a patch change how the engine is built", name, f.line)
	}
	if !Allowed(s.Spec.Allow, name) {
		return refuse(reason.PatchPathForbidden, "%s (patch line %d) is outside the paths the campaign lets a patch touch (%s)", name, f.line, strings.Join(s.Spec.Allow, ", "))
	}
	return nil
}

// exists says whether name is a file of the tree as patched so far.
func (s *Source) exists(name string, out map[string]result) bool {
	if r, ok := out[name]; ok {
		return !r.gone
	}
	_, ok := s.entries[name]
	return ok
}

// applyFile applies f's hunks to its file and puts the outcome in out.
func (s *Source) applyFile(f *filePatch, out map[string]result) error {
	created := f.created
	if !created && f.oldName != "" && !s.exists(f.oldName, out) && insertsOnly(f.hunks) {
		// diff -N names an absent file by its path, not /dev/null.
		created = true
	}
	var old string
	exec := false
	if created {
		if s.exists(f.newName, out) {
			return refuse(reason.PatchDoesNotApply, "the patch creates %s (patch line %d), which the engine source already has", f.newName, f.line)
		}
		if p, ok := s.fileOnPath(f.newName); ok {
			return refuse(reason.PatchDoesNotApply, "the patch creates %s (patch line %d) inside %s, which is a file of the engine source", f.newName, f.line, p)
		}
	} else {
		if !s.exists(f.oldName, out) {
			return refuse(reason.PatchDoesNotApply, "the patch changes %s (patch line %d), which the engine source does not have", f.oldName, f.line)
		}
		var err error
		if old, err = s.readSource(f.oldName); err != nil {
			return err
		}
		exec = s.entries[f.oldName].exec
	}
	switch f.mode {
	case "100755":
		exec = true
	case "100644":
		exec = false
	}
	content, err := applyHunks(f, old)
	if err != nil {
		return err
	}
	deleted := f.deleted || (!created && f.epochNew && content == "" && !f.rename && !f.copy)
	switch {
	case deleted:
		if content != "" {
			return refuse(reason.PatchDoesNotApply, "the patch deletes %s (patch line %d) but its hunks leave %d bytes of it: a deletion removes every line", f.oldName, f.line, len(content))
		}
		out[f.oldName] = result{gone: true}
	case f.rename || f.copy:
		if s.exists(f.newName, out) {
			return refuse(reason.PatchDoesNotApply, "the patch renames or copies %s to %s (patch line %d), which the engine source already has", f.oldName, f.newName, f.line)
		}
		if p, ok := s.fileOnPath(f.newName); ok {
			return refuse(reason.PatchDoesNotApply, "the patch renames or copies %s to %s (patch line %d), inside %s, which is a file of the engine source", f.oldName, f.newName, f.line, p)
		}
		if f.rename {
			out[f.oldName] = result{gone: true}
		}
		out[f.newName] = result{content: content, exec: exec}
	default:
		out[f.newName] = result{content: content, exec: exec}
	}
	return nil
}

// insertsOnly says whether every hunk is an insertion into nothing
// (@@ -0,0 ...), as a diff of a new file is.
func insertsOnly(hunks []hunk) bool {
	for _, h := range hunks {
		if h.oldStart != 0 || h.oldLines != 0 {
			return false
		}
	}
	return len(hunks) > 0
}

// applyHunks applies f's hunks to old exactly: each hunk's context and
// removed lines must be old's lines at the line the hunk names.
func applyHunks(f *filePatch, old string) (string, error) {
	lines := strings.SplitAfter(old, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	var out []string
	cursor := 0
	for _, h := range f.hunks {
		start := h.oldStart - 1
		if h.oldLines == 0 {
			// An insertion without context goes after line oldStart.
			start = h.oldStart
		}
		if start < 0 || start < cursor {
			return "", refuse(reason.PatchMalformed, "hunk %d of %s (%s) starts at line %d, before the end of the hunk before it; hunks must come in order of their lines", h.n, f.name(), h.header, h.oldStart)
		}
		if start+h.oldLines > len(lines) {
			return "", refuse(reason.PatchDoesNotApply, "hunk %d of %s (%s) needs lines %d to %d of the source, which has %d lines", h.n, f.name(), h.header, start+1, start+h.oldLines, len(lines))
		}
		out = append(out, lines[cursor:start]...)
		want := len(out) + 1
		if h.newLines == 0 {
			want = len(out)
		}
		if h.newStart != want {
			return "", refuse(reason.PatchMalformed, "hunk %d of %s (%s) says its new lines start at line %d; after the hunks before it they start at line %d", h.n, f.name(), h.header, h.newStart, want)
		}
		at := start
		for _, l := range h.lines {
			if l.op == '+' {
				out = append(out, l.text)
				continue
			}
			if lines[at] != l.text {
				return "", refuse(reason.PatchDoesNotApply, "hunk %d of %s (%s) does not match the source at line %d: the source has %q, the patch expects %q (a patch applies exactly, at the lines it names)",
					h.n, f.name(), h.header, at+1, lines[at], l.text)
			}
			if l.op == ' ' {
				out = append(out, l.text)
			}
			at++
		}
		cursor = start + h.oldLines
	}
	out = append(out, lines[cursor:]...)
	return strings.Join(out, ""), nil
}

// patchedDigest is the tree digest of the source with out laid over it.
func (s *Source) patchedDigest(out map[string]result) string {
	entries := make(map[string]entry, len(s.entries)+len(out))
	for n, e := range s.entries {
		entries[n] = e
	}
	for n, r := range out {
		if r.gone {
			delete(entries, n)
			continue
		}
		d := sha256.Sum256([]byte(r.content))
		entries[n] = entry{kind: kindFile, sum: hex.EncodeToString(d[:]), exec: r.exec}
	}
	return digest(entries)
}
