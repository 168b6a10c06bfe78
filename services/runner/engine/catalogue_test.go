package engine

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events/reason"
)

// TestClassesAreCatalogued checks that every reason Classify can give is a
// code of the arena's catalogue.
func TestClassesAreCatalogued(t *testing.T) {
	t.Parallel()
	for _, c := range classes {
		require.True(t, reason.Known(c.code), c.code)
	}
	code, _ := Classify("")
	require.True(t, reason.Known(code), code)
}
