package nn

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var tinyGPT = GPTConfig{Layers: 2, Heads: 2, Width: 16, Vocab: 32, SeqLen: 8}

type gptRun struct {
	g    *GPT
	pb   *ParamBuffers
	loss float32
}

func runGPT(t *testing.T, be *backend.CPU, cfg GPTConfig, in, tg []int32, B, T int) gptRun {
	t.Helper()
	g, err := NewGPT(cfg)
	require.NoError(t, err)
	pb, err := NewParamBuffers(g)
	require.NoError(t, err)
	t.Cleanup(func() { g.Free(); pb.Free() })
	require.NoError(t, g.Init(1))
	// larger than GPT-2's init so that every path carries signal
	r := rand.New(rand.NewPCG(3, 3))
	for _, p := range g.Params() {
		f, _ := p.Data.Float32s()
		for i := range f {
			f[i] += float32((r.Float64()*2 - 1) * 0.3)
		}
	}
	loss, err := g.Forward(be, in, tg, B, T)
	require.NoError(t, err)
	require.NoError(t, g.Backward(be))
	return gptRun{g, pb, loss}
}

func tokens(r *rand.Rand, n, v int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(r.IntN(v))
	}
	return out
}

// TestGPTGradients: the float32 C model against the float64 reference
// (loss and every gradient, the tied wte included), and the reference
// against finite differences, for full and windowed attention.
func TestGPTGradients(t *testing.T) {
	be := testBackend(t)
	for _, tc := range []struct {
		name   string
		window int
	}{{"causal", 0}, {"window3", 3}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tinyGPT
			cfg.AttentionWindow = tc.window
			B, T := 2, 8
			r := rand.New(rand.NewPCG(11, 0))
			in, tg := tokens(r, B*T, cfg.Vocab), tokens(r, B*T, cfg.Vocab)
			run := runGPT(t, be, cfg, in, tg, B, T)
			p, grads := map[string][]float64{}, map[string][]float64{}
			for _, q := range run.g.Params() {
				p[q.Name] = vals(t, q.Data)
				grads[q.Name] = make([]float64, numel(q))
			}
			want := refGPT(cfg, p, grads, in, tg, B, T)
			closeTo(t, "loss", []float64{float64(run.loss)}, []float64{want}, 1e-5)
			for _, q := range run.g.Params() {
				closeTo(t, "grad "+q.Name, vals(t, q.Grad), grads[q.Name], 1e-4)
			}
			if testing.Short() {
				return
			}
			for _, q := range run.g.Params() {
				fdCheck(t, "ref grad "+q.Name, p[q.Name], grads[q.Name], 4, func() float64 {
					return refGPT(cfg, p, nil, in, tg, B, T)
				})
			}
		})
	}
}

// TestTiedEmbedding: wte is one parameter used twice, so its gradient is
// the sum of the head's and the embedding's contributions. The reference
// computes the two apart (its head untied, with wte's values); the C
// model's gradient must match their sum and be far from either alone, and
// finite differences of the tied reference loss must match the sum.
func TestTiedEmbedding(t *testing.T) {
	g, err := NewGPT(tinyGPT)
	require.NoError(t, err)
	defer g.Free()
	n := 0
	for _, p := range g.Params() {
		if p == g.Embed.Tok {
			n++
		}
	}
	require.Equal(t, 1, n, "wte listed %d times in Params, want once", n)
	assert.Equal(t, tinyGPT.NumParams(), NumParams(g), "NumParams against GPTConfig.NumParams")

	// every token once, so that every row of wte gets both contributions
	cfg, B, T := tinyGPT, 2, 8
	cfg.Vocab = B * T
	r := rand.New(rand.NewPCG(13, 0))
	in := make([]int32, B*T)
	for i, v := range r.Perm(B * T) {
		in[i] = int32(v)
	}
	tg := tokens(r, B*T, cfg.Vocab)
	run := runGPT(t, testBackend(t), cfg, in, tg, B, T)
	const wte = "transformer.wte.weight"
	p, grads := map[string][]float64{}, map[string][]float64{}
	for _, q := range run.g.Params() {
		p[q.Name] = vals(t, q.Data)
		grads[q.Name] = make([]float64, numel(q))
	}
	p["lm_head.weight"], grads["lm_head.weight"] = p[wte], make([]float64, len(p[wte]))
	refGPT(cfg, p, grads, in, tg, B, T)
	head, embed := grads["lm_head.weight"], grads[wte]
	sum := addv(head, embed)
	got := vals(t, run.g.Embed.Tok.Grad)
	closeTo(t, "wte grad against head + embedding", got, sum, 1e-4)
	scale := 0.0
	for _, v := range sum {
		scale = math.Max(scale, math.Abs(v))
	}
	for _, c := range []struct {
		part, other string
		v           []float64
	}{{"head", "embedding", head}, {"embedding", "head", embed}} {
		worst := 0.0
		for i := range c.v {
			worst = math.Max(worst, math.Abs(got[i]-c.v[i]))
		}
		assert.GreaterOrEqual(t, worst, 1e-2*scale, "wte grad is within %.3g of the %s's share alone (max |sum| %.3g): the %s's share is missing", worst, c.part, scale, c.other)
	}
	delete(p, "lm_head.weight")
	fdCheck(t, "tied ref grad "+wte, p[wte], sum, 8, func() float64 {
		return refGPT(cfg, p, nil, in, tg, B, T)
	})
}

// TestCheckpointing: checkpointed runs give the same loss and gradients
// bit for bit (the recompute is the same computation) and use less
// activation memory; contiguous packing reduces the buffer count.
func TestCheckpointing(t *testing.T) {
	be := testBackend(t)
	cfg := GPTConfig{Layers: 4, Heads: 2, Width: 16, Vocab: 32, SeqLen: 8}
	B, T := 2, 8
	r := rand.New(rand.NewPCG(5, 0))
	in, tg := tokens(r, B*T, cfg.Vocab), tokens(r, B*T, cfg.Vocab)
	base := runGPT(t, be, cfg, in, tg, B, T)
	baseStats := base.g.ActivationStats()
	cases := []struct {
		name string
		ck   Checkpointing
		nck  int
	}{
		{"all", Checkpointing{Enabled: true}, 4},
		{"two", Checkpointing{Enabled: true, NumberCheckpoints: 2}, 2},
		{"contiguous", Checkpointing{Enabled: true, ContiguousMemoryOptimization: true, Profile: true}, 4},
		{"too many", Checkpointing{Enabled: true, NumberCheckpoints: 9}, 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cc := cfg
			cc.Checkpointing = c.ck
			run := runGPT(t, be, cc, in, tg, B, T)
			assert.Equal(t, base.loss, run.loss, "loss (expected: without checkpointing)")
			a, _ := run.pb.Grads.Data.Float32s()
			b, _ := base.pb.Grads.Data.Float32s()
			for i := range a {
				require.Equal(t, b[i], a[i], "grad element %d (expected: without checkpointing)", i)
			}
			st := run.g.ActivationStats()
			assert.Equal(t, c.nck, st.Checkpointed, "checkpointed blocks")
			assert.Less(t, st.Bytes, baseStats.Bytes, "activation bytes not below those without checkpointing")
			if c.ck.ContiguousMemoryOptimization {
				assert.Less(t, st.Allocs, baseStats.Allocs-c.nck+1, "contiguous: buffers")
			}
			if c.ck.Profile {
				assert.Positive(t, st.Recompute, "profile: no recompute time recorded")
			}
			t.Logf("%s: activations %d bytes in %d buffers (none: %d bytes in %d)", c.name, st.Bytes, st.Allocs, baseStats.Bytes, baseStats.Allocs)
		})
	}
}

func TestGPTNotes(t *testing.T) {
	g, err := NewGPT(GPTConfig{Layers: 1, Heads: 1, Width: 4, Vocab: 4, SeqLen: 4,
		Checkpointing: Checkpointing{Enabled: true, PartitionActivations: true, CPUCheckpointing: true}})
	require.NoError(t, err)
	notes := strings.Join(g.Notes(), "\n")
	for _, w := range []string{"partition_activations: applied by the data-parallel engine", "cpu_checkpointing: applied"} {
		assert.Contains(t, notes, w)
	}
}

func TestGPTErrors(t *testing.T) {
	be := testBackend(t)
	cases := []struct {
		name, want string
		run        func(g *GPT) error
	}{
		{"token out of range", "outside [0, 32)", func(g *GPT) error {
			in := make([]int32, 8)
			in[3] = 32
			_, err := g.Forward(be, in, make([]int32, 8), 1, 8)
			return err
		}},
		{"target out of range", "outside [0, 32)", func(g *GPT) error {
			tg := make([]int32, 8)
			tg[0] = -1
			_, err := g.Forward(be, make([]int32, 8), tg, 1, 8)
			return err
		}},
		{"sequence too long", "T <= 8 (GPTConfig.SeqLen", func(g *GPT) error {
			_, err := g.Forward(be, make([]int32, 9), make([]int32, 9), 1, 9)
			return err
		}},
		{"backward first", "no forward pass", func(g *GPT) error { return g.Backward(be) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, err := NewGPT(tinyGPT)
			require.NoError(t, err)
			pb, err := NewParamBuffers(g)
			require.NoError(t, err)
			defer pb.Free()
			defer g.Free()
			assert.ErrorContains(t, c.run(g), c.want)
		})
	}
	for _, c := range []struct {
		cfg  GPTConfig
		want string
	}{
		{GPTConfig{Layers: 1, Heads: 3, Width: 16, Vocab: 4, SeqLen: 4}, "width 16, heads 3: heads must be >= 1 and width a positive multiple of heads"},
		{GPTConfig{Layers: 1, Width: 16, Vocab: 4, SeqLen: 4}, "width 16, heads 0: heads must be >= 1"},
		{GPTConfig{Layers: 1, Heads: 2, Vocab: 4, SeqLen: 4}, "width 0, heads 2: "},
		{GPTConfig{Layers: 1, Heads: 2, Width: 16, Vocab: 4}, "seq_len 0: all must be >= 1"},
	} {
		_, err := NewGPT(c.cfg)
		assert.ErrorContains(t, err, c.want, "%+v", c.cfg)
	}
	l := NewLinear("x", 2, 2, true)
	assert.ErrorContains(t, l.Forward(be, nil, nil, 1), "no value bound", "unbound Linear")
}

// onlyBackend is a Backend without the nn kernels.
type onlyBackend struct{ backend.Backend }

// elsewhere is a backend whose tensors would live on a GPU.
type elsewhere struct{ *backend.CPU }

func (elsewhere) Device() tensor.Device { return tensor.CUDA(0) }

// The GPT computes on the backend its modules' context carries (an
// engine's, or Forward's argument), else on UseBackend's; without one, or
// on one it cannot use (no nn kernels, or its weights elsewhere), it
// says what to do.
func TestGPTBackendChoice(t *testing.T) {
	be := testBackend(t)
	g, err := NewReadyGPT(tinyGPT, nil, 1)
	require.NoError(t, err)
	defer g.Free()
	in := make([]int32, 8)
	forward := func(b backend.Backend) error { _, err := g.Forward(b, in, in, 1, 8); return err }
	for _, c := range []struct {
		name  string
		use   backend.Backend // UseBackend's
		arg   backend.Backend // Forward's, carried by the modules' context
		want  []string
		unsup bool
	}{
		{"none", nil, nil, []string{"no backend", "engine", "UseBackend"}, false},
		{"no nn kernels", onlyBackend{be}, nil, []string{"backend cpu(", "offers no nn kernels", "not supported yet"}, true},
		{"no nn kernels in the context", be, onlyBackend{be}, []string{"offers no nn kernels"}, true},
		{"weights in host memory, backend on a device", nil, elsewhere{be}, []string{"transformer.wte.weight", "is on cpu", "want cuda:0 memory"}, false},
		{"the context's wins", onlyBackend{be}, be, nil, false},
		{"UseBackend's", be, nil, nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			g.UseBackend(c.use)
			err := forward(c.arg)
			if c.want == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err, "accepted")
			for _, w := range c.want {
				assert.ErrorContains(t, err, w)
			}
			assert.Equal(t, c.unsup, errors.Is(err, backend.ErrUnsupported), "errors.Is(%v, backend.ErrUnsupported)", err)
		})
	}
}

// nnBackend is a backend with the nn kernels.
type nnBackend interface {
	backend.Backend
	backend.NN
}

// kernOnly is a backend with the nn kernels but without the optional
// backend.GradWriter, as the CUDA backend is today.
type kernOnly struct{ nnBackend }

// TestGPTGradWriterFallback: on a backend without backend.GradWriter the
// layers clear their scratch gradients and accumulate instead, with the
// same bits: loss and every gradient (the tied head's too), with full and
// windowed attention.
func TestGPTGradWriterFallback(t *testing.T) {
	be := testBackend(t)
	var _ backend.GradWriter = be
	_, hidden := any(kernOnly{be}).(backend.GradWriter)
	require.False(t, hidden, "kernOnly must hide GradWriter")
	for _, window := range []int{0, 3} {
		cfg := tinyGPT
		cfg.AttentionWindow = window
		r := rand.New(rand.NewPCG(5, 7))
		in, tg := tokens(r, 2*8, cfg.Vocab), tokens(r, 2*8, cfg.Vocab)
		var losses []float32
		var grads [][]uint32
		for _, b := range []backend.Backend{be, kernOnly{be}} {
			g, err := NewReadyGPT(cfg, nil, 1)
			require.NoError(t, err)
			var loss float32
			for range 2 { // the second backward finds the scratch dirty
				loss, err = g.Forward(b, in, tg, 2, 8)
				require.NoError(t, err)
				require.NoError(t, g.Backward(b))
			}
			var bits []uint32
			for _, p := range g.Params() {
				f, err := p.Grad.Float32s()
				require.NoError(t, err)
				for _, v := range f {
					bits = append(bits, math.Float32bits(v))
				}
			}
			losses, grads = append(losses, loss), append(grads, bits)
			g.Free()
		}
		require.Equal(t, math.Float32bits(losses[0]), math.Float32bits(losses[1]), "window %d: loss", window)
		require.Equal(t, grads[0], grads[1], "window %d: gradients", window)
		require.NotZero(t, losses[0])
	}
}

// TestKeyBiasGradientIsNoise: the key third of c_attn.bias adds q . b_k to
// every score of query q, which softmax ignores, so its gradient is zero
// but for float32 rounding, many orders below the query and value thirds'.
// Runs on different arithmetic (CUDA against the CPU) therefore drift apart
// in those biases under Adam; the CUDA GPT test leaves them out for that
// reason, and this test keeps the reason true.
func TestKeyBiasGradientIsNoise(t *testing.T) {
	be := testBackend(t)
	for _, window := range []int{0, 3} {
		cfg := tinyGPT
		cfg.AttentionWindow = window
		r := rand.New(rand.NewPCG(5, 0))
		in, tg := tokens(r, 2*8, cfg.Vocab), tokens(r, 2*8, cfg.Vocab)
		run := runGPT(t, be, cfg, in, tg, 2, 8)
		seen := 0
		for _, p := range run.g.Params() {
			if !strings.HasSuffix(p.Name, "attn.c_attn.bias") {
				continue
			}
			seen++
			g, err := p.Grad.Float32s()
			require.NoError(t, err)
			c := cfg.Width
			norm := func(s []float32) float64 {
				var n float64
				for _, v := range s {
					n += float64(v) * float64(v)
				}
				return math.Sqrt(n)
			}
			q, k, v := norm(g[:c]), norm(g[c:2*c]), norm(g[2*c:])
			t.Logf("window %d %s: |dq| %.2e |dk| %.2e |dv| %.2e", window, p.Name, q, k, v)
			assert.Less(t, k, 1e-5*min(q, v), "%s: the key bias's gradient is not noise", p.Name)
		}
		assert.Equal(t, cfg.Layers, seen)
	}
}
