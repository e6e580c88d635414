package csrc

import "testing"

// BenchmarkCgoCall measures one Go -> C -> Go crossing on a leaf function
// that does no work; docs/design.md turns it into the rule for call sizes.
func BenchmarkCgoCall(b *testing.B) {
	s := 0
	for b.Loop() {
		s += DTypeSize(F32)
	}
	if s == 0 && b.N > 0 {
		b.Fatal("dg_dtype_size returned 0")
	}
}
