package backend

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newCPU(t testing.TB, threads int) *CPU {
	t.Helper()
	b, err := NewCPU(threads)
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	return b
}

// W = [[1, 2], [3, 4]], b = [0.5, -0.5], x = [1, 1] gives [3.5, 6.5] whatever
// the weights' dtype (issue 22: bfloat16 weights read as float32 gave
// [5.51 2.00]).
func TestLinearIssueNumbers(t *testing.T) {
	be := newCPU(t, 1)
	for _, dt := range floatTypes {
		w, b := fill(t, dt, []float32{1, 2, 3, 4}), fill(t, dt, []float32{0.5, -0.5})
		x, y := fill(t, tensor.Float32, []float32{1, 1}), mustEmpty(t, tensor.Float32, 2)
		w2, _ := w.Reshape(2, 2)
		require.NoError(t, be.LinearForward(y, x, w2, b))
		assert.Equal(t, []float32{3.5, 6.5}, read(t, y), "%v weights: y", dt)
	}
}

// intVals are integers in [-4, 4]: with them as activations every float32
// sum of the test is exact, so a half gradient's one rounding is checked
// bit for bit.
func intVals(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.IntN(9) - 4)
	}
	return v
}

// LinearForward and LinearBackward with every weight dtype and every
// gradient dtype against float64 on the widened weights; a half gradient
// must be exactly narrow(g0 + the call's sum) (a float32 one is added into
// row by row, as before).
func TestLinearMixed(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 9))
	const n1, n2, c, oc = 3, 5, 33, 70
	n := n1 * n2
	for _, threads := range []int{1, 3} {
		be := newCPU(t, threads)
		for _, wdt := range floatTypes {
			for _, gdt := range floatTypes {
				t.Run(fmt.Sprintf("%d threads %v weights %v grads", threads, wdt, gdt), func(t *testing.T) {
					x := fill(t, tensor.Float32, intVals(r, n*c))
					x3, _ := x.Reshape(n1, n2, c)
					dout := fill(t, tensor.Float32, intVals(r, n*oc))
					w := fill(t, wdt, randVals(r, oc*c))
					w2, _ := w.Reshape(oc, c)
					bias := fill(t, wdt, randVals(r, oc))
					g0w, g0b := randVals(r, oc*c), randVals(r, oc)
					dw, db := fill(t, gdt, g0w), fill(t, gdt, g0b)
					g0w, g0b = read(t, dw), read(t, db)
					y, dx := mustEmpty(t, tensor.Float32, n*oc), mustEmpty(t, tensor.Float32, n*c)
					require.NoError(t, be.LinearForward(y, x3, w2, bias))
					require.NoError(t, be.LinearBackward(dx, dw, db, dout, x3, w2))
					xv, dv, wv, bv := read(t, x), read(t, dout), read(t, w), read(t, bias)
					ry, rdx := make([]float64, n*oc), make([]float64, n*c)
					rdw, rdb := make([]float64, oc*c), make([]float64, oc)
					for i := range n {
						for o := range oc {
							s := float64(bv[o])
							d := float64(dv[i*oc+o])
							rdb[o] += d
							for k := range c {
								s += float64(xv[i*c+k]) * float64(wv[o*c+k])
								rdx[i*c+k] += d * float64(wv[o*c+k])
								rdw[o*c+k] += d * float64(xv[i*c+k])
							}
							ry[i*oc+o] = s
						}
					}
					near(t, "y", read(t, y), ry, 1e-5)
					near(t, "dx", read(t, dx), rdx, 1e-5)
					for _, g := range []struct {
						name string
						got  []float32
						g0   []float32
						sum  []float64
					}{{"dw", read(t, dw), g0w, rdw}, {"db", read(t, db), g0b, rdb}} {
						if gdt == tensor.Float32 { // added row by row: rounded each time
							for i := range g.sum {
								g.sum[i] += float64(g.g0[i])
							}
							near(t, g.name, g.got, g.sum, 1e-6)
							continue
						}
						for i, s := range g.sum {
							want := tensor.ToHalfPrecision(gdt, g.g0[i]+float32(s))
							require.Equal(t, want, g.got[i], "%s[%d]: want %g + %g, rounded once", g.name, i, g.g0[i], s)
						}
					}
				})
			}
		}
	}
}

// near fails when some |got-want| exceeds tol times max(1, |want|).
func near(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	for i, w := range want {
		require.InDelta(t, w, float64(got[i]), tol*math.Max(1, math.Abs(w)), "%s[%d]", what, i)
	}
}

func TestLinearBadArguments(t *testing.T) {
	be := newCPU(t, 1)
	mk := func(dt tensor.DType, shape ...int) *tensor.Tensor {
		n := 1
		for _, d := range shape {
			n *= d
		}
		x, _ := mustEmpty(t, dt, n).Reshape(shape...)
		return x
	}
	w, b, x, y := mk(tensor.BFloat16, 3, 2), mk(tensor.BFloat16, 3), mk(tensor.Float32, 4, 2), mk(tensor.Float32, 4, 3)
	cases := []struct {
		name, arg, msg string
		call           func() error
	}{
		{"w 1-D", "w", "want 2 dimensions", func() error { return be.LinearForward(y, x, mk(tensor.Float32, 6), nil) }},
		{"w int", "w", "allowed float32", func() error { return be.LinearForward(y, x, mk(tensor.Int32, 3, 2), nil) }},
		{"in columns", "in", "want last dimension 2", func() error { return be.LinearForward(y, mk(tensor.Float32, 4, 3), w, b) }},
		{"in dtype", "in", "activations are float32", func() error { return be.LinearForward(y, mk(tensor.BFloat16, 4, 2), w, b) }},
		{"out size", "out", "has 8 elements, want 12", func() error { return be.LinearForward(mk(tensor.Float32, 8), x, w, b) }},
		{"bias dtype", "b", "dtype float32, want bfloat16 like w", func() error { return be.LinearForward(y, x, w, mk(tensor.Float32, 3)) }},
		{"bias size", "b", "has 2 elements, want 3", func() error { return be.LinearForward(y, x, w, mk(tensor.BFloat16, 2)) }},
		{"dw int", "dw", "allowed float32", func() error { return be.LinearBackward(nil, mk(tensor.Int32, 3, 2), nil, y, x, w) }},
		{"db unlike dw", "db", "dtype float16, want float32 like dw", func() error {
			return be.LinearBackward(nil, mk(tensor.Float32, 3, 2), mk(tensor.Float16, 3), y, x, w)
		}},
		{"din dtype", "din", "activations are float32", func() error { return be.LinearBackward(mk(tensor.Float16, 4, 2), nil, nil, y, x, w) }},
		{"dout size", "dout", "has 8 elements, want 12", func() error { return be.LinearBackward(nil, nil, b, mk(tensor.Float32, 8), x, w) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			requireArgError(t, c.call(), "", c.arg, c.msg)
		})
	}
}

// BenchmarkLinear is one forward and one backward (all three gradients) of
// a GPT-2-small MLP projection, 768 -> 3072 over 256 tokens, with float32,
// float16 and bfloat16 weights and gradients, on 1 thread and on all CPUs.
func BenchmarkLinear(b *testing.B) {
	const n, c, oc = 256, 768, 3072
	r := rand.New(rand.NewPCG(1, 2))
	x := fill(b, tensor.Float32, randVals(r, n*c))
	dout := fill(b, tensor.Float32, randVals(r, n*oc))
	y, dx := mustEmpty(b, tensor.Float32, n*oc), mustEmpty(b, tensor.Float32, n*c)
	x2, _ := x.Reshape(n, c)
	for _, threads := range []int{1, 0} {
		be := newCPU(b, threads)
		for _, dt := range floatTypes {
			w, _ := fill(b, dt, randVals(r, oc*c)).Reshape(oc, c)
			bias := fill(b, dt, randVals(r, oc))
			dw, db := mustEmpty(b, dt, oc*c), mustEmpty(b, dt, oc)
			b.Run(fmt.Sprintf("%dthreads/%v", be.Threads(), dt), func(b *testing.B) {
				for b.Loop() {
					require.NoError(b, be.LinearForward(y, x2, w, bias))
					require.NoError(b, be.LinearBackward(dx, dw, db, dout, x2, w))
				}
				b.ReportMetric(3*2*n*c*oc*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}
