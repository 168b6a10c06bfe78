// Package libchdb finds libchdb.so, the chDB engine, before chdb-go looks
// for it, and stops the program with a message that says what to do when it
// is not there.
//
// chdb-go opens the library in its package init and panics when it cannot,
// before main runs, so nothing in main can explain the failure. This package
// is imported by the chDB adapter and initialized before chdb-go: Go
// initializes packages in import-path order, each step taking the first
// package whose imports are all initialized. This package imports only
// syscall, so it is ready as soon as syscall is, while chdb-go's loader
// (github.com/chdb-io/chdb-go/chdb-purego) imports os and os/exec, which are
// initialized after syscall and which sort after this package's path. So
// this package's init always runs first. Importing anything but syscall here
// would break that; the test TestInitRunsBeforeChdbGo guards it.
//
// The search, in order (the first hit wins):
//
//  1. $CHDB_LIB_PATH, when set (and then only it: a wrong explicit setting is
//     reported, not worked around);
//  2. <folder of the executable>/libchdb.so, then <that folder>/../lib/libchdb.so;
//  3. .deps/chdb/node_modules/@chdb/lib-linux-x64-gnu/libchdb.so in the working
//     folder and each folder above it (where `make deps` installs it);
//  4. /usr/local/lib/libchdb.so.
//
// When found, CHDB_LIB_PATH is set to the library's absolute path, which is
// where chdb-go then loads it from. When not found, the message goes to
// standard error and the process exits with status 3.
package libchdb

import "syscall"

// ExitCode is the status the process exits with when the library is missing.
const ExitCode = 3

// DepsPath is where `make deps` puts the library, relative to the root of
// the repository.
const DepsPath = ".deps/chdb/node_modules/@chdb/lib-linux-x64-gnu/libchdb.so"

var (
	found  string
	source string
)

// Path returns the absolute path of the libchdb.so the engine was loaded
// from.
func Path() string { return found }

// Source says which rule of the search found the library: "CHDB_LIB_PATH",
// "executable", "working directory" or "/usr/local/lib".
func Source() string { return source }

func init() {
	env, _ := syscall.Getenv("CHDB_LIB_PATH")
	exe := readlink("/proc/self/exe")
	wd, _ := syscall.Getwd()
	r := search(env, exe, wd)
	if r.path == "" {
		msg := message(r)
		_, _ = syscall.Write(2, []byte(msg))
		syscall.Exit(ExitCode)
	}
	found, source = r.path, r.source
	_ = syscall.Setenv("CHDB_LIB_PATH", r.path)
}

// result is the outcome of a search: the library, or every place looked at
// with why each one did not do.
type result struct {
	path, source string
	looked       []string // "path: why not"
	envSet       bool
}

// search looks for the library. It depends only on its arguments and the
// file system, so tests can drive it.
func search(env, exe, wd string) result {
	var r result
	try := func(p, src string) bool {
		why := check(p)
		if why == "" {
			r.path, r.source = p, src
			return true
		}
		r.looked = append(r.looked, p+" ("+why+")")
		return false
	}
	if env != "" {
		r.envSet = true
		p := env
		if p[0] != '/' && wd != "" {
			p = join(wd, p)
		}
		try(clean(p), "CHDB_LIB_PATH")
		return r
	}
	if exe != "" {
		d := dir(exe)
		if try(join(d, "libchdb.so"), "executable") || try(clean(join(d, "../lib/libchdb.so")), "executable") {
			return r
		}
	}
	if wd != "" {
		for d := clean(wd); ; d = dir(d) {
			if try(join(d, DepsPath), "working directory") {
				return r
			}
			if d == "/" {
				break
			}
		}
	}
	try("/usr/local/lib/libchdb.so", "/usr/local/lib")
	return r
}

// check returns "" when p is a regular file that starts like an ELF shared
// object, or why not.
func check(p string) string {
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		return err.Error()
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return "not a regular file"
	}
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err.Error()
	}
	defer syscall.Close(fd)
	var magic [4]byte
	n, err := syscall.Read(fd, magic[:])
	if err != nil {
		return err.Error()
	}
	if n != 4 || magic != [4]byte{0x7f, 'E', 'L', 'F'} {
		return "not an ELF shared library; a partial download or a Git LFS pointer?"
	}
	return ""
}

// message explains a failed search and how to fix it.
func message(r result) string {
	s := "lowbarena: cannot start the embedded ClickHouse engine (chDB): libchdb.so was not found.\n"
	if r.envSet {
		s += "CHDB_LIB_PATH is set, so only it was tried:\n"
	} else {
		s += "CHDB_LIB_PATH is not set; looked in:\n"
	}
	for _, l := range r.looked {
		s += "  " + l + "\n"
	}
	s += "To fix it, run `make deps` to install the npm package @chdb/lib-linux-x64-gnu@26.7.3-stable.1\n" +
		"(it puts libchdb.so under " + DepsPath + "), or set CHDB_LIB_PATH to the absolute path of libchdb.so;\n" +
		"or build without the embedded engine with -tags nochdb and use a ClickHouse server with --store clickhouse://HOST:9000/DB.\n"
	return s
}

func readlink(p string) string {
	buf := make([]byte, 4096)
	n, err := syscall.Readlink(p, buf)
	if err != nil || n <= 0 || n >= len(buf) {
		return ""
	}
	return string(buf[:n])
}

// dir returns the folder of an absolute path ("/" for "/" and "/x").
func dir(p string) string {
	for i := len(p) - 1; i > 0; i-- {
		if p[i] == '/' {
			return p[:i]
		}
	}
	return "/"
}

func join(d, rel string) string {
	if d == "" || d[len(d)-1] != '/' {
		d += "/"
	}
	return d + rel
}

// clean resolves "." and ".." in an absolute path and drops repeated and
// trailing slashes, as path.Clean does (which this package may not import).
func clean(p string) string {
	var parts []string
	start := 0
	for i := 0; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			continue
		}
		switch seg := p[start:i]; seg {
		case "", ".":
		case "..":
			if len(parts) > 0 {
				parts = parts[:len(parts)-1]
			}
		default:
			parts = append(parts, seg)
		}
		start = i + 1
	}
	out := ""
	for _, s := range parts {
		out += "/" + s
	}
	if out == "" {
		return "/"
	}
	return out
}
