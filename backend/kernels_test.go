package backend

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var sizes = []int{0, 1, 15, 16, 17, 63, 64, 65, 1000, 100003}

// fill makes a host tensor of dt holding vals rounded to dt.
func fill(t testing.TB, dt tensor.DType, vals []float32) *tensor.Tensor {
	t.Helper()
	x := mustEmpty(t, dt, len(vals))
	switch dt {
	case tensor.Float32:
		f, _ := x.Float32s()
		copy(f, vals)
	case tensor.Float16, tensor.BFloat16:
		u, _ := x.Uint16s()
		for i, v := range vals {
			if dt == tensor.Float16 {
				u[i] = tensor.Float32ToFloat16(v)
			} else {
				u[i] = tensor.Float32ToBFloat16(v)
			}
		}
	}
	return x
}

// read returns x's values widened to float32.
func read(t testing.TB, x *tensor.Tensor) []float32 {
	t.Helper()
	switch x.DType() {
	case tensor.Float32:
		f, _ := x.Float32s()
		return append([]float32(nil), f...)
	case tensor.Float16, tensor.BFloat16:
		u, _ := x.Uint16s()
		out := make([]float32, len(u))
		for i, v := range u {
			if x.DType() == tensor.Float16 {
				out[i] = tensor.Float16ToFloat32(v)
			} else {
				out[i] = tensor.BFloat16ToFloat32(v)
			}
		}
		return out
	}
	require.Failf(t, "read: unsupported dtype", "dtype %v", x.DType())
	return nil
}

func randVals(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

var floatTypes = []tensor.DType{tensor.Float32, tensor.Float16, tensor.BFloat16}

// Axpy adds xs of any floating dtype into ys of any floating dtype (a
// float32 gradient into a bfloat16 one, say): y + a*x in float32, rounded to
// ys' dtype once.
func TestScaleAxpy(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	forEachISA(t, func(t *testing.T, b *CPU) {
		for _, xdt := range floatTypes {
			for _, dt := range floatTypes {
				var xs, ys []*tensor.Tensor
				var xv, yv [][]float32
				for _, n := range sizes {
					x, y := fill(t, xdt, randVals(r, n)), fill(t, dt, randVals(r, n))
					xs, ys = append(xs, x), append(ys, y)
					xv, yv = append(xv, read(t, x)), append(yv, read(t, y))
				}
				const a = float32(0.37)
				require.NoError(t, b.Axpy(a, xs, ys))
				require.NoError(t, b.Scale(xs, -1.5))
				// here and below, bits are compared in the loop and a mismatch
				// fails with Failf: millions of values are too many for one
				// assertion each, and require.Equal on the slices would print
				// them whole
				for i := range xs {
					gy, gx := read(t, ys[i]), read(t, xs[i])
					for k := range gy {
						// float32(...) rounds the product: no fused multiply-add
						wy := tensor.ToHalfPrecision(dt, yv[i][k]+float32(a*xv[i][k]))
						wx := tensor.ToHalfPrecision(xdt, xv[i][k]*-1.5)
						if math.Float32bits(gy[k]) != math.Float32bits(wy) || math.Float32bits(gx[k]) != math.Float32bits(wx) {
							require.Failf(t, "axpy or scale differs", "%v into %v n=%d [%d]: axpy %g want %g; scale %g want %g", xdt, dt, sizes[i], k, gy[k], wy, gx[k], wx)
						}
					}
				}
			}
		}
	})
}

func TestSumSquaresAndNonFinite(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	forEachISA(t, func(t *testing.T, b *CPU) {
		for _, dt := range floatTypes {
			var xs []*tensor.Tensor
			var wantTotal float64
			wantPer := make([]float64, len(sizes))
			for i, n := range sizes {
				x := fill(t, dt, randVals(r, n))
				for _, v := range read(t, x) {
					wantPer[i] += float64(v) * float64(v)
				}
				wantTotal += wantPer[i]
				xs = append(xs, x)
			}
			per := make([]float64, len(xs))
			total, err := b.SumSquares(xs, per)
			require.NoError(t, err)
			assert.InDelta(t, wantTotal, total, 1e-12*wantTotal, "%v total", dt)
			for i := range per {
				assert.InDelta(t, wantPer[i], per[i], 1e-12*wantPer[i], "%v per[%d]", dt, i)
			}
			bad, err := b.NonFinite(xs)
			require.NoError(t, err, "%v finite data: NonFinite", dt)
			require.False(t, bad, "%v finite data: NonFinite", dt)
			for _, special := range []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())} {
				for _, pos := range []int{0, 50001, 100002} { // first, middle, last of the largest tensor
					x := xs[len(xs)-1]
					vals := read(t, x)
					old := vals[pos]
					vals[pos] = special
					y := fill(t, dt, vals)
					bad, err := b.NonFinite(append(append([]*tensor.Tensor{}, xs[:len(xs)-1]...), y))
					assert.NoError(t, err, "%v: NonFinite with %v at %d", dt, special, pos)
					assert.True(t, bad, "%v: %v at %d not found", dt, special, pos)
					vals[pos] = old
				}
			}
		}
	})
}

func TestPackUnpack(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	forEachISA(t, func(t *testing.T, b *CPU) {
		for _, dt := range floatTypes {
			var srcs, dsts []*tensor.Tensor
			var offs []int
			off := 0
			for _, n := range sizes {
				srcs = append(srcs, fill(t, dt, randVals(r, n)))
				dsts = append(dsts, mustEmpty(t, dt, n))
				offs = append(offs, off)
				off += n + 3 // gaps stay zero
			}
			flat := mustEmpty(t, dt, off)
			require.NoError(t, b.Pack(flat, offs, srcs))
			require.NoError(t, b.Unpack(dsts, flat, offs))
			for i := range srcs {
				a, c := read(t, srcs[i]), read(t, dsts[i])
				for k := range a {
					if math.Float32bits(a[k]) != math.Float32bits(c[k]) {
						require.Failf(t, "pack/unpack changed a value", "%v tensor %d [%d]: %g != %g", dt, i, k, c[k], a[k])
					}
				}
			}
		}
	})
}

func TestReduceListOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	forEachISA(t, func(t *testing.T, b *CPU) {
		for _, dt := range floatTypes {
			for _, n := range sizes {
				var srcs []*tensor.Tensor
				var vals [][]float32
				for j := 0; j < 3; j++ {
					x := fill(t, dt, randVals(r, n))
					srcs, vals = append(srcs, x), append(vals, read(t, x))
				}
				for _, op := range []ReduceOp{Sum, Max, Min} {
					dst := mustEmpty(t, dt, n)
					require.NoError(t, b.Reduce(op, dst, srcs))
					got := read(t, dst)
					for k := range got {
						acc := vals[0][k]
						for j := 1; j < 3; j++ {
							switch op {
							case Sum:
								acc += vals[j][k]
							case Max:
								acc = max(acc, vals[j][k])
							case Min:
								acc = min(acc, vals[j][k])
							}
						}
						if want := tensor.ToHalfPrecision(dt, acc); math.Float32bits(got[k]) != math.Float32bits(want) {
							require.Failf(t, "reduce differs from the list-order fold", "%v %v n=%d [%d]: %g want %g", dt, op, n, k, got[k], want)
						}
					}
				}
			}
		}
	})
}

// Past DG_STREAM_BYTES of output, casts and packs take the non-temporal
// store path; it must give the same bits, whatever the alignment.
func TestLargeCallsStreamingStores(t *testing.T) {
	const n = 5<<20 + 3 // 20 MiB of float32, odd
	r := rand.New(rand.NewPCG(11, 12))
	vals := randVals(r, n)
	forEachISA(t, func(t *testing.T, b *CPU) {
		src := fill(t, tensor.Float32, vals)
		// pack three pieces at odd offsets so no destination starts aligned
		flat := mustEmpty(t, tensor.Float32, n+40)
		a, _ := src.Slice(0, 1001)
		c, _ := src.Slice(1001, n/2)
		d, _ := src.Slice(1001+n/2, n-1001-n/2)
		offs := []int{3, 3 + 1001 + 5, 3 + 1001 + 5 + n/2 + 7}
		require.NoError(t, b.Pack(flat, offs, []*tensor.Tensor{a, c, d}))
		back := mustEmpty(t, tensor.Float32, n)
		x, _ := back.Slice(0, 1001)
		y, _ := back.Slice(1001, n/2)
		z, _ := back.Slice(1001+n/2, n-1001-n/2)
		require.NoError(t, b.Unpack([]*tensor.Tensor{x, y, z}, flat, offs))
		got, _ := back.Float32s()
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(vals[i]) {
				require.Failf(t, "pack/unpack changed a value", "[%d]: %g != %g", i, got[i], vals[i])
			}
		}
		// a cast into a destination that starts 2 bytes past alignment
		h := mustEmpty(t, tensor.BFloat16, n+1)
		hv, _ := h.Slice(1, n)
		require.NoError(t, b.Cast([]*tensor.Tensor{hv}, []*tensor.Tensor{src}))
		u, _ := hv.Uint16s()
		for i, v := range vals {
			if want := tensor.Float32ToBFloat16(v); u[i] != want {
				require.Failf(t, "cast differs from the Go reference", "[%d]: %#04x want %#04x", i, u[i], want)
			}
		}
	})
}
