// Package enginetree collects simengine's pinned source tree from the
// repository: the files `go build` needs to build tools/simengine offline,
// at their repository paths, and packs them into one text archive.
//
// The tree is a module of its own named like the repository's root
// module, github.com/lowbarena/lowbarena, so that simengine's imports of
// the arena's packages resolve inside it unchanged:
//
//	go.mod                         module github.com/lowbarena/lowbarena, requiring only what simengine imports
//	tools/simengine/*.go           simengine's own non-test sources
//	domain/..., events/...         the arena packages simengine imports, non-test sources
//	vendor/modules.txt             the vendored modules and packages
//	vendor/<module>/<package>/*.go the third-party packages, with their LICENSE
//
// so `go build -o OUT ./tools/simengine` builds it with no network and no
// module cache (vendor mode is the default when vendor/ exists). A patch
// against the tree is a patch against the repository's own paths.
package enginetree

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// RootModule is the repository's root module, the tree's module path.
const RootModule = "github.com/lowbarena/lowbarena"

// MainPackage is the folder of simengine's main package in the tree.
const MainPackage = "tools/simengine"

// File is one file of the tree.
type File struct {
	// Path is slash-separated, relative to the tree's root.
	Path string
	Data []byte
}

// goPackage is what Collect reads of `go list -json`.
type goPackage struct {
	ImportPath string
	Dir        string
	Standard   bool
	GoFiles    []string
	EmbedFiles []string
	Module     *struct {
		Path      string
		Version   string
		Dir       string
		GoVersion string
		Main      bool
	}
}

// Collect lists simengine's packages with `go list -deps` from the
// repository root (in its workspace) and returns the tree, sorted by path.
func Collect(root string) ([]File, error) {
	cmd := exec.Command("go", "list", "-deps", "-json", "./"+MainPackage)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("enginetree: go list: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	var files []File
	type vendored struct {
		version, goVersion string
		pkgs               []string
	}
	vendor := map[string]*vendored{}
	add := func(rel, src string) error {
		data, err := os.ReadFile(src)
		if err != nil {
			return fmt.Errorf("enginetree: %w", err)
		}
		files = append(files, File{Path: rel, Data: data})
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p goPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("enginetree: reading go list: %w", err)
		}
		if p.Standard {
			continue
		}
		if p.Module == nil {
			return nil, fmt.Errorf("enginetree: package %s has no module", p.ImportPath)
		}
		var folder string
		switch {
		case p.Module.Path == RootModule || strings.HasPrefix(p.Module.Path, RootModule+"/"):
			// The arena's own packages, at their repository paths.
			rel, ok := strings.CutPrefix(p.ImportPath, RootModule+"/")
			if !ok {
				return nil, fmt.Errorf("enginetree: package %s is outside %s", p.ImportPath, RootModule)
			}
			folder = rel
		default:
			v := vendor[p.Module.Path]
			if v == nil {
				v = &vendored{version: p.Module.Version, goVersion: p.Module.GoVersion}
				vendor[p.Module.Path] = v
				if err := add("vendor/"+p.Module.Path+"/LICENSE", filepath.Join(p.Module.Dir, "LICENSE")); err != nil {
					return nil, err
				}
			}
			v.pkgs = append(v.pkgs, p.ImportPath)
			folder = "vendor/" + p.ImportPath
		}
		for _, name := range slices.Concat(p.GoFiles, p.EmbedFiles) {
			if err := add(path.Join(folder, name), filepath.Join(p.Dir, filepath.FromSlash(name))); err != nil {
				return nil, err
			}
		}
	}
	var mod, txt strings.Builder
	fmt.Fprintf(&mod, "// simengine's pinned source tree: the repository's files that build\n"+
		"// tools/simengine, with its third-party packages vendored.\nmodule %s\n\ngo 1.26.0\n", RootModule)
	for _, m := range slices.Sorted(func(yield func(string) bool) {
		for k := range vendor {
			if !yield(k) {
				return
			}
		}
	}) {
		v := vendor[m]
		fmt.Fprintf(&mod, "\nrequire %s %s\n", m, v.version)
		fmt.Fprintf(&txt, "# %s %s\n## explicit; go %s\n", m, v.version, v.goVersion)
		slices.Sort(v.pkgs)
		for _, p := range v.pkgs {
			fmt.Fprintln(&txt, p)
		}
	}
	files = append(files, File{Path: "go.mod", Data: []byte(mod.String())})
	if txt.Len() > 0 {
		files = append(files, File{Path: "vendor/modules.txt", Data: []byte(txt.String())})
	}
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	return files, nil
}

// Format packs files in the txtar layout: each file a line "-- PATH --"
// followed by its content, which must end in a newline and hold no such
// line itself.
func Format(files []File) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("simengine's pinned source tree, generated by `go generate ./domain/examples`; do not edit.\n")
	for _, f := range files {
		if len(f.Data) > 0 && f.Data[len(f.Data)-1] != '\n' {
			return nil, fmt.Errorf("enginetree: %s does not end in a newline", f.Path)
		}
		for line := range strings.Lines(string(f.Data)) {
			if _, ok := marker(strings.TrimSuffix(line, "\n")); ok {
				return nil, fmt.Errorf("enginetree: %s holds a line that reads as a file marker: %q", f.Path, line)
			}
		}
		fmt.Fprintf(&b, "-- %s --\n", f.Path)
		b.Write(f.Data)
	}
	return b.Bytes(), nil
}

// Parse unpacks what Format packed; the comment before the first file is
// dropped.
func Parse(data []byte) ([]File, error) {
	var files []File
	var cur *File
	for line := range strings.Lines(string(data)) {
		if name, ok := marker(strings.TrimSuffix(line, "\n")); ok {
			if !strings.HasSuffix(line, "\n") {
				return nil, fmt.Errorf("enginetree: marker %q has no newline", line)
			}
			if !isTreePath(name) {
				return nil, fmt.Errorf("enginetree: %q is not a relative slash path inside the tree", name)
			}
			files = append(files, File{Path: name, Data: []byte{}})
			cur = &files[len(files)-1]
			continue
		}
		if cur != nil {
			cur.Data = append(cur.Data, line...)
		}
	}
	if len(files) == 0 {
		return nil, errors.New("enginetree: the archive holds no file")
	}
	return files, nil
}

// marker reports whether line is "-- NAME --" and returns NAME.
func marker(line string) (string, bool) {
	name, ok := strings.CutPrefix(line, "-- ")
	if !ok {
		return "", false
	}
	name, ok = strings.CutSuffix(name, " --")
	return strings.TrimSpace(name), ok && strings.TrimSpace(name) != ""
}

// isTreePath reports whether p is a clean relative slash path that stays
// inside the tree.
func isTreePath(p string) bool {
	return p != "" && path.Clean(p) == p && !path.IsAbs(p) && p != ".." && !strings.HasPrefix(p, "../") && !strings.Contains(p, "\\")
}
