package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Each case runs one layer's C forward and backward on random inputs, checks
// them against the float64 reference (float32 tolerance), and checks the
// reference's backward against finite differences of its forward, using the
// scalar loss sum(out * R) for a fixed random R.
func TestLayerGradients(t *testing.T) {
	be := testBackend(t)
	const tol = 2e-5
	cases := []struct {
		name string
		run  func(t *testing.T, r *rand.Rand)
	}{
		{"Linear", func(t *testing.T, r *rand.Rand) {
			n, in, out := 6, 5, 7
			l := NewLinear("fc", in, out, true)
			pb, err := NewParamBuffers(l)
			require.NoError(t, err)
			defer pb.Free()
			w := setParam(t, l.W, randv(r, out*in, 1))
			b := setParam(t, l.B, randv(r, out, 1))
			xt, x := f32(t, randv(r, n*in, 1))
			dyt, dy := f32(t, randv(r, n*out, 1))
			yt, _ := f32(t, make([]float64, n*out))
			dxt, _ := f32(t, make([]float64, n*in))
			require.NoError(t, l.Forward(be, yt, xt, n))
			closeTo(t, "y", vals(t, yt), refLinear(x, w, b, n, in, out), tol)
			require.NoError(t, l.Backward(be, dxt, dyt, xt, n))
			dx, dw, db := make([]float64, n*in), make([]float64, out*in), make([]float64, out)
			refLinearBack(dx, dw, db, dy, x, w, n, in, out)
			closeTo(t, "dx", vals(t, dxt), dx, tol)
			closeTo(t, "dw", vals(t, l.W.Grad), dw, tol)
			closeTo(t, "db", vals(t, l.B.Grad), db, tol)
			loss := func() float64 { return dot(refLinear(x, w, b, n, in, out), dy) }
			fdCheck(t, "dx", x, dx, 20, loss)
			fdCheck(t, "dw", w, dw, 20, loss)
			fdCheck(t, "db", b, db, 20, loss)
		}},
		{"LayerNorm", func(t *testing.T, r *rand.Rand) {
			n, c := 5, 12
			l := NewLayerNorm("ln", c)
			pb, err := NewParamBuffers(l)
			require.NoError(t, err)
			defer pb.Free()
			w := setParam(t, l.W, randv(r, c, 1))
			b := setParam(t, l.B, randv(r, c, 1))
			xt, x := f32(t, randv(r, n*c, 2))
			dyt, dy := f32(t, randv(r, n*c, 1))
			yt, _ := f32(t, make([]float64, n*c))
			mt, _ := f32(t, make([]float64, n))
			st, _ := f32(t, make([]float64, n))
			dxt, _ := f32(t, make([]float64, n*c))
			require.NoError(t, l.Forward(be, yt, mt, st, xt, n))
			y, m, s := refLN(x, w, b, n, c)
			closeTo(t, "y", vals(t, yt), y, tol)
			require.NoError(t, l.Backward(be, dxt, dyt, xt, mt, st, n))
			dx, dw, db := make([]float64, n*c), make([]float64, c), make([]float64, c)
			refLNBack(dx, dw, db, dy, x, w, m, s, n, c)
			closeTo(t, "dx", vals(t, dxt), dx, 1e-4)
			closeTo(t, "dw", vals(t, l.W.Grad), dw, tol)
			closeTo(t, "db", vals(t, l.B.Grad), db, tol)
			loss := func() float64 { y, _, _ := refLN(x, w, b, n, c); return dot(y, dy) }
			fdCheck(t, "dx", x, dx, 30, loss)
			fdCheck(t, "dw", w, dw, 12, loss)
			fdCheck(t, "db", b, db, 12, loss)
		}},
		{"GELU", func(t *testing.T, r *rand.Rand) {
			n := 64
			xt, x := f32(t, randv(r, n, 4))
			dyt, dy := f32(t, randv(r, n, 1))
			yt, _ := f32(t, make([]float64, n))
			dxt, _ := f32(t, make([]float64, n))
			require.NoError(t, (GELU{}).Forward(be, yt, xt, n))
			closeTo(t, "y", vals(t, yt), refGelu(x), tol)
			require.NoError(t, (GELU{}).Backward(be, dxt, xt, dyt, n))
			dx := make([]float64, n)
			refGeluBack(dx, x, dy)
			closeTo(t, "dx", vals(t, dxt), dx, tol)
			fdCheck(t, "dx", x, dx, 64, func() float64 { return dot(refGelu(x), dy) })
		}},
		{"Embedding", func(t *testing.T, r *rand.Rand) {
			B, T, C, V := 2, 4, 6, 5
			e := NewEmbedding("emb", V, T, C)
			pb, err := NewParamBuffers(e)
			require.NoError(t, err)
			defer pb.Free()
			wte := setParam(t, e.Tok, randv(r, V*C, 1))
			wpe := setParam(t, e.Pos, randv(r, T*C, 1))
			tok := []int32{0, 3, 3, 1, 4, 4, 4, 2}
			tt := i32(t, tok)
			yt, _ := f32(t, make([]float64, B*T*C))
			dyt, dy := f32(t, randv(r, B*T*C, 1))
			require.NoError(t, e.Forward(be, yt, tt, B, T))
			ref := func() []float64 {
				y := make([]float64, B*T*C)
				for i := range B * T {
					for c := range C {
						y[i*C+c] = wte[int(tok[i])*C+c] + wpe[(i%T)*C+c]
					}
				}
				return y
			}
			closeTo(t, "y", vals(t, yt), ref(), 1e-7)
			require.NoError(t, e.Backward(be, dyt, tt, B, T))
			dwte, dwpe := make([]float64, V*C), make([]float64, T*C)
			for i := range B * T {
				for c := range C {
					dwte[int(tok[i])*C+c] += dy[i*C+c]
					dwpe[(i%T)*C+c] += dy[i*C+c]
				}
			}
			closeTo(t, "dwte", vals(t, e.Tok.Grad), dwte, tol)
			closeTo(t, "dwpe", vals(t, e.Pos.Grad), dwpe, tol)
			loss := func() float64 { return dot(ref(), dy) }
			fdCheck(t, "dwte", wte, dwte, 30, loss)
			fdCheck(t, "dwpe", wpe, dwpe, 24, loss)
		}},
		{"Attention", func(t *testing.T, r *rand.Rand) { attentionCase(t, be, r, 0) }},
		{"AttentionWindow2", func(t *testing.T, r *rand.Rand) { attentionCase(t, be, r, 2) }},
		{"CrossEntropy", func(t *testing.T, r *rand.Rand) {
			n, V := 6, 9
			xt, x := f32(t, randv(r, n*V, 3))
			tg := []int32{0, 8, 3, 3, 5, 1}
			tt := i32(t, tg)
			pt, _ := f32(t, make([]float64, n*V))
			lt, _ := f32(t, make([]float64, n))
			dlt, _ := f32(t, fill(n, 1/float64(n)))
			ce := CrossEntropy{Vocab: V}
			loss, err := ce.Forward(be, pt, lt, xt, tt, n)
			require.NoError(t, err)
			want, dx := refXent(x, tg, n, V)
			closeTo(t, "loss", []float64{float64(loss)}, []float64{want}, tol)
			require.NoError(t, ce.Backward(be, pt, pt, tt, dlt, n))
			closeTo(t, "dlogits", vals(t, pt), dx, tol)
			fdCheck(t, "dlogits", x, dx, 30, func() float64 { l, _ := refXent(x, tg, n, V); return l })
		}},
		// the maximum int as "unbounded": window arithmetic must not overflow
		{"AttentionWindowMaxInt", func(t *testing.T, r *rand.Rand) { attentionCase(t, be, r, math.MaxInt) }},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, rand.New(rand.NewPCG(uint64(i), 1))) })
	}
}

func attentionCase(t *testing.T, be *backend.CPU, r *rand.Rand, window int) {
	B, T, NH, HS := 2, 5, 2, 3
	C := NH * HS
	a := Attention{Heads: NH, HeadSize: HS, Window: window}
	qt, q := f32(t, randv(r, B*T*3*C, 1.5))
	dyt, dy := f32(t, randv(r, B*T*C, 1))
	yt, _ := f32(t, make([]float64, B*T*C))
	at, _ := f32(t, make([]float64, B*NH*T*a.Span(T)))
	dqt, _ := f32(t, make([]float64, B*T*3*C))
	require.NoError(t, a.Forward(be, yt, at, qt, B, T))
	y, att := refAttn(q, B, T, NH, HS, window)
	closeTo(t, "y", vals(t, yt), y, 2e-5)
	closeTo(t, "att", vals(t, at), att, 2e-5)
	require.NoError(t, a.Backward(be, dqt, dyt, qt, at, B, T))
	dq := make([]float64, B*T*3*C)
	refAttnBack(dq, dy, q, att, B, T, NH, HS, window)
	closeTo(t, "dqkv", vals(t, dqt), dq, 2e-5)
	fdCheck(t, "dqkv", q, dq, 60, func() float64 { y, _ := refAttn(q, B, T, NH, HS, window); return dot(y, dy) })
}

// setParam writes v into p's bound value (rounded to float32) and returns
// the rounded values.
func setParam(t testing.TB, p *model.Param, v []float64) []float64 {
	t.Helper()
	f, err := p.Data.Float32s()
	require.NoError(t, err)
	out := make([]float64, len(v))
	for i := range v {
		f[i] = float32(v[i])
		out[i] = float64(f[i])
	}
	return out
}

func fill(n int, v float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// Linear takes a weight bound with any shape of its element count and
// activation buffers longer than n rows, as the other layers do; the
// backend's Linear gets exact [rows, cols] views and computes the same
// bits as with exactly shaped tensors.
func TestLinearViews(t *testing.T) {
	be := testBackend(t)
	r := rand.New(rand.NewPCG(3, 4))
	const n, in, out = 3, 4, 5
	wv, bv, xv, dyv := randv(r, out*in, 1), randv(r, out, 1), randv(r, n*in, 1), randv(r, n*out, 1)
	run := func(flatW bool, extra int) (y, dx, dw, db []float64) {
		l := NewLinear("fc", in, out, true)
		w, _ := f32(t, wv) // 1-D [out*in]
		if !flatW {
			w, _ = w.Reshape(out, in)
		}
		b, _ := f32(t, bv)
		gw, _ := f32(t, make([]float64, out*in))
		gb, _ := f32(t, make([]float64, out))
		require.NoError(t, Bind(l, []*tensor.Tensor{w, b}, []*tensor.Tensor{gw, gb}))
		x, _ := f32(t, append(append([]float64(nil), xv...), make([]float64, extra*in)...))
		dy, _ := f32(t, append(append([]float64(nil), dyv...), make([]float64, extra*out)...))
		yt, _ := f32(t, make([]float64, (n+extra)*out))
		dxt, _ := f32(t, make([]float64, (n+extra)*in))
		require.NoError(t, l.Forward(be, yt, x, n))
		require.NoError(t, l.Backward(be, dxt, dy, x, n))
		return vals(t, yt), vals(t, dxt), vals(t, gw), vals(t, gb)
	}
	y0, dx0, dw0, db0 := run(false, 0)
	y1, dx1, dw1, db1 := run(true, 2)
	for _, c := range []struct {
		name      string
		got, want []float64
	}{{"y", y1[:n*out], y0}, {"dx", dx1[:n*in], dx0}, {"dw", dw1, dw0}, {"db", db1, db0}} {
		// as printed: exact, but NaN matches NaN
		assert.Equal(t, fmt.Sprint(c.want), fmt.Sprint(c.got), "%s with a flat weight and longer buffers, against exact shapes", c.name)
	}
	for i, v := range y1[n*out:] {
		require.Zero(t, v, "y[%d] past n rows: written", n*out+i)
	}
}
