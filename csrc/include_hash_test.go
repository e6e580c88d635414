package csrc

import (
	"testing"

	"github.com/deepgo-ml/deepgo/internal/inchash"
	"github.com/stretchr/testify/require"
)

// TestIncludeHashCurrent: include_hash.go matches include/*.h, so Go's
// build cache rebuilds this package when a header changes (inchash).
func TestIncludeHashCurrent(t *testing.T) {
	sum, err := inchash.Sum("include")
	require.NoError(t, err)
	require.Equal(t, sum, includeHash, "include/*.h changed: run `go generate ./csrc`, or the cached objects are stale")
}
