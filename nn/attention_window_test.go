package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// attRun is one forward and backward of the C attention kernels.
type attRun struct {
	out, att, dqkv []float64
	guard          []float32 // the floats just past att's T*Span(T)
}

// runAttention runs Attention a forward and backward on qkv and dout, with
// dqkv starting at dq0 (the backward accumulates). att holds exactly
// B*Heads*T*Span(T) floats followed by guard NaNs, so a write past the
// T*W band shows up in the guard.
func runAttention(t *testing.T, a Attention, B, T int, qkv, dout, dq0 []float64) attRun {
	t.Helper()
	be := testBackend(t)
	n := B * a.Heads * T * a.Span(T)
	const guard = 64
	qt, _ := f32(t, qkv)
	dyt, _ := f32(t, dout)
	dqt, _ := f32(t, dq0)
	yt, _ := f32(t, make([]float64, B*T*a.Heads*a.HeadSize))
	at, _ := f32(t, make([]float64, n+guard))
	af, err := at.Float32s()
	require.NoError(t, err)
	for i := range af {
		af[i] = float32(math.NaN())
	}
	require.NoError(t, a.Forward(be, yt, at, qt, B, T))
	require.NoError(t, a.Backward(be, dqt, dyt, qt, at, B, T))
	return attRun{out: vals(t, yt), att: vals(t, at)[:n], dqkv: vals(t, dqt), guard: append([]float32(nil), af[n:]...)}
}

// TestAttentionWindow: the windowed kernels against the float64 reference
// (forward weights and output, and the accumulated backward), the
// reference's backward against finite differences of its forward, and the
// saved weights exactly B*NH*T*min(W, T) floats: W = 1 (each query sees
// only itself), W < T, W = T and W > T, one and several heads, one and
// several query tiles.
func TestAttentionWindow(t *testing.T) {
	for i, tc := range []struct{ B, T, NH, HS, W int }{
		{1, 7, 2, 3, 1},
		{2, 9, 3, 4, 3},
		{1, 40, 2, 8, 5},
		{2, 37, 1, 16, 33},
		{2, 8, 1, 4, 8},
		{1, 6, 2, 3, 11},
		{1, 12, 4, 2, 0},
		// several 32-query tiles (csrc/nn_attention.c), the last one
		// short; with W = 40 a tile's keys start past 0 and reach the
		// most one tile can see, 32 + W - 1
		{1, 70, 2, 8, 0},
		{2, 100, 2, 4, 40},
		// past 32 KiB of tile scratch, which then comes from the heap
		{1, 300, 1, 4, 0},
		{1, 300, 1, 4, 260},
	} {
		t.Run(fmt.Sprintf("B%d_T%d_NH%d_HS%d_W%d", tc.B, tc.T, tc.NH, tc.HS, tc.W), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(i), 9))
			a := Attention{Heads: tc.NH, HeadSize: tc.HS, Window: tc.W}
			wantSpan := tc.T
			if tc.W > 0 && tc.W < tc.T {
				wantSpan = tc.W
			}
			require.Equal(t, wantSpan, a.Span(tc.T), "Span")
			C := tc.NH * tc.HS
			_, q := f32(t, randv(r, tc.B*tc.T*3*C, 1.5))
			_, dy := f32(t, randv(r, tc.B*tc.T*C, 1))
			_, dq0 := f32(t, randv(r, tc.B*tc.T*3*C, 0.5))
			got := runAttention(t, a, tc.B, tc.T, q, dy, dq0)
			for j, g := range got.guard {
				require.True(t, math.IsNaN(float64(g)), "att[%d] past the T*W band was written: %g", j, g)
			}
			y, att := refAttn(q, tc.B, tc.T, tc.NH, tc.HS, tc.W)
			require.Len(t, att, len(got.att), "reference att length")
			closeTo(t, "out", got.out, y, 2e-5)
			closeTo(t, "att", got.att, att, 2e-5)
			dq := append([]float64(nil), dq0...)
			refAttnBack(dq, dy, q, att, tc.B, tc.T, tc.NH, tc.HS, tc.W)
			closeTo(t, "dqkv", got.dqkv, dq, 2e-5)
			fdCheck(t, "dqkv", q, sub(dq, dq0), 40, func() float64 {
				y, _ := refAttn(q, tc.B, tc.T, tc.NH, tc.HS, tc.W)
				return dot(y, dy)
			})
		})
	}
}

// TestAttentionWindowCoversAll: a window of at least T keys is full causal
// attention, bit for bit (same layout, same loops, same summation order),
// including the maximum int, whose window arithmetic must not overflow.
func TestAttentionWindowCoversAll(t *testing.T) {
	const B, T, NH, HS = 2, 13, 2, 5
	r := rand.New(rand.NewPCG(5, 5))
	C := NH * HS
	_, q := f32(t, randv(r, B*T*3*C, 1.5))
	_, dy := f32(t, randv(r, B*T*C, 1))
	_, dq0 := f32(t, randv(r, B*T*3*C, 0.5))
	full := runAttention(t, Attention{Heads: NH, HeadSize: HS}, B, T, q, dy, dq0)
	for _, w := range []int{T, T + 1, 4 * T, math.MaxInt} {
		got := runAttention(t, Attention{Heads: NH, HeadSize: HS, Window: w}, B, T, q, dy, dq0)
		for _, c := range []struct {
			name      string
			got, want []float64
		}{{"out", got.out, full.out}, {"att", got.att, full.att}, {"dqkv", got.dqkv, full.dqkv}} {
			require.Len(t, c.got, len(c.want), "W=%d %s", w, c.name)
			for i := range c.want {
				require.Equal(t, math.Float64bits(c.want[i]), math.Float64bits(c.got[i]), "W=%d %s[%d]: %g, full attention %g", w, c.name, i, c.got[i], c.want[i])
			}
		}
	}
}

func sub(a, b []float64) []float64 {
	d := make([]float64, len(a))
	for i := range a {
		d[i] = a[i] - b[i]
	}
	return d
}

// TestGPTWindowMemory: a windowed GPT keeps T*W softmax weights per head
// and layer, not T*T; everything else it keeps is the same size.
func TestGPTWindowMemory(t *testing.T) {
	be := testBackend(t)
	const B, T, W = 2, 32, 4
	cfg := tinyGPT
	cfg.SeqLen = T
	r := rand.New(rand.NewPCG(1, 2))
	in, tg := tokens(r, B*T, cfg.Vocab), tokens(r, B*T, cfg.Vocab)
	full := runGPT(t, be, cfg, in, tg, B, T).g.ActivationStats()
	cfg.AttentionWindow = W
	win := runGPT(t, be, cfg, in, tg, B, T).g.ActivationStats()
	saved := int64(cfg.Layers * B * cfg.Heads * T * (T - W) * 4)
	require.Equal(t, saved, full.Bytes-win.Bytes, "activation bytes: full %d, window %d", full.Bytes, win.Bytes)
	require.Equal(t, full.ScratchBytes, win.ScratchBytes, "scratch bytes")
}
