package nn_test

import (
	"fmt"
	"testing"

	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type coster interface {
	ForwardCost(model.MicroBatch) (nn.Cost, error)
}

func TestGPTForwardCostMatchesTheFormula(t *testing.T) {
	cases := []struct {
		L, H, C, V, T, B, window int
		pairsPerHead             int64 // (query, key) pairs of one head
	}{
		{2, 2, 8, 11, 5, 3, 0, 15},  // 1+2+3+4+5
		{3, 4, 16, 7, 5, 2, 2, 9},   // 1+2+2+2+2
		{1, 1, 4, 5, 1, 1, 0, 1},    // one token
		{2, 2, 8, 11, 6, 1, 10, 21}, // a window longer than T is full causal
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("L%d_C%d_T%d_w%d", tc.L, tc.C, tc.T, tc.window), func(t *testing.T) {
			cfg := nn.GPTConfig{Layers: tc.L, Heads: tc.H, Width: tc.C, Vocab: tc.V, SeqLen: tc.T, AttentionWindow: tc.window}
			g, err := nn.NewGPT(cfg)
			require.NoError(t, err)
			mb := model.TokenBatch{B: tc.B, T: tc.T, Inputs: make([]int32, tc.B*tc.T), Targets: make([]int32, tc.B*tc.T)}.MicroBatch()
			var params, macs, flops int64
			for _, m := range g.Modules() {
				c, err := m.(coster).ForwardCost(mb)
				require.NoError(t, err)
				assert.Equal(t, m.Name(), c.Name)
				p, mc, f := c.Total()
				params, macs, flops = params+p, macs+mc, flops+f
			}
			L, C, V, N := int64(tc.L), int64(tc.C), int64(tc.V), int64(tc.B*tc.T)
			assert.Equal(t, int64(cfg.NumParams()), params, "the tied head adds no parameters")
			attnMACs := 2 * int64(tc.B) * L * C * tc.pairsPerHead // q·kᵀ and att·v over all heads
			assert.Equal(t, N*(12*L*C*C+V*C)+attnMACs, macs)
			// examples/bench-train's forward FLOPs (2N + 4·L·T_eff·C per token,
			// N without wpe) less what 2N counts for biases and LayerNorms
			// (2 per parameter), plus the elementwise work: LayerNorms (5),
			// GELU (1), softmax (1), residual and position adds (1)
			nNoPos := int64(cfg.NumParams() - tc.T*tc.C)
			benchFwd := 2*nNoPos*N + 2*attnMACs
			elementwise := N*C*5*(2*L+1) + N*4*C*L + int64(tc.B)*int64(tc.H)*L*tc.pairsPerHead + N*C*(2*L+1)
			assert.Equal(t, benchFwd-2*N*(13*L*C+2*C)+elementwise, flops)
		})
	}
	g, err := nn.NewGPT(nn.GPTConfig{Layers: 1, Heads: 1, Width: 4, Vocab: 5, SeqLen: 4})
	require.NoError(t, err)
	_, err = g.Modules()[1].(coster).ForwardCost(model.MicroBatch{Input: 3})
	assert.EqualError(t, err, "nn.GPT.ForwardCost: micro-batch input is int, want model.TokenBatch")
}

func TestBlockCostTree(t *testing.T) {
	k, err := nn.NewBlock("h.0", 8, 2, 0)
	require.NoError(t, err)
	c := k.Cost("h.0", 1, 2)
	var names []string
	var walk func(c nn.Cost, depth int)
	walk = func(c nn.Cost, depth int) {
		names = append(names, fmt.Sprintf("%d %s %s", depth, c.Kind, c.Name))
		for _, ch := range c.Children {
			walk(ch, depth+1)
		}
	}
	walk(c, 0)
	assert.Equal(t, []string{
		"0 Block h.0", "1 LayerNorm h.0.ln_1", "1 SelfAttention h.0.attn", "2 Linear h.0.attn.c_attn",
		"2 Attention h.0.attn.core", "2 Linear h.0.attn.c_proj", "1 LayerNorm h.0.ln_2", "1 MLP h.0.mlp",
		"2 Linear h.0.mlp.c_fc", "2 GELU h.0.mlp.act", "2 Linear h.0.mlp.c_proj",
	}, names)
	assert.Equal(t, int64(2*8*24), c.Children[1].Children[0].MACs, "c_attn: 2 rows x 8 x 24")
	assert.Equal(t, int64(8*24+24), c.Children[1].Children[0].Params)
}

// The MoE GPT's cost tree counts every parameter once (experts, gate,
// PR-MoE's MLP and coefficient) and K experts' MLP MACs per token, the
// most the routing can run.
func TestGPTMoECost(t *testing.T) {
	for _, residual := range []bool{false, true} {
		cfg := nn.GPTConfig{Layers: 2, Heads: 2, Width: 8, Vocab: 11, SeqLen: 5,
			MoE: nn.MoEConfig{Experts: 3, K: 2, CapacityFactor: 1, EveryN: 2, UseResidual: residual}}
		g, err := nn.NewGPT(cfg)
		require.NoError(t, err)
		mb := model.TokenBatch{B: 2, T: 5, Inputs: make([]int32, 10), Targets: make([]int32, 10)}.MicroBatch()
		var params, macs int64
		for _, m := range g.Modules() {
			c, err := m.(coster).ForwardCost(mb)
			require.NoError(t, err)
			p, mc, _ := c.Total()
			params, macs = params+p, macs+mc
		}
		assert.Equal(t, int64(cfg.NumParams()), params, "residual %v: parameters", residual)
		assert.Equal(t, int64(nn.NumParams(g)), params, "residual %v: parameters", residual)
		// against the dense GPT: the MoE block's MLP runs on K·N rows, plus
		// the gate (and PR-MoE's MLP and coefficient)
		dense, err := nn.NewGPT(nn.GPTConfig{Layers: 2, Heads: 2, Width: 8, Vocab: 11, SeqLen: 5})
		require.NoError(t, err)
		var dmacs int64
		for _, m := range dense.Modules() {
			c, _ := m.(coster).ForwardCost(mb)
			_, mc, _ := c.Total()
			dmacs += mc
		}
		N, C := int64(10), int64(8)
		extra := N*C*3 + N*8*C*C // the gate, a second expert's MLP per token
		if residual {
			extra += N*8*C*C + N*C*2
		}
		assert.Equal(t, dmacs+extra, macs, "residual %v: MACs", residual)
	}
}
