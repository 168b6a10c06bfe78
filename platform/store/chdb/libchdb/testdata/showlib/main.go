// Command showlib imports the chDB adapter and prints where libchdb.so was
// found. The tests of package libchdb run it to check what a binary that
// links the adapter does when the library is missing.
package main

import (
	"fmt"

	_ "github.com/lowbarena/lowbarena/platform/store/chdb"
	"github.com/lowbarena/lowbarena/platform/store/chdb/libchdb"
)

func main() {
	fmt.Printf("found %s (%s)\n", libchdb.Path(), libchdb.Source())
}
