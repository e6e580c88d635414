package backend

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/deepgo-ml/deepgo/tensor"
)

// BenchmarkAttention is one causal attention forward and backward at
// examples/bench-train's shape (4 sequences of 128 tokens, 6 heads of 64),
// full and with a 32-token window, on 1 thread and on all CPUs. FLOPs are
// the forward's two products (scores and output: keys x HS multiply-adds
// each per query and head) and the backward's four, twice as many.
func BenchmarkAttention(b *testing.B) {
	const bs, t, nh, hs = 4, 128, 6, 64
	r := rand.New(rand.NewPCG(1, 2))
	qkv := fill(b, tensor.Float32, randVals(r, bs*t*3*nh*hs))
	dout := fill(b, tensor.Float32, randVals(r, bs*t*nh*hs))
	out, dqkv := mustEmpty(b, tensor.Float32, bs*t*nh*hs), mustEmpty(b, tensor.Float32, bs*t*3*nh*hs)
	for _, threads := range []int{1, 0} {
		be := newCPU(b, threads)
		for _, window := range []int{0, 32} {
			span := AttentionSpan(t, window)
			att := mustEmpty(b, tensor.Float32, bs*nh*t*span)
			keys := 0 // keys summed over queries
			for q := range t {
				keys += min(q+1, span)
			}
			b.Run(fmt.Sprintf("%dthreads/window%d", be.Threads(), window), func(b *testing.B) {
				for b.Loop() {
					require.NoError(b, be.AttentionForward(out, att, qkv, bs, t, nh, hs, window))
					require.NoError(b, be.AttentionBackward(dqkv, dout, qkv, att, bs, t, nh, hs, window))
				}
				flops := 3 * 2 * 2 * float64(bs*nh*keys*hs)
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}
