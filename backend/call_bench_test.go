package backend_test

import (
	"testing"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/tensor"
)

// BenchmarkSmallCall measures the Go side of one small kernel call (checks,
// dispatch, one cgo crossing): the per-call overhead every backend pays.
func BenchmarkSmallCall(b *testing.B) {
	be, err := backend.NewCPU(1)
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	x, err := tensor.Empty(tensor.Float32, 256)
	if err != nil {
		b.Fatal(err)
	}
	defer x.Free()
	xs := []*tensor.Tensor{x}
	b.ReportAllocs()
	for b.Loop() {
		if err := be.Scale(xs, 1); err != nil {
			b.Fatal(err)
		}
	}
}
