//go:build cuda

package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/csrc"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every NNKernels method against its CPU twin (csrc.Ctx, the C core with
// OpenBLAS) on the same random inputs, odd sizes (not multiples of 32),
// backward passes accumulating into non-zero gradients. Tolerances:
//
//   - bit for bit: layernorm forward and backward, the residual add, the
//     embedding forward and backward, the attention backward (from the same
//     saved weights), the cross-entropy backward and the matmul's bias
//     gradient. No transcendental enters and the CUDA kernels add in the
//     CPU's order (cuda/nn.cuh), without FMA;
//   - maxErr <= 1e-5 * max|cpu| over the tensor: the matmul's out, dinp and
//     dw (cuBLAS and OpenBLAS sum the K products in different orders: each
//     result is within ~K float32 roundings of the other), the attention
//     forward and the softmax probabilities (kept from when the
//     exponential was CUDA's expf vs glibc's; both are dg_nn_exp now);
//   - |gpu - cpu| <= 1e-6 * (1 + |x|) (scaled by |dout| for the backward):
//     GELU, whose tanhf differs by up to 2 ulp (CUDA) vs 1 (glibc), and the
//     cancellation in 1 + tanh(u) for negative x turns that into an absolute
//     error of the order of the float32 epsilon;
//   - losses: |gpu - cpu| <= 1e-5 * (1 + |cpu|) (expf, then log in double).

type nnEnv struct {
	t   *testing.T
	r   *rand.Rand
	cpu *csrc.Ctx
	gk  *NNKernels
}

func nnSetup(t *testing.T) *nnEnv {
	t.Helper()
	needDevice(t)
	gpu, err := NewBackend(0)
	require.NoError(t, err)
	cpu, err := csrc.NewCtx(0)
	require.NoError(t, err)
	t.Cleanup(func() { gpu.Close(); cpu.Close() })
	k, err := NewNNKernels(gpu)
	require.NoError(t, err)
	return &nnEnv{t: t, r: rand.New(rand.NewPCG(7, 11)), cpu: cpu, gk: k}
}

// pair is a host tensor (the CPU's operand) and its device copy.
type pair struct {
	h, d *tensor.Tensor
}

func (e *nnEnv) f32(n int, scale float64) pair {
	e.t.Helper()
	f := make([]float32, max(n, 1))
	for i := range n {
		f[i] = float32(e.r.NormFloat64() * scale)
	}
	h, err := tensor.FromFloat32(f, len(f))
	require.NoError(e.t, err)
	return pair{h, toDevice(e.t, h)}
}

func (e *nnEnv) ids(n, v int) pair {
	e.t.Helper()
	h, err := tensor.Empty(tensor.Int32, max(n, 1))
	require.NoError(e.t, err)
	raw, _ := h.RawBytes()
	for i := range n {
		id := e.r.IntN(v)
		if i%5 == 3 { /* repeated ids: the gradient sums must run in order */
			id = 1 % v
		}
		putU32(raw, i, uint32(id))
	}
	return pair{h, toDevice(e.t, h)}
}

// down copies the device half of p back and returns both as float32s.
func (e *nnEnv) down(p pair) (cpu, gpu []float32) {
	e.t.Helper()
	h, err := tensor.Empty(tensor.Float32, p.d.Numel())
	require.NoError(e.t, err)
	require.NoError(e.t, CopyToHost(h, p.d))
	g, _ := h.Float32s()
	c, _ := p.h.Float32s()
	return c, g
}

func (e *nnEnv) ok(what string, err error) {
	e.t.Helper()
	require.NoError(e.t, err, what)
}

// exact requires the same bits.
func (e *nnEnv) exact(what string, p pair) {
	e.t.Helper()
	c, g := e.down(p)
	bad, first := 0, -1
	for i := range c {
		if math.Float32bits(c[i]) != math.Float32bits(g[i]) {
			if bad++; first < 0 {
				first = i
			}
		}
	}
	if bad > 0 { // c[first] exists only then
		e.t.Logf("%s: first differing [%d] cpu %g gpu %g", what, first, c[first], g[first])
	}
	assert.Zero(e.t, bad, "%s: %d of %d elements differ", what, bad, len(c))
}

// normwise requires max|gpu - cpu| <= tol * max|cpu|.
func (e *nnEnv) normwise(what string, p pair, tol float64) {
	e.t.Helper()
	c, g := e.down(p)
	var mx, diff float64
	for i := range c {
		mx = max(mx, math.Abs(float64(c[i])))
		diff = max(diff, math.Abs(float64(c[i])-float64(g[i])))
		if math.IsNaN(float64(g[i])) != math.IsNaN(float64(c[i])) {
			diff = math.Inf(1)
		}
	}
	assert.LessOrEqual(e.t, diff, tol*mx, "%s: max |gpu - cpu| vs %g * max|cpu| (%g)", what, tol, mx)
}

// pointwise requires |gpu - cpu| <= bound(i) for every element.
func (e *nnEnv) pointwise(what string, p pair, bound func(i int) float64) {
	e.t.Helper()
	c, g := e.down(p)
	for i := range c {
		if d := math.Abs(float64(c[i]) - float64(g[i])); !assert.LessOrEqual(e.t, d, bound(i), "%s: [%d] cpu %g gpu %g, |diff|", what, i, c[i], g[i]) {
			return
		}
	}
}

func TestNNMatmul(t *testing.T) {
	e := nnSetup(t)
	for _, sz := range [][3]int{{37, 70, 45}, {1, 1, 1}, {64, 192, 96}, {5, 0, 3}} {
		n, c, oc := sz[0], sz[1], sz[2]
		for _, withBias := range []bool{true, false} {
			inp, w, out := e.f32(n*c, 1), e.f32(oc*c, 0.5), e.f32(n*oc, 1)
			var bias pair
			if withBias {
				bias = e.f32(oc, 1)
			}
			e.ok("cpu", e.cpu.MatmulForward(out.h.Ptr(), inp.h.Ptr(), w.h.Ptr(), ptrOf(bias.h), n, c, oc))
			e.ok("gpu", e.gk.MatmulForward(out.d, inp.d, w.d, bias.d, n, c, oc))
			e.normwise("matmul out", out, 1e-5)
			dout, dinp, dw, db := e.f32(n*oc, 1), e.f32(n*c, 1), e.f32(oc*c, 1), e.f32(oc, 1)
			e.ok("cpu", e.cpu.MatmulBackward(dinp.h.Ptr(), dw.h.Ptr(), db.h.Ptr(), dout.h.Ptr(), inp.h.Ptr(), w.h.Ptr(), n, c, oc))
			e.ok("gpu", e.gk.MatmulBackward(dinp.d, dw.d, db.d, dout.d, inp.d, w.d, n, c, oc))
			e.normwise("matmul dinp", dinp, 1e-5)
			e.normwise("matmul dw", dw, 1e-5)
			e.exact("matmul dbias", db)
		}
	}
	assert.NotEmpty(t, CuBLASPath(), "CuBLASPath empty after matmuls")
	t.Logf("cuBLAS: %s", CuBLASPath())
}

func TestNNLayerNorm(t *testing.T) {
	e := nnSetup(t)
	for _, sz := range [][2]int{{33, 100}, {1, 17}, {8, 768}} {
		n, c := sz[0], sz[1]
		inp, w, b := e.f32(n*c, 3), e.f32(c, 1), e.f32(c, 1)
		out, mean, rstd := e.f32(n*c, 1), e.f32(n, 1), e.f32(n, 1)
		e.ok("cpu", e.cpu.LayerNormForward(out.h.Ptr(), mean.h.Ptr(), rstd.h.Ptr(), inp.h.Ptr(), w.h.Ptr(), b.h.Ptr(), 1e-5, n, c))
		e.ok("gpu", e.gk.LayerNormForward(out.d, mean.d, rstd.d, inp.d, w.d, b.d, 1e-5, n, c))
		e.exact("layernorm out", out)
		e.exact("layernorm mean", mean)
		e.exact("layernorm rstd", rstd)
		// backward from the CPU's saved statistics (identical on both sides)
		mean, rstd = e.reup(mean), e.reup(rstd)
		dout, dinp, dw, db := e.f32(n*c, 1), e.f32(n*c, 1), e.f32(c, 1), e.f32(c, 1)
		e.ok("cpu", e.cpu.LayerNormBackward(dinp.h.Ptr(), dw.h.Ptr(), db.h.Ptr(), dout.h.Ptr(), inp.h.Ptr(), w.h.Ptr(), mean.h.Ptr(), rstd.h.Ptr(), n, c))
		e.ok("gpu", e.gk.LayerNormBackward(dinp.d, dw.d, db.d, dout.d, inp.d, w.d, mean.d, rstd.d, n, c))
		e.exact("layernorm dinp", dinp)
		e.exact("layernorm dw", dw)
		e.exact("layernorm db", db)
	}
}

// reup uploads the host half again (after a CPU kernel wrote it).
func (e *nnEnv) reup(p pair) pair {
	e.t.Helper()
	require.NoError(e.t, CopyToDevice(p.d, p.h))
	return p
}

func TestNNGELUAdd(t *testing.T) {
	e := nnSetup(t)
	const n = 10007
	x, out := e.f32(n, 3), e.f32(n, 1)
	xs, _ := x.h.Float32s()
	e.ok("cpu", e.cpu.GELUForward(out.h.Ptr(), x.h.Ptr(), n))
	e.ok("gpu", e.gk.GELUForward(out.d, x.d, n))
	e.pointwise("gelu", out, func(i int) float64 { return 1e-6 * (1 + math.Abs(float64(xs[i]))) })
	dout, dinp := e.f32(n, 1), e.f32(n, 1)
	ds, _ := dout.h.Float32s()
	di := append([]float32(nil), must(dinp.h.Float32s())...)
	e.ok("cpu", e.cpu.GELUBackward(dinp.h.Ptr(), x.h.Ptr(), dout.h.Ptr(), n))
	e.ok("gpu", e.gk.GELUBackward(dinp.d, x.d, dout.d, n))
	e.pointwise("gelu backward", dinp, func(i int) float64 {
		return 1e-6 * (math.Abs(float64(di[i])) + math.Abs(float64(ds[i]))*(1+math.Abs(float64(xs[i]))))
	})
	a, b, sum := e.f32(n, 1), e.f32(n, 1), e.f32(n, 1)
	e.ok("cpu", e.cpu.Add(sum.h.Ptr(), a.h.Ptr(), b.h.Ptr(), n))
	e.ok("gpu", e.gk.Add(sum.d, a.d, b.d, n))
	e.exact("add", sum)
	e.ok("cpu", e.cpu.Add(a.h.Ptr(), a.h.Ptr(), b.h.Ptr(), n)) // in place
	e.ok("gpu", e.gk.Add(a.d, a.d, b.d, n))
	e.exact("add in place", a)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestNNEncoder(t *testing.T) {
	e := nnSetup(t)
	const b, tt, c, v = 3, 11, 50, 23
	tok, wte, wpe, out := e.ids(b*tt, v), e.f32(v*c, 1), e.f32(tt*c, 1), e.f32(b*tt*c, 1)
	e.ok("cpu", e.cpu.EncoderForward(out.h.Ptr(), tok.h.Ptr(), wte.h.Ptr(), wpe.h.Ptr(), b, tt, c, v))
	e.ok("gpu", e.gk.EncoderForward(out.d, tok.d, wte.d, wpe.d, b, tt, c, v))
	e.exact("encoder out", out)
	dout, dwte, dwpe := e.f32(b*tt*c, 1), e.f32(v*c, 1), e.f32(tt*c, 1)
	e.ok("cpu", e.cpu.EncoderBackward(dwte.h.Ptr(), dwpe.h.Ptr(), dout.h.Ptr(), tok.h.Ptr(), b, tt, c, v))
	e.ok("gpu", e.gk.EncoderBackward(dwte.d, dwpe.d, dout.d, tok.d, b, tt, c, v))
	e.exact("encoder dwte", dwte)
	e.exact("encoder dwpe", dwpe)
	// a token outside [0, v): an error, nothing written
	raw, _ := tok.h.RawBytes()
	putU32(raw, 7, v)
	tok = e.reup(tok)
	before, _ := e.down(out)
	before = append([]float32(nil), before...)
	err := e.gk.EncoderForward(out.d, tok.d, wte.d, wpe.d, b, tt, c, v)
	require.ErrorContains(t, err, "token outside", "bad token")
	_, after := e.down(out)
	for i := range after {
		require.Equal(t, math.Float32bits(before[i]), math.Float32bits(after[i]), "bad token: out[%d] written", i)
	}
}

// The window math.MaxInt ("unbounded") is the overflow case of k + window - 1.
// att is exactly [b, nh, t, min(window, t)]: the windowed layout's T*W band.
func TestNNAttention(t *testing.T) {
	e := nnSetup(t)
	for _, sz := range [][5]int{{2, 37, 3, 40, 0}, {2, 37, 3, 40, 5}, {2, 37, 3, 40, math.MaxInt}, {1, 70, 2, 16, 0},
		{1, 70, 2, 16, 1}, {1, 70, 2, 16, 33}, {2, 37, 3, 8, 64}, {1, 1, 1, 1, 0}} {
		b, tt, nh, hs, win := sz[0], sz[1], sz[2], sz[3], sz[4]
		c := nh * hs
		qkv, out, att := e.f32(b*tt*3*c, 1), e.f32(b*tt*c, 1), e.f32(b*nh*tt*backend.AttentionSpan(tt, win), 1)
		e.ok("cpu", e.cpu.AttentionForward(out.h.Ptr(), att.h.Ptr(), qkv.h.Ptr(), b, tt, nh, hs, win))
		e.ok("gpu", e.gk.AttentionForward(out.d, att.d, qkv.d, b, tt, nh, hs, win))
		e.normwise("attention out", out, 1e-5)
		e.normwise("attention att", att, 1e-5)
		att = e.reup(att) // the backward from the same weights
		dout, dqkv := e.f32(b*tt*c, 1), e.f32(b*tt*3*c, 1)
		e.ok("cpu", e.cpu.AttentionBackward(dqkv.h.Ptr(), dout.h.Ptr(), qkv.h.Ptr(), att.h.Ptr(), b, tt, nh, hs, win))
		e.ok("gpu", e.gk.AttentionBackward(dqkv.d, dout.d, qkv.d, att.d, b, tt, nh, hs, win))
		// the CPU's tiles sum through OpenBLAS's sgemm (its order, not ours)
		e.normwise("attention dqkv", dqkv, 1e-5)
	}
}

func TestNNSoftmaxXent(t *testing.T) {
	e := nnSetup(t)
	for _, sz := range [][2]int{{19, 1000}, {1, 1}, {4, 50257}} {
		n, v := sz[0], sz[1]
		logits, tg, probs, losses := e.f32(n*v, 4), e.ids(n, v), e.f32(n*v, 1), e.f32(n, 1)
		e.ok("cpu", e.cpu.SoftmaxXentForward(probs.h.Ptr(), losses.h.Ptr(), logits.h.Ptr(), tg.h.Ptr(), n, v))
		e.ok("gpu", e.gk.SoftmaxXentForward(probs.d, losses.d, logits.d, tg.d, n, v))
		e.normwise("xent probs", probs, 1e-5)
		lc, _ := losses.h.Float32s()
		e.pointwise("xent losses", losses, func(i int) float64 { return 1e-5 * (1 + math.Abs(float64(lc[i]))) })
		probs = e.reup(probs)
		dl, dlogits := e.f32(n, 1), e.f32(n*v, 1)
		e.ok("cpu", e.cpu.SoftmaxXentBackward(dlogits.h.Ptr(), probs.h.Ptr(), tg.h.Ptr(), dl.h.Ptr(), n, v))
		e.ok("gpu", e.gk.SoftmaxXentBackward(dlogits.d, probs.d, tg.d, dl.d, n, v))
		e.exact("xent dlogits", dlogits)
		// in place: probs aliases logits
		e.ok("cpu", e.cpu.SoftmaxXentForward(logits.h.Ptr(), losses.h.Ptr(), logits.h.Ptr(), tg.h.Ptr(), n, v))
		e.ok("gpu", e.gk.SoftmaxXentForward(logits.d, losses.d, logits.d, tg.d, n, v))
		e.normwise("xent probs in place", logits, 1e-5)
	}
}

func TestNNArgErrors(t *testing.T) {
	e := nnSetup(t)
	host, _ := tensor.Empty(tensor.Float32, 4)
	d := e.f32(4, 1)
	assert.Error(t, e.gk.GELUForward(d.d, host, 4), "GELUForward accepted a host tensor")
	assert.Error(t, e.gk.GELUForward(d.d, d.d, 5), "GELUForward accepted n beyond the tensors")
	assert.Error(t, e.gk.Add(d.d, d.d, d.d, -1), "Add accepted n < 0")

}
