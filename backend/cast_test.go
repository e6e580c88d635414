package backend

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/deepgo-ml/deepgo/csrc"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// isas lists the instruction sets this CPU can run, scalar first.
func isas() []csrc.ISA {
	out := []csrc.ISA{csrc.ISAScalar}
	best := csrc.BestISA()
	if best >= csrc.ISAAVX2 {
		out = append(out, csrc.ISAAVX2)
	}
	if best >= csrc.ISAAVX512 {
		out = append(out, csrc.ISAAVX512)
	}
	return out
}

// forEachISA runs f on a 2-thread CPU backend forced to each ISA.
func forEachISA(t *testing.T, f func(t *testing.T, b *CPU)) {
	for _, isa := range isas() {
		t.Run(isa.String(), func(t *testing.T) {
			b, err := NewCPU(2)
			require.NoError(t, err)
			defer b.Close()
			require.NoError(t, b.SetISA(isa))
			f(t, b)
		})
	}
}

func mustEmpty(t testing.TB, dt tensor.DType, n int) *tensor.Tensor {
	t.Helper()
	x, err := tensor.Empty(dt, n)
	require.NoError(t, err)
	t.Cleanup(func() { x.Free() })
	return x
}

func allPatterns(t testing.TB, dt tensor.DType) *tensor.Tensor {
	x := mustEmpty(t, dt, 1<<16)
	u, _ := x.Uint16s()
	for i := range u {
		u[i] = uint16(i)
	}
	return x
}

// Every float16 and bfloat16 pattern widens exactly and narrows back as the
// Go reference says.
func TestCastAllHalfPatterns(t *testing.T) {
	refUp := map[tensor.DType]func(uint16) float32{tensor.Float16: tensor.Float16ToFloat32, tensor.BFloat16: tensor.BFloat16ToFloat32}
	refDown := map[tensor.DType]func(float32) uint16{tensor.Float16: tensor.Float32ToFloat16, tensor.BFloat16: tensor.Float32ToBFloat16}
	forEachISA(t, func(t *testing.T, b *CPU) {
		for _, dt := range []tensor.DType{tensor.Float16, tensor.BFloat16} {
			src := allPatterns(t, dt)
			wide := mustEmpty(t, tensor.Float32, 1<<16)
			back := mustEmpty(t, dt, 1<<16)
			require.NoError(t, b.Cast([]*tensor.Tensor{wide}, []*tensor.Tensor{src}))
			require.NoError(t, b.Cast([]*tensor.Tensor{back}, []*tensor.Tensor{wide}))
			w, _ := wide.Float32s()
			bk, _ := back.Uint16s()
			// bits compared in the loop, the first few reported, then the count:
			// 2^16 values are too many to assert (or print) one by one
			bad := 0
			for i := range w {
				want := refUp[dt](uint16(i))
				if math.Float32bits(w[i]) != math.Float32bits(want) {
					if bad++; bad < 5 {
						assert.Failf(t, "widening differs from the Go reference", "%v %#04x -> float32 %#08x, want %#08x", dt, i, math.Float32bits(w[i]), math.Float32bits(want))
					}
				}
				if got, want := bk[i], refDown[dt](want); got != want {
					if bad++; bad < 5 {
						assert.Failf(t, "narrowing differs from the Go reference", "%v %#04x -> float32 -> %#04x, want %#04x", dt, i, got, want)
					}
				}
			}
			assert.Zero(t, bad, "%v: mismatches", dt)
		}
	})
}

// randomF32 fills n values: a mix of uniform bit patterns (every exponent,
// NaN and Inf included) and values at and next to the rounding boundaries of
// float16 and bfloat16 (exact ties, one ulp either side).
func randomF32(r *rand.Rand, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		switch r.IntN(4) {
		case 0, 1:
			out[i] = math.Float32frombits(r.Uint32())
		case 2: // float16 ties: low 13 bits 0x1000, +-1
			b := (r.Uint32() &^ 0x1fff) | 0x1000
			b += uint32(r.IntN(3)) - 1
			out[i] = math.Float32frombits(b)
		default: // bfloat16 ties: low 16 bits 0x8000, +-1
			b := (r.Uint32() &^ 0xffff) | 0x8000
			b += uint32(r.IntN(3)) - 1
			out[i] = math.Float32frombits(b)
		}
	}
	return out
}

func TestCastRandomFloat32(t *testing.T) {
	n := 10_000_000
	if testing.Short() {
		n = 1_000_000
	}
	vals := randomF32(rand.New(rand.NewPCG(1, 2)), n)
	src, err := tensor.FromFloat32(vals)
	require.NoError(t, err)
	defer src.Free()
	want16 := make([]uint16, n)
	wantB := make([]uint16, n)
	for i, v := range vals {
		want16[i] = tensor.Float32ToFloat16(v)
		wantB[i] = tensor.Float32ToBFloat16(v)
	}
	forEachISA(t, func(t *testing.T, b *CPU) {
		for _, c := range []struct {
			dt   tensor.DType
			want []uint16
		}{{tensor.Float16, want16}, {tensor.BFloat16, wantB}} {
			dst := mustEmpty(t, c.dt, n)
			// split into a list of odd-sized pieces to exercise the multi-tensor walk
			srcs, dsts := pieces(t, src, dst, []int{1, 7, 4093, n - 1 - 7 - 4093})
			require.NoError(t, b.Cast(dsts, srcs))
			got, _ := dst.Uint16s()
			bad := 0
			for i := range got {
				if got[i] != c.want[i] {
					if bad++; bad < 5 {
						assert.Failf(t, "cast differs from the Go reference", "%v: %g (%#08x) -> %#04x, want %#04x", c.dt, vals[i], math.Float32bits(vals[i]), got[i], c.want[i])
					}
				}
			}
			assert.Zero(t, bad, "%v: mismatches of %d", c.dt, n)
		}
	})
}

// pieces cuts src and dst into consecutive views of the given sizes.
func pieces(t testing.TB, src, dst *tensor.Tensor, sizes []int) (srcs, dsts []*tensor.Tensor) {
	off := 0
	for _, s := range sizes {
		a, err := src.Slice(off, s)
		require.NoError(t, err)
		b, err := dst.Slice(off, s)
		require.NoError(t, err)
		srcs, dsts = append(srcs, a), append(dsts, b)
		off += s
	}
	return srcs, dsts
}
