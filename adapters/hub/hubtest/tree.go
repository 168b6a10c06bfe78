package hubtest

import (
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
)

// TreeOptions shape the server's tree API (ServeTree).
type TreeOptions struct {
	// LFS reports whether the hub stores the file at path in LFS: its
	// entry then carries lfs.oid, the sha256 of its content, which a
	// client takes without reading the file. Nil: every *.safetensors
	// file, as the Hugging Face hub's default .gitattributes has it.
	LFS func(path string) bool
	// PageSize, when positive, splits the listing into pages of that many
	// entries, each naming the next in a Link header (rel="next",
	// ?cursor=N), as the hub does for large repositories.
	PageSize int
}

// TreePath is the URL path of the repository's tree API at Revision, as
// the Hugging Face hub serves it (GET .../tree/<revision>?recursive=true).
func TreePath() string { return "/api/models/" + Org + "/" + Name + "/tree/" + Revision }

// ServeTree answers the hub's tree API (TreePath) from the files the
// server serves, and every folder above them: each file's path, size,
// git blob id and, for an LFS file, lfs.oid and lfs.size. It installs a
// hook (see SetHook; Tree returns it, to combine with another). Requests
// are recorded with the URL path as their Path.
func (s *Server) ServeTree(o TreeOptions) { s.SetHook(s.Tree(o)) }

// Tree is the hook ServeTree installs: it answers the tree API and
// leaves every other request to the server.
func (s *Server) Tree(o TreeOptions) Hook {
	lfs := o.LFS
	if lfs == nil {
		lfs = func(p string) bool { return strings.HasSuffix(p, ".safetensors") }
	}
	return func(w http.ResponseWriter, r *http.Request, _ string) bool {
		if r.URL.Path != TreePath() {
			return false
		}
		if r.Method != http.MethodGet {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return true
		}
		entries, err := s.treeEntries(lfs, r.URL.Query().Get("recursive") == "true")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return true
		}
		if o.PageSize > 0 {
			start, _ := strconv.Atoi(r.URL.Query().Get("cursor"))
			start = min(max(start, 0), len(entries))
			end := min(start+o.PageSize, len(entries))
			if end < len(entries) {
				next := *r.URL
				q := next.Query()
				q.Set("cursor", strconv.Itoa(end))
				next.RawQuery = q.Encode()
				w.Header().Set("Link", fmt.Sprintf("<%s>; rel=\"next\"", next.RequestURI()))
			}
			entries = entries[start:end]
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(entries)
		return true
	}
}

// TreeEntry is one entry of the tree API's answer.
type TreeEntry struct {
	Type string    `json:"type"`
	OID  string    `json:"oid"`
	Size int64     `json:"size"`
	LFS  *TreeBlob `json:"lfs,omitempty"`
	Path string    `json:"path"`
}

// TreeBlob is an LFS file's object: the sha256 of its content (oid), its
// size and the size of its pointer file in git.
type TreeBlob struct {
	OID         string `json:"oid"`
	Size        int64  `json:"size"`
	PointerSize int    `json:"pointerSize"`
}

// treeEntries lists the folders and files (the top only, unless
// recursive) sorted by path. An LFS file's digest comes from Digest
// (cached, so a sparse shard of gigabytes is hashed once); a git file's
// blob id is computed from its bytes, an LFS file's from its pointer.
func (s *Server) treeEntries(lfs func(string) bool, recursive bool) ([]TreeEntry, error) {
	s.mu.Lock()
	at := s.commits[s.commitOf(Revision)] // TreePath names Revision
	files := make(map[string]string, len(at))
	for p, f := range at {
		files[p] = f
	}
	s.mu.Unlock()
	dirs := map[string]bool{}
	var out []TreeEntry
	for p, file := range files {
		if file == "" {
			continue
		}
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
		if !recursive && strings.Contains(p, "/") {
			continue
		}
		st, err := os.Stat(file)
		if err != nil {
			return nil, err
		}
		e := TreeEntry{Type: "file", Path: p, Size: st.Size()}
		if lfs(p) {
			sum, err := Digest(file)
			if err != nil {
				return nil, err
			}
			pointer := fmt.Sprintf("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", sum, st.Size())
			e.OID = blobID(strings.NewReader(pointer), int64(len(pointer)))
			e.LFS = &TreeBlob{OID: sum, Size: st.Size(), PointerSize: len(pointer)}
		} else {
			f, err := os.Open(file)
			if err != nil {
				return nil, err
			}
			e.OID = blobID(f, st.Size())
			f.Close()
		}
		out = append(out, e)
	}
	for d := range dirs {
		if recursive || !strings.Contains(d, "/") {
			out = append(out, TreeEntry{Type: "directory", Path: d, OID: blobID(strings.NewReader(d), int64(len(d)))})
		}
	}
	slices.SortFunc(out, func(a, b TreeEntry) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// blobID is git's id of a blob of size bytes read from r.
func blobID(r io.Reader, size int64) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", size)
	_, _ = io.Copy(h, r)
	return hex.EncodeToString(h.Sum(nil))
}
