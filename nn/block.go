package nn

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Block is GPT-2's pre-LN transformer block on a residual stream x[N, C]:
//
//	h   = x + Proj(Attn(QKV(LN1(x))))
//	out = h + FCProj(GELU(FC(LN2(h))))
type Block struct {
	Width  int
	LN1    *LayerNorm
	QKV    *Linear // C -> 3C
	Attn   Attention
	Proj   *Linear // C -> C
	LN2    *LayerNorm
	FC     *Linear // C -> 4C
	Act    GELU
	FCProj *Linear // 4C -> C
	// MoE replaces FC, Act and FCProj when set (moe.go); FC and FCProj
	// are then nil.
	MoE *MoE
	tp  *tpState // nil without tensor parallelism (see tp.go)
	sp  *spState // nil without sequence parallelism (see ulysses.go)
}

// NewBlock declares a block named name with heads heads over width channels
// and an attention window (<= 0: full causal).
func NewBlock(name string, width, heads, window int) (*Block, error) {
	if width <= 0 || heads <= 0 || width%heads != 0 {
		return nil, fmt.Errorf("nn.NewBlock(%s): width %d must be a positive multiple of heads %d", name, width, heads)
	}
	return &Block{
		Width:  width,
		LN1:    NewLayerNorm(name+".ln_1", width),
		QKV:    NewLinear(name+".attn.c_attn", width, 3*width, true),
		Attn:   Attention{Heads: heads, HeadSize: width / heads, Window: window},
		Proj:   NewLinear(name+".attn.c_proj", width, width, true),
		LN2:    NewLayerNorm(name+".ln_2", width),
		FC:     NewLinear(name+".mlp.c_fc", width, 4*width, true),
		FCProj: NewLinear(name+".mlp.c_proj", 4*width, width, true),
	}, nil
}

// Params lists the block's parameters in forward order.
func (k *Block) Params() []*model.Param {
	var ps []*model.Param
	for _, m := range append([]HasParams{k.LN1, k.QKV, k.Proj, k.LN2}, k.mlpParams()...) {
		ps = append(ps, m.Params()...)
	}
	return ps
}

// check validates every sublayer's parameters before any of them runs, so
// a bad binding fails the block before it writes anything.
func (k *Block) check(op string, dev tensor.Device, grad bool) error {
	for _, c := range []func(string, tensor.Device, bool) error{k.LN1.check, k.QKV.check, k.Proj.check, k.LN2.check, k.mlpCheck} {
		if err := c(op, dev, grad); err != nil {
			return err
		}
	}
	return nil
}

// BlockActivations are what a block's backward pass reads, for N = B*T rows.
type BlockActivations struct {
	LN1, LN1Mean, LN1Rstd *tensor.Tensor // [N, C], [N], [N]
	QKV                   *tensor.Tensor // [N, 3C]
	Att                   *tensor.Tensor // [B, H, T, Attn.Span(T)]
	AttY                  *tensor.Tensor // [N, C]
	Res2                  *tensor.Tensor // [N, C]: x + attention
	LN2, LN2Mean, LN2Rstd *tensor.Tensor // [N, C], [N], [N]
	FC, FCAct             *tensor.Tensor // [N, 4C] before and after GELU; nil in an MoE block
	// MoE is an MoE block's gate and expert activations; nil without.
	MoE *moeActs
	// QKVHeads is QKV exchanged to head shards under sequence parallelism
	// ([B, T·sp, 3C/sp], as many elements as QKV); nil without.
	QKVHeads *tensor.Tensor
}

// NewActivations allocates one block's activations for b x t tokens.
func (k *Block) NewActivations(a *Arena, b, t int) (*BlockActivations, error) {
	n, c := b*t, k.Width
	r := k.tp.rows(n) // the LayerNorms' rows: a sequence shard under Megatron SP
	var s BlockActivations
	var err error
	// attention sees whole sequences: t·sp tokens under sequence parallelism
	tt := t * k.sp.size()
	for _, f := range []struct {
		p     **tensor.Tensor
		shape []int
	}{
		{&s.LN1, []int{n, c}}, {&s.LN1Mean, []int{r}}, {&s.LN1Rstd, []int{r}}, {&s.QKV, []int{n, k.QKV.Out}},
		{&s.Att, []int{b, k.Attn.Heads, tt, k.Attn.Span(tt)}}, {&s.AttY, []int{n, k.Proj.In}}, {&s.Res2, []int{r, c}},
		{&s.LN2, []int{n, c}}, {&s.LN2Mean, []int{r}}, {&s.LN2Rstd, []int{r}},
	} {
		if *f.p, err = a.Float32(f.shape...); err != nil {
			return nil, err
		}
	}
	if k.sp != nil {
		if s.QKVHeads, err = a.Float32(n, k.QKV.Out); err != nil {
			return nil, err
		}
	}
	if err := k.newMLPActivations(a, &s, n); err != nil {
		return nil, err
	}
	return &s, nil
}

// BlockScratch is what a block needs only while it runs (the projection
// outputs, consumed at once by the residual adds, and the gradients of its
// internal activations); every block of a model shares one.
type BlockScratch struct {
	Proj, DRes2, DLN, DAttY *tensor.Tensor // [N, C]
	DQKV                    *tensor.Tensor // [N, 3C]
	DFC, DFCAct             *tensor.Tensor // [N, 4C]
	// Heads and DQKVHeads are attention's output (or its gradient) and
	// dqkv in head shards under sequence parallelism; nil without.
	Heads, DQKVHeads *tensor.Tensor
	// SeqLocal [N/tp, C] is a LayerNorm's output or a reduce-scattered
	// sum on this rank's sequence shard under Megatron sequence
	// parallelism (tp_seq.go); nil without.
	SeqLocal *tensor.Tensor
}

// NewScratch allocates a block scratch for b x t tokens.
func (k *Block) NewScratch(a *Arena, b, t int) (*BlockScratch, error) {
	n, c := b*t, k.Width
	var s BlockScratch
	var err error
	if k.tp.seqOn() {
		if s.SeqLocal, err = a.Float32(k.tp.rows(n), c); err != nil {
			return nil, err
		}
	}
	for _, f := range []struct {
		p *(*tensor.Tensor)
		w int
	}{{&s.Proj, c}, {&s.DRes2, c}, {&s.DLN, c}, {&s.DAttY, k.Proj.In}, {&s.DQKV, k.QKV.Out}, {&s.DFC, k.hidden()}, {&s.DFCAct, k.hidden()}} {
		if *f.p, err = a.Float32(n, f.w); err != nil {
			return nil, err
		}
	}
	if k.sp != nil {
		if s.Heads, err = a.Float32(n, k.Proj.In); err != nil {
			return nil, err
		}
		if s.DQKVHeads, err = a.Float32(n, k.QKV.Out); err != nil {
			return nil, err
		}
	}
	return &s, nil
}

// Forward computes out[N, C] from in[N, C] (N = b*t) on be, filling acts.
func (k *Block) Forward(be backend.NN, out, in *tensor.Tensor, acts *BlockActivations, s *BlockScratch, b, t int) error {
	if k.tp.seqOn() {
		return k.seqForward(be, out, in, acts, s, b, t)
	}
	n, dev := b*t, be.Device()
	if err := needF32("Block.Forward", dev, "out", out, n*k.Width, "in", in, n*k.Width); err != nil {
		return err
	}
	if err := k.check("Block.Forward", dev, false); err != nil {
		return err
	}
	steps := []func() error{
		func() error { return k.LN1.Forward(be, acts.LN1, acts.LN1Mean, acts.LN1Rstd, in, n) },
		func() error { return k.QKV.Forward(be, acts.QKV, acts.LN1, n) },
		func() error { return k.attend(be, acts, s, b, t) },
		func() error { return k.Proj.Forward(be, s.Proj, acts.AttY, n) },
		func() error { return k.tp.allReduce(s.Proj, n*k.Width, comm.Sum) },
		func() error { return add(be, acts.Res2, in, s.Proj, n*k.Width) },
		func() error { return k.LN2.Forward(be, acts.LN2, acts.LN2Mean, acts.LN2Rstd, acts.Res2, n) },
		func() error { return k.mlpForward(be, s.Proj, acts, n) },
		func() error { return k.tp.allReduce(s.Proj, n*k.Width, comm.Sum) },
		func() error { return add(be, out, acts.Res2, s.Proj, n*k.Width) },
	}
	for _, f := range steps {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

// Backward accumulates din[N, C] += d(out)/d(in)^T dout and every
// parameter gradient on be, from the activations Forward left in acts.
func (k *Block) Backward(be backend.NN, din, dout, in *tensor.Tensor, acts *BlockActivations, s *BlockScratch, b, t int) error {
	if k.tp.seqOn() {
		return k.seqBackward(be, din, dout, in, acts, s, b, t)
	}
	n, c, dev := b*t, k.Width, be.Device()
	if err := needF32("Block.Backward", dev, "din", din, n*c, "dout", dout, n*c, "in", in, n*c); err != nil {
		return err
	}
	if err := k.check("Block.Backward", dev, true); err != nil {
		return err
	}
	steps := []func() error{
		// the residual passes dout straight through to h
		func() error { return copyF32(be, s.DRes2, dout, n*c) },
		func() error { return k.mlpBackward(be, s.DLN, dout, acts, s, n) },
		func() error { return k.tp.allReduce(s.DLN, n*c, comm.Sum) },
		func() error { return k.LN2.Backward(be, s.DRes2, s.DLN, acts.Res2, acts.LN2Mean, acts.LN2Rstd, n) },
		func() error { return k.Proj.backwardWrite(be, s.DAttY, s.DRes2, acts.AttY, n) },
		func() error { return k.attendBackward(be, acts, s, b, t) },
		func() error { return k.QKV.backwardWrite(be, s.DLN, s.DQKV, acts.LN1, n) },
		func() error { return k.tp.allReduce(s.DLN, n*c, comm.Sum) },
		func() error { return add(be, din, din, s.DRes2, n*c) },
		func() error { return k.LN1.Backward(be, din, s.DLN, in, acts.LN1Mean, acts.LN1Rstd, n) },
	}
	for _, f := range steps {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

func add(be backend.NN, out, a, b *tensor.Tensor, n int) error {
	if err := needF32("add", be.Device(), "out", out, n, "a", a, n, "b", b, n); err != nil {
		return err
	}
	if err := be.Add(out, a, b, n); err != nil {
		return fmt.Errorf("nn: residual add: %w", err)
	}
	return nil
}

// copyF32 copies the first n elements of src into dst on be's device.
func copyF32(be backend.NN, dst, src *tensor.Tensor, n int) error {
	d, err := dst.Slice(0, n)
	if err != nil {
		return err
	}
	s, err := src.Slice(0, n)
	if err != nil {
		return err
	}
	return be.Copy(d, s)
}
