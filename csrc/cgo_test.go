package csrc

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// BenchmarkCgoCall measures one Go -> C -> Go crossing on a leaf function
// that does no work; docs/design.md turns it into the rule for call sizes.
func BenchmarkCgoCall(b *testing.B) {
	s := 0
	for b.Loop() {
		s += DTypeSize(F32)
	}
	if b.N > 0 {
		require.NotZero(b, s, "dg_dtype_size returned 0")
	}
}
