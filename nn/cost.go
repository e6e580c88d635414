package nn

import (
	"fmt"
	"strings"

	"github.com/deepgo-ml/deepgo/model"
)

// Cost is the analytic forward cost of a layer on one micro-batch, from
// its shapes alone (no tensor is read), laid out as the layer's tree of
// sublayers, which is what a FLOPs profiler prints. The counting follows
// DeepSpeed's flops profiler: a matrix product of m×k by k×n is m·k·n
// multiply-accumulates (MACs) and twice as many flops, a bias add is not
// counted, LayerNorm is 5 flops per element, GELU and softmax 1 and an
// elementwise add 1. Attention counts only the scores the causal (or
// windowed) kernel computes: each query meets the keys it can see, T_eff
// on average ((T+1)/2 when full causal), as examples/bench-train's FLOPs
// formula does.
type Cost struct {
	// Name is the layer's name in the model ("transformer.h.0.attn.c_attn").
	Name string
	// Kind is the layer's type ("Linear"); profiles aggregate by it.
	Kind string
	// Params, MACs and FLOPs are the layer's own, without its children's.
	Params, MACs, FLOPs int64
	// Children are the sublayers, in forward order.
	Children []Cost
}

// Total sums the cost of the layer and all its sublayers.
func (c Cost) Total() (params, macs, flops int64) {
	params, macs, flops = c.Params, c.MACs, c.FLOPs
	for _, ch := range c.Children {
		p, m, f := ch.Total()
		params, macs, flops = params+p, macs+m, flops+f
	}
	return params, macs, flops
}

func paramCount(ps ...*model.Param) int64 {
	var n int64
	for _, p := range ps {
		if p != nil {
			n += int64(numel(p))
		}
	}
	return n
}

// Cost of a forward pass over n rows.
func (l *Linear) Cost(n int) Cost {
	macs := int64(n) * int64(l.In) * int64(l.Out)
	return Cost{Name: strings.TrimSuffix(l.W.Name, ".weight"), Kind: "Linear",
		Params: paramCount(l.W, l.B), MACs: macs, FLOPs: 2 * macs}
}

// Cost of a forward pass over n rows.
func (l *LayerNorm) Cost(n int) Cost {
	return Cost{Name: strings.TrimSuffix(l.W.Name, ".weight"), Kind: "LayerNorm",
		Params: paramCount(l.W, l.B), FLOPs: 5 * int64(n) * int64(l.Width)}
}

// Cost of a forward pass over n rows of width elements.
func (GELU) Cost(name string, n, width int) Cost {
	return Cost{Name: name, Kind: "GELU", FLOPs: int64(n) * int64(width)}
}

// keysSeen is the number of (query, key) pairs of one head over t
// positions: query i sees min(i+1, window) keys (window <= 0: i+1).
func keysSeen(t, window int) int64 {
	var s int64
	for i := range t {
		k := i + 1
		if window > 0 {
			k = min(k, window)
		}
		s += int64(k)
	}
	return s
}

// Cost of the attention core on b sequences of t tokens: q·kᵀ and att·v
// over the pairs the mask keeps, and their softmax.
func (a Attention) Cost(name string, b, t int) Cost {
	pairs := int64(b) * int64(a.Heads) * keysSeen(t, a.Window)
	macs := 2 * pairs * int64(a.HeadSize)
	return Cost{Name: name, Kind: "Attention", MACs: macs, FLOPs: 2*macs + pairs}
}

// Cost of a block on b sequences of t tokens; its own flops are the two
// residual adds.
func (k *Block) Cost(name string, b, t int) Cost {
	n := b * t
	attn := Cost{Name: name + ".attn", Kind: "SelfAttention", Children: []Cost{
		k.QKV.Cost(n), k.Attn.Cost(name+".attn.core", b, t), k.Proj.Cost(n)}}
	var mlp Cost
	if k.MoE != nil {
		mlp = k.MoE.Cost(name+".mlp", n)
	} else {
		mlp = Cost{Name: name + ".mlp", Kind: "MLP", Children: []Cost{
			k.FC.Cost(n), k.Act.Cost(name+".mlp.act", n, 4*k.Width), k.FCProj.Cost(n)}}
	}
	return Cost{Name: name, Kind: "Block", FLOPs: 2 * int64(n) * int64(k.Width),
		Children: []Cost{k.LN1.Cost(n), attn, k.LN2.Cost(n), mlp}}
}

// Cost of an MoE layer on n tokens: the gate and K experts' MLP per token
// (the most the routing can run: capacity drops only lower it), counted
// as one expert's MLP over K·n rows; the parameters are all the experts';
// PR-MoE adds its dense MLP and coefficient over n rows.
func (m *MoE) Cost(name string, n int) Cost {
	k := max(m.Config.K, 1)
	fc, proj := m.FC[0].Cost(k*n), m.Proj[0].Cost(k*n)
	fc.Params *= int64(len(m.FC))
	proj.Params *= int64(len(m.Proj))
	ch := []Cost{m.WG.Cost(n), fc, m.Act.Cost(name+".act", k*n, m.Hidden), proj}
	if r := m.Res; r != nil {
		ch = append(ch, r.FC.Cost(n), m.Act.Cost(name+".mlp.act", n, m.Hidden), r.Proj.Cost(n), r.Coef.Cost(n))
	}
	return Cost{Name: name, Kind: "MoE", Children: ch}
}

// Cost of embedding b sequences of t tokens: a lookup (no flops) and the
// position add.
func (e *Embedding) Cost(b, t int) Cost {
	return Cost{Name: strings.TrimSuffix(e.Tok.Name, ".wte.weight"), Kind: "Embedding",
		Params: paramCount(e.Tok, e.Pos), FLOPs: int64(b) * int64(t) * int64(e.Width)}
}

// ForwardCost implementations of GPT's modules (the interface a profiler
// asks for, see monitor/flops): the cost of the module's forward on mb,
// whose input is the micro-batch's model.TokenBatch.

func gptBatch(mb model.MicroBatch) (b, t int, err error) {
	tb, err := asBatch(mb.Input)
	if err != nil {
		return 0, 0, fmt.Errorf("nn.GPT.ForwardCost: micro-batch input is %T, want model.TokenBatch", mb.Input)
	}
	return tb.B, tb.T, nil
}

// ForwardCost is the embedding's cost on mb.
func (m embedModule) ForwardCost(mb model.MicroBatch) (Cost, error) {
	b, t, err := gptBatch(mb)
	c := m.g.Embed.Cost(b, t)
	c.Name = m.Name()
	return c, err
}

// ForwardCost is block l's cost on mb.
func (m blockModule) ForwardCost(mb model.MicroBatch) (Cost, error) {
	b, t, err := gptBatch(mb)
	return m.g.Blocks[m.l].Cost(m.Name(), b, t), err
}

// ForwardCost is ln_f's and the output projection's cost on mb; the
// projection's weight is the embedding's (tied), so it adds no parameters.
func (m headModule) ForwardCost(mb model.MicroBatch) (Cost, error) {
	b, t, err := gptBatch(mb)
	n, cfg := int64(b)*int64(t), m.g.Config
	macs := n * int64(cfg.Width) * int64(cfg.Vocab)
	head := Cost{Name: "lm_head", Kind: "Linear", MACs: macs, FLOPs: 2 * macs}
	return Cost{Name: m.Name(), Kind: "Head", Children: []Cost{m.g.LNF.Cost(b * t), head}}, err
}
