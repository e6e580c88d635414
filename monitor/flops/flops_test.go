package flops_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/monitor/flops"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var cfg = nn.GPTConfig{Layers: 2, Heads: 2, Width: 16, Vocab: 32, SeqLen: 8}

func batch(b, t int) model.MicroBatch {
	in := make([]int32, b*t)
	for i := range in {
		in[i] = int32(i % cfg.Vocab)
	}
	return model.TokenBatch{B: b, T: t, Inputs: in, Targets: in}.MicroBatch()
}

func TestProfileRunsAndTimesEveryModule(t *testing.T) {
	be, err := backend.NewCPU(1)
	require.NoError(t, err)
	defer be.Close()
	g, err := nn.NewReadyGPT(cfg, be, 1)
	require.NoError(t, err)
	defer g.Free()
	mb := batch(2, 8)
	r, err := flops.Profile(context.Background(), g.Modules(), mb, 4)
	require.NoError(t, err)
	assert.Equal(t, 4, r.Step)
	require.Len(t, r.Root.Children, cfg.Layers+2)
	var sum time.Duration
	for _, n := range r.Root.Children {
		assert.True(t, n.Measured, n.Name)
		assert.Positive(t, n.Latency, n.Name)
		sum += n.Latency
		for _, c := range n.Children {
			assert.False(t, c.Measured, "%s: sublayers are not timed", c.Name)
		}
	}
	assert.Equal(t, sum, r.Root.Latency)
	assert.Equal(t, int64(cfg.NumParams()), r.Root.Params)
	assert.Empty(t, r.Notes)

	// the same counts as Build from the costs alone
	b, err := flops.Build(4, g.Modules(), mb, nil)
	require.NoError(t, err)
	assert.Equal(t, r.Root.FLOPs, b.Root.FLOPs)
	assert.Equal(t, r.Root.MACs, b.Root.MACs)
	assert.False(t, b.Root.Measured)
}

func TestRecorderWrapKeepsTheModule(t *testing.T) {
	g, err := nn.NewGPT(cfg)
	require.NoError(t, err)
	rec := flops.NewRecorder()
	embed := rec.Wrap(g.Modules()[0])
	res, ok := embed.(model.Resident)
	require.True(t, ok)
	assert.True(t, res.Resident(), "the tied embedding stays resident under ZeRO-3")
	assert.False(t, rec.Wrap(g.Modules()[1]).(model.Resident).Resident())
	assert.Equal(t, g.Modules()[0].Params(), embed.Params())

	// Build through wrappers sees the modules' costs
	var wrapped []model.Module
	for _, m := range g.Modules() {
		wrapped = append(wrapped, rec.Wrap(m))
	}
	a, err := flops.Build(1, wrapped, batch(1, 4), nil)
	require.NoError(t, err)
	b, err := flops.Build(1, g.Modules(), batch(1, 4), nil)
	require.NoError(t, err)
	assert.Equal(t, b.Root, a.Root)
	// an unbound model fails its forward, and the time is still recorded
	_, err = embed.Forward(context.Background(), batch(1, 4).Input)
	require.Error(t, err)
	assert.Contains(t, rec.Latencies(), "transformer.embed")
}

// plain is a module that does not know its cost.
type plain struct{ p *model.Param }

func (m plain) Name() string           { return "custom" }
func (m plain) Params() []*model.Param { return []*model.Param{m.p} }
func (m plain) Forward(context.Context, model.Activation) (model.Activation, error) {
	return nil, nil
}
func (m plain) Backward(context.Context, model.Activation) (model.Activation, error) {
	return nil, nil
}

func TestModuleWithoutCostIsANote(t *testing.T) {
	m := plain{&model.Param{Name: "w", Shape: []int{3, 5}}}
	for _, mod := range []model.Module{m, flops.NewRecorder().Wrap(m)} {
		r, err := flops.Build(1, []model.Module{mod}, model.MicroBatch{}, map[string]time.Duration{"custom": time.Millisecond})
		require.NoError(t, err)
		assert.Equal(t, int64(15), r.Root.Params)
		assert.Zero(t, r.Root.FLOPs)
		require.Len(t, r.Notes, 1)
		assert.Contains(t, r.Notes[0], "module custom (flops_test.plain): FLOPs not known")
	}
	g, err := nn.NewGPT(cfg)
	require.NoError(t, err)
	_, err = flops.Build(1, g.Modules(), model.MicroBatch{Input: 7}, nil)
	assert.ErrorContains(t, err, "flops.Build: module transformer.embed: nn.GPT.ForwardCost: micro-batch input is int, want model.TokenBatch")
}

// report is a GPT's profile with fixed latencies: 1 ms per module.
func report(t *testing.T) *flops.Report {
	g, err := nn.NewGPT(cfg)
	require.NoError(t, err)
	lat := map[string]time.Duration{}
	for _, m := range g.Modules() {
		lat[m.Name()] = time.Millisecond
	}
	r, err := flops.Build(7, g.Modules(), batch(2, 8), lat)
	require.NoError(t, err)
	return r
}

func TestReportLayout(t *testing.T) {
	r := report(t)
	r.World, r.DataParallel, r.MicroBatch = 2, 2, 2
	r.Backward, r.StepTime = 8*time.Millisecond, 4*time.Millisecond
	var b bytes.Buffer
	require.NoError(t, r.Write(&b, flops.Options{ModuleDepth: -1, TopModules: 2, Detailed: true}))
	out := b.String()
	lines := strings.Split(out, "\n")
	assert.Equal(t, "", lines[0])
	assert.Equal(t, "-------------------------- DeepSpeed Flops Profiler --------------------------", lines[1])
	assert.Equal(t, "Profile Summary at step 7:", lines[2])
	kv := func(k, v string) string {
		return k + strings.Repeat(" ", 70-len(k)) + "  " + v + strings.Repeat(" ", max(0, 8-len(v)))
	}
	// 2 blocks of 12·16²+13·16 = 3280, embeddings 32·16+8·16 = 640, ln_f 32;
	// MACs: 16 tokens x (12·2·16² + 32·16) + attention 2 products x 2
	// layers x 2 seqs x 36 pairs x 16 channels = 111104
	for _, want := range []string{
		kv("world size: ", "2"),
		kv("batch size per GPU: ", "2"),
		kv("params per GPU: ", "7.23 K"),
		kv("params of model = params per GPU * mp_size: ", "7.23 K"),
		kv("fwd MACs per GPU: ", "111.1 KMACs"),
		kv("fwd flops per GPU: ", "232.22 K"),
		kv("fwd latency: ", "4 ms"),
		kv("bwd FLOPS per GPU = 2 * fwd flops per GPU / bwd latency: ", "58.06 MFLOPS"),
		kv("FLOPS per GPU = 3 * fwd flops per GPU / iter latency: ", "43.54 MFLOPS"),
		kv("iter latency: ", "16 ms"),
		kv("samples/second: ", "250"),
		"----------------------------- Aggregated Profile per GPU -----------------------------",
		"Top 2 modules in terms of params, MACs or fwd latency at different model depths:",
		"depth 0:",
		"    params      - {'Model': '7.23 K'}",
		"depth 1:",
		"    params      - {'Block': '6.56 K', 'Embedding': '640'}",
		"    fwd latency - {'Block': '2 ms', 'Embedding': '1 ms'}",
		"depth 2:",
		"    fwd latency - not measured at this depth",
		"------------------------------ Detailed Profile per GPU ------------------------------",
		"Model(",
		"  7.23 K = 100% Params, 111.1 KMACs = 100% MACs, 4 ms = 100% latency, 58.06 MFLOPS",
		"  (transformer.embed): Embedding(640 = 8.85% Params, 0 MACs = 0% MACs, 1 ms = 25% latency, 256 KFLOPS)",
		"    (lm_head): Linear(0 = 0% Params, 8.19 KMACs = 7.37% MACs, latency not measured)",
		"  (transformer.h.0): Block(",
		"    (ln_1): LayerNorm(32 = 0.44% Params, 0 MACs = 0% MACs, latency not measured)",
		"    (attn): SelfAttention(",
		"      (c_attn): Linear(816 = 11.28% Params, 12.29 KMACs = 11.06% MACs, latency not measured)",
		"------------------------------------------------------------------------------",
	} {
		assert.Contains(t, lines, want)
	}
	assert.NotContains(t, out, "depth 3:", "module_depth -1 stops before the innermost, as DeepSpeed's loop")
	assert.Equal(t, int64(16*(12*2*16*16+32*16)+2*2*2*36*16), r.Root.MACs)
}

func TestPrintToOutputFile(t *testing.T) {
	r := report(t)
	path := filepath.Join(t.TempDir(), "prof", "flops.txt")
	require.NoError(t, flops.Print(config.FlopsProfiler{ModuleDepth: 1, TopModules: 1, OutputFile: &path}, r, nil))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(b), "Profile Summary at step 7:")
	assert.NotContains(t, string(b), "depth 1:", "module_depth 1 prints depth 0 only")
	assert.NotContains(t, string(b), "Detailed Profile")

	var out bytes.Buffer
	require.NoError(t, flops.Print(config.FlopsProfiler{ModuleDepth: -1, TopModules: 1, Detailed: true}, r, &out))
	assert.Contains(t, out.String(), "Detailed Profile per GPU")
}
