// Command gen writes simengine's pinned source tree as one archive:
// `go run ./internal/enginetree/gen REPO_ROOT OUT`.
package main

import (
	"fmt"
	"os"

	"github.com/lowbarena/lowbarena/domain/examples/internal/enginetree"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: gen REPO_ROOT OUT")
		os.Exit(2)
	}
	files, err := enginetree.Collect(os.Args[1])
	if err == nil {
		var data []byte
		if data, err = enginetree.Format(files); err == nil {
			err = os.WriteFile(os.Args[2], data, 0o644)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
