package backend

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/require"
)

// vocabRows are logits[n, vocab] whose rows exercise the cross-entropy's
// corners, by row index mod 9: plain, wide, all <= 0 with -0s, -Inf
// entries, only ±0, a NaN (with a payload), a +Inf, huge (weights that
// underflow), and all near 87 (no spread at all).
func vocabRows(r *rand.Rand, n, vocab int) []float32 {
	x := make([]float32, n*vocab)
	for i := range n {
		row := x[i*vocab : (i+1)*vocab]
		for j := range row {
			z := float32(r.NormFloat64())
			switch i % 9 {
			case 1:
				z *= 30
			case 2:
				z = -float32(r.Float64() * 100)
				if j%7 == 0 {
					z = float32(math.Copysign(0, -1))
				}
			case 3:
				if j%3 == 0 {
					z = float32(math.Inf(-1))
				}
			case 4:
				z = float32(math.Copysign(0, float64(j%2)-0.5))
			case 5:
				if j == 5 {
					z = math.Float32frombits(0x7fc01234)
				}
			case 6:
				if j == 11 {
					z = float32(math.Inf(1))
				}
			case 7:
				z *= 1000
			case 8:
				z = z*1e-3 + 87
			}
			row[j] = z
		}
	}
	return x
}

// goVocabXent is the vocabulary-parallel cross-entropy as package nn
// computed it in Go before the VocabParallel kernels (its host loops over
// each rank's slice, the group's all-reduces done here in rank order): the
// summed loss and every rank's gradient slice.
func goVocabXent(x []float32, tg []int32, n, vocab, size int, d float32) (float64, [][]float32) {
	v := vocab / size
	mx := make([]float32, n)
	for i := range mx {
		mx[i] = float32(math.Inf(-1))
	}
	slices := make([][]float32, size)
	for k := range size {
		s := make([]float32, n*v)
		for i := range n {
			copy(s[i*v:(i+1)*v], x[i*vocab+k*v:i*vocab+(k+1)*v])
		}
		slices[k] = s
	}
	// max: each rank's row max, then the all-reduce
	for k := range size {
		for i := range n {
			m := float32(math.Inf(-1))
			for _, z := range slices[k][i*v : (i+1)*v] {
				m = max(m, z)
			}
			mx[i] = max(mx[i], m)
		}
	}
	se, tl := make([]float32, n), make([]float32, n)
	for k := range size {
		lo := k * v
		for i := range n {
			row := slices[k][i*v : (i+1)*v]
			var t float32
			if j := int(tg[i]) - lo; j >= 0 && j < v {
				t = row[j] - mx[i]
			}
			var s float64
			for j, z := range row {
				e := float32(math.Exp(float64(z - mx[i])))
				row[j] = e
				s += float64(e)
			}
			se[i] += float32(s)
			tl[i] += t
		}
	}
	var loss float64
	for i := range n {
		loss += float64(float32(math.Log(float64(se[i])) - float64(tl[i])))
	}
	for k := range size {
		lo := k * v
		for i := range n {
			row := slices[k][i*v : (i+1)*v]
			inv := 1 / se[i]
			for j := range row {
				row[j] *= inv
			}
			if j := int(tg[i]) - lo; j >= 0 && j < v {
				row[j] -= 1
			}
			for j := range row {
				row[j] *= d
			}
		}
	}
	return loss, slices
}

// kernelVocabXent is goVocabXent through the VocabParallel kernels of be,
// one call of each per rank's slice, the all-reduces done in Go in the
// same order.
func kernelVocabXent(t *testing.T, be *CPU, x []float32, tg []int32, n, vocab, size int, d float32) (float64, [][]float32) {
	v := vocab / size
	targets := mustEmpty(t, tensor.Int32, n)
	tv, _ := targets.Int32s()
	copy(tv, tg)
	logits := make([]*tensor.Tensor, size)
	parts := make([][3]*tensor.Tensor, size) // maxes, sums, tlogits
	for k := range size {
		logits[k] = mustEmpty(t, tensor.Float32, n*v)
		s, _ := logits[k].Float32s()
		for i := range n {
			copy(s[i*v:(i+1)*v], x[i*vocab+k*v:i*vocab+(k+1)*v])
		}
		parts[k] = [3]*tensor.Tensor{mustEmpty(t, tensor.Float32, n), mustEmpty(t, tensor.Float32, n), mustEmpty(t, tensor.Float32, n)}
		require.NoError(t, be.VocabXentMax(parts[k][0], logits[k], n, v))
	}
	mx := make([]float32, n)
	for i := range mx {
		mx[i] = float32(math.Inf(-1))
		for k := range size {
			m, _ := parts[k][0].Float32s()
			mx[i] = max(mx[i], m[i])
		}
	}
	se, tl := make([]float32, n), make([]float32, n)
	for k := range size {
		m, _ := parts[k][0].Float32s()
		copy(m, mx)
		require.NoError(t, be.VocabXentExp(logits[k], parts[k][1], parts[k][2], parts[k][0], targets, n, v, k*v, vocab))
		s, _ := parts[k][1].Float32s()
		l, _ := parts[k][2].Float32s()
		for i := range n {
			se[i] += s[i]
			tl[i] += l[i]
		}
	}
	var loss float64
	for i := range n {
		loss += float64(float32(math.Log(float64(se[i])) - float64(tl[i])))
	}
	out := make([][]float32, size)
	for k := range size {
		s, _ := parts[k][1].Float32s()
		copy(s, se)
		require.NoError(t, be.VocabXentGrad(logits[k], parts[k][1], targets, d, n, v, k*v))
		out[k] = read(t, logits[k])
	}
	return loss, out
}

// The VocabParallel kernels give, bit for bit, the loss and the gradient
// the Go loops they replaced gave (NaN rows included, whose NaNs keep
// their payloads), over 1, 2 and 4 slices, on 1 and 2 threads, with
// targets on every slice.
func TestVocabXentMatchesGoLoops(t *testing.T) {
	const n, vocab = 45, 4 * 131
	for _, threads := range []int{1, 2} {
		be := newCPU(t, threads)
		for _, size := range []int{1, 2, 4} {
			for _, finite := range []bool{true, false} {
				t.Run(fmt.Sprintf("threads%d/slices%d/finite%v", threads, size, finite), func(t *testing.T) {
					r := rand.New(rand.NewPCG(uint64(size), 3))
					x := vocabRows(r, n, vocab)
					tg := make([]int32, n)
					for i := range tg {
						tg[i] = int32(r.IntN(vocab))
						if base := vocab / size * (i % size); finite && i%9 == 3 {
							tg[i] = int32(base + (4-base%3)%3) // j%3 == 1: not on a -Inf logit
						}
					}
					if finite { // no NaN and no +Inf rows: a finite loss
						for i := range n {
							if i%9 == 5 || i%9 == 6 {
								copy(x[i*vocab:(i+1)*vocab], x[:vocab])
							}
						}
					}
					wantLoss, want := goVocabXent(append([]float32(nil), x...), tg, n, vocab, size, 0.37)
					gotLoss, got := kernelVocabXent(t, be, x, tg, n, vocab, size, 0.37)
					require.Equal(t, math.Float64bits(wantLoss), math.Float64bits(gotLoss), "loss: want %v got %v", wantLoss, gotLoss)
					if finite {
						require.False(t, math.IsNaN(wantLoss) || math.IsInf(wantLoss, 0), "loss %v", wantLoss)
					}
					for k := range size {
						for i := range want[k] {
							if math.Float32bits(want[k][i]) != math.Float32bits(got[k][i]) {
								require.Failf(t, "gradient differs", "slice %d row %d column %d: want %v (%08x) got %v (%08x)", k, i/(vocab/size),
									i%(vocab/size), want[k][i], math.Float32bits(want[k][i]), got[k][i], math.Float32bits(got[k][i]))
							}
						}
					}
				})
			}
		}
	}
}

// The weights are float32(math.Exp(float64(z - max))) for every 509th
// float32 bit pattern (NaNs, infinities and subnormals among them), and
// the row max is Go's max, NaN payloads and zero signs included, for
// every pair of special values.
func TestVocabXentElementMath(t *testing.T) {
	be := newCPU(t, 2)
	const v = 4096
	var xs []float32
	for b := uint64(0); b < 1<<32; b += 509 {
		xs = append(xs, math.Float32frombits(uint32(b)))
	}
	xs = append(xs, -104, -103.97, -103.96, 88.72, 88.73, 89, 89.01, float32(math.Inf(1)), float32(math.Inf(-1)))
	n := (len(xs) + v - 1) / v
	logits := fill(t, tensor.Float32, append(xs, make([]float32, n*v-len(xs))...))
	zeros, sums, tls := fill(t, tensor.Float32, make([]float32, n)), mustEmpty(t, tensor.Float32, n), mustEmpty(t, tensor.Float32, n)
	targets := mustEmpty(t, tensor.Int32, n)
	require.NoError(t, be.VocabXentExp(logits, sums, tls, zeros, targets, n, v, 0, v))
	got := read(t, logits)
	for i, x := range xs {
		want := float32(math.Exp(float64(x - 0)))
		if math.Float32bits(want) != math.Float32bits(got[i]) {
			require.Failf(t, "weight differs from Go's", "x = %v (%08x): want %08x got %08x", x, math.Float32bits(x), math.Float32bits(want), math.Float32bits(got[i]))
		}
	}

	specials := []uint32{0x7fc00000, 0x7fc00001, 0xffc12345, 0x7fa00000, 0xffa00010, 0x00000000, 0x80000000,
		0x7f800000, 0xff800000, 0x3f800000, 0xbf800000, 0x00000001, 0x80000001}
	row := make([]float32, 0, 2*len(specials)*len(specials))
	for _, a := range specials {
		for _, b := range specials {
			row = append(row, math.Float32frombits(a), math.Float32frombits(b))
		}
	}
	pairs := len(row) / 2
	x, maxes := fill(t, tensor.Float32, row), mustEmpty(t, tensor.Float32, pairs)
	require.NoError(t, be.VocabXentMax(maxes, x, pairs, 2))
	m := read(t, maxes)
	for i := range pairs {
		want := max(max(float32(math.Inf(-1)), row[2*i]), row[2*i+1])
		require.Equal(t, math.Float32bits(want), math.Float32bits(m[i]), "max(-Inf, %08x, %08x)", math.Float32bits(row[2*i]), math.Float32bits(row[2*i+1]))
	}
}

// VocabClearRows zeroes exactly the rows whose id lies outside the slice,
// and VocabXentExp refuses a target outside the vocabulary without
// writing anything.
func TestVocabClearRowsAndTargets(t *testing.T) {
	be := newCPU(t, 1)
	const n, c, lo, v = 6, 3, 4, 2
	ids := mustEmpty(t, tensor.Int32, n)
	iv, _ := ids.Int32s()
	copy(iv, []int32{0, 4, 5, 6, 3, 5})
	vals := randVals(rand.New(rand.NewPCG(1, 2)), n*c)
	x := fill(t, tensor.Float32, vals)
	require.NoError(t, be.VocabClearRows(x, ids, n, c, lo, v))
	got := read(t, x)
	for r := range n {
		held := iv[r] >= lo && iv[r] < lo+v
		for j := range c {
			want := vals[r*c+j]
			if !held {
				want = 0
			}
			require.Equal(t, math.Float32bits(want), math.Float32bits(got[r*c+j]), "row %d (id %d) channel %d", r, iv[r], j)
		}
	}

	logits, s := fill(t, tensor.Float32, vals), mustEmpty(t, tensor.Float32, n)
	copy(iv, []int32{0, 1, 2, 8, 3, 1})
	requireArgError(t, be.VocabXentExp(logits, s, s, s, ids, n, 1, 1, 8), "VocabXentExp", "targets", "outside [0, 8)")
	require.Equal(t, vals, read(t, logits), "written despite the bad target")
}
