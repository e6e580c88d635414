package nn

// Megatron's sequence parallelism inside TP (TP.SequenceParallel, Korthikanti
// et al. 2022). The regions TP leaves replicated — the LayerNorms, the
// residual adds, the residual stream between blocks — are split along the
// sequence instead: of every sequence, TP rank r holds the tokens
// [r·T/n, (r+1)·T/n), so the activations between blocks take 1/n of the
// memory. The collectives change with the layout: before a column-parallel
// linear (c_attn, c_fc, the vocabulary-parallel head) an all-gather along
// the sequence replaces the identity, whose backward is a reduce-scatter
// instead of an all-reduce; after a row-parallel linear (the two c_proj,
// the embedding's vocabulary-split lookup) a reduce-scatter replaces the
// all-reduce, with an all-gather backward. A LayerNorm's parameter
// gradient on a rank covers its tokens only: each LayerNorm backward sums
// its share over the group before adding it into the bound gradient (once
// per micro-batch; Megatron does it once per step, the sum is the same),
// so the engine still sees a replicated parameter with the same gradient
// on every TP rank.
//
// In pipeline parts (NewPart) the stream stays split between stages as
// between blocks: a stage's TP rank sends its shard to the same TP rank of
// the next stage, as Megatron's p2p sends the sequence-parallel tensor, so
// only the first stage scatters (after the embedding) and only the last
// gathers (before the head). A head part without the embedding adds the
// head's wte share into its own copy of the tied weight.
//
// The gathered LayerNorm outputs stay as the column-parallel linears'
// saved inputs (Megatron re-gathers them in backward instead, trading a
// collective for [N, C] of memory per LayerNorm). A sequence is
// [B, T, C] row-major and the collectives move rank-major chunks
// [n][B][T/n][C], so both directions pass through one permutation buffer,
// on the backend's device: on the CPU the host loop below permutes it, on
// a device one TransposeBlocks does (seqPermuteOn).

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// MegatronSequenceParallel reports whether the model splits its residual
// stream along the sequence over its TP group (TP.SequenceParallel): the
// engine checks it against megatron_sequence_parallel.
func (g *GPT) MegatronSequenceParallel() bool { return g.tp.seqOn() }

// seqOn reports whether the residual stream is split along the sequence.
func (s *tpState) seqOn() bool { return s != nil && s.seq }

// rows is how many of n = B·T token rows of the residual stream this rank
// holds: n/size under sequence parallelism, else all.
func (s *tpState) rows(n int) int {
	if !s.seqOn() {
		return n
	}
	return n / s.c.Size()
}

// checkSeqLen refuses sequences the group cannot split evenly.
func (s *tpState) checkSeqLen(t int) error {
	if s.seqOn() && t%s.c.Size() != 0 {
		return fmt.Errorf("nn.GPT.Forward: sequence length T %d is not divisible by tensor_model_parallel_size %d: megatron_sequence_parallel splits every sequence evenly over the TP ranks", t, s.c.Size())
	}
	return nil
}

// buf returns the group's float32 buffer *p of at least n elements on
// the module call's device, reallocating it when smaller or elsewhere.
func (s *tpState) buf(p **tensor.Tensor, n int) (*tensor.Tensor, error) {
	return scratchOn(s.be, p, tensor.Float32, n)
}

// seqPermuteOn is seqPermute for tensors on a device: full [b, t, w] is
// [b][n][t/n·w] and parts [n][b][t/n·w], so each direction is one block
// transpose (the backend's TransposeBlocks, a copy), not n·b copies.
func seqPermuteOn(be backend.Backend, full, parts *tensor.Tensor, b, t, n, w int, toFull bool) error {
	k, ok := be.(backend.NN)
	if !ok {
		return fmt.Errorf("nn: sequence-parallel permutation on %T: no TransposeBlocks: %w", be, backend.ErrUnsupported)
	}
	run := t / n * w
	var err error
	if toFull {
		err = k.TransposeBlocks(full, parts, n, b, run)
	} else {
		err = k.TransposeBlocks(parts, full, b, n, run)
	}
	if err != nil {
		return fmt.Errorf("nn: sequence-parallel permutation: %w", err)
	}
	return nil
}

// seqPermute moves a [b, t, w] sequence batch between full and the
// rank-major layout parts[n][b][t/n][w] the collectives use.
func seqPermute(full, parts []float32, b, t, n, w int, toFull bool) {
	tl := t / n
	for r := 0; r < n; r++ {
		for i := 0; i < b; i++ {
			p := parts[(r*b+i)*tl*w : (r*b+i+1)*tl*w]
			f := full[(i*t+r*tl)*w : (i*t+r*tl+tl)*w]
			if toFull {
				copy(f, p)
			} else {
				copy(p, f)
			}
		}
	}
}

// gatherSeq all-gathers every rank's sequence shard local[b·t/n, w] into
// full[b·t, w].
func (s *tpState) gatherSeq(full, local *tensor.Tensor, b, t, w int) error {
	n, rows := s.c.Size(), b*t
	buf, err := s.buf(&s.seqBuf, rows*w)
	if err != nil {
		return err
	}
	dst, err := buf.Slice(0, rows*w)
	if err != nil {
		return err
	}
	src, err := local.Slice(0, rows/n*w)
	if err != nil {
		return err
	}
	if err := s.c.AllGather(s.context(), dst, src); err != nil {
		return fmt.Errorf("nn: sequence-parallel all-gather: %w", err)
	}
	if onDevice(s.be) {
		return seqPermuteOn(s.be, full, dst, b, t, n, w, true)
	}
	f, err := full.Float32s()
	if err != nil {
		return err
	}
	p, _ := dst.Float32s()
	seqPermute(f, p, b, t, n, w, true)
	return nil
}

// scatterSeq sums full[b·t, w] over the group and leaves this rank's
// sequence shard of the sum in local[b·t/n, w].
func (s *tpState) scatterSeq(local, full *tensor.Tensor, b, t, w int) error {
	n, rows := s.c.Size(), b*t
	buf, err := s.buf(&s.seqBuf, rows*w)
	if err != nil {
		return err
	}
	src, err := buf.Slice(0, rows*w)
	if err != nil {
		return err
	}
	if onDevice(s.be) {
		if err := seqPermuteOn(s.be, full, src, b, t, n, w, false); err != nil {
			return err
		}
	} else {
		f, err := full.Float32s()
		if err != nil {
			return err
		}
		p, _ := src.Float32s()
		seqPermute(f, p, b, t, n, w, false)
	}
	dst, err := local.Slice(0, rows/n*w)
	if err != nil {
		return err
	}
	if err := s.c.ReduceScatter(s.context(), dst, src, comm.Sum); err != nil {
		return fmt.Errorf("nn: sequence-parallel reduce-scatter: %w", err)
	}
	return nil
}

// lnBackward is l.Backward on this rank's n token rows, with the
// parameter gradients summed over the group before they are added into
// the bound ones (which may be half precision: one rounding).
func (s *tpState) lnBackward(be backend.NN, l *LayerNorm, din, dout, in, mean, rstd *tensor.Tensor, n int) error {
	const op = "LayerNorm.Backward"
	dev := be.Device()
	if err := l.check(op, dev, true); err != nil {
		return err
	}
	if err := needF32(op, dev, "din", din, n*l.Width, "dout", dout, n*l.Width, "mean", mean, n, "rstd", rstd, n, "in", in, n*l.Width); err != nil {
		return err
	}
	buf, err := s.buf(&s.lnGrad, 2*l.Width)
	if err != nil {
		return err
	}
	dw, _ := buf.Slice(0, l.Width)
	db, _ := buf.Slice(l.Width, l.Width)
	if err := zero(be, dw, db); err != nil {
		return err
	}
	if err := be.LayerNormBackward(din, dw, db, dout, in, l.W.Data, mean, rstd, n, l.Width); err != nil {
		return fmt.Errorf("nn.%s(%s): %w", op, l.W.Name, err)
	}
	if err := s.allReduce(buf, 2*l.Width, comm.Sum); err != nil {
		return err
	}
	// the kernels come from a backend.Backend (GPT.compute), which has Axpy
	ax, ok := be.(interface {
		Axpy(alpha float32, xs, ys []*tensor.Tensor) error
	})
	if !ok {
		return fmt.Errorf("nn.%s(%s): sequence parallelism on %T: no Axpy: %w", op, l.W.Name, be, backend.ErrUnsupported)
	}
	// a frozen weight or bias (model.Param.Frozen) takes no gradient; the
	// sum above still runs, the same on every rank of the group
	var xs, ys []*tensor.Tensor
	for i, p := range []*model.Param{l.W, l.B} {
		if g := gradOf(p); g != nil {
			xs, ys = append(xs, []*tensor.Tensor{dw, db}[i]), append(ys, g)
		}
	}
	if len(xs) == 0 {
		return nil
	}
	if err := ax.Axpy(1, xs, ys); err != nil {
		return fmt.Errorf("nn.%s(%s): sequence-parallel gradient: %w", op, l.W.Name, err)
	}
	return nil
}

// seqForward is Forward with in and out this rank's sequence shards
// [b·t/n, C]; the attention and MLP internals stay whole sequences.
func (k *Block) seqForward(be backend.NN, out, in *tensor.Tensor, a *BlockActivations, s *BlockScratch, b, t int) error {
	n, c, ts := b*t, k.Width, k.tp
	r := ts.rows(n)
	if err := needF32("Block.Forward", be.Device(), "out", out, r*c, "in", in, r*c); err != nil {
		return err
	}
	if err := k.check("Block.Forward", be.Device(), false); err != nil {
		return err
	}
	steps := []func() error{
		func() error { return k.LN1.Forward(be, s.SeqLocal, a.LN1Mean, a.LN1Rstd, in, r) },
		func() error { return ts.gatherSeq(a.LN1, s.SeqLocal, b, t, c) },
		func() error { return k.QKV.Forward(be, a.QKV, a.LN1, n) },
		func() error { return k.attend(be, a, s, b, t) },
		func() error { return k.Proj.Forward(be, s.Proj, a.AttY, n) },
		func() error { return ts.scatterSeq(s.SeqLocal, s.Proj, b, t, c) },
		func() error { return add(be, a.Res2, in, s.SeqLocal, r*c) },
		func() error { return k.LN2.Forward(be, s.SeqLocal, a.LN2Mean, a.LN2Rstd, a.Res2, r) },
		func() error { return ts.gatherSeq(a.LN2, s.SeqLocal, b, t, c) },
		func() error { return k.FC.Forward(be, a.FC, a.LN2, n) },
		func() error { return k.Act.Forward(be, a.FCAct, a.FC, n*k.FC.Out) },
		func() error { return k.FCProj.Forward(be, s.Proj, a.FCAct, n) },
		func() error { return ts.scatterSeq(s.SeqLocal, s.Proj, b, t, c) },
		func() error { return add(be, out, a.Res2, s.SeqLocal, r*c) },
	}
	return run(steps)
}

// seqBackward is Backward with din, dout and in sequence shards: each
// gathered input's gradient is reduce-scattered back to the shard, and
// dout is all-gathered before each row-parallel linear's backward.
func (k *Block) seqBackward(be backend.NN, din, dout, in *tensor.Tensor, a *BlockActivations, s *BlockScratch, b, t int) error {
	n, c, ts := b*t, k.Width, k.tp
	r := ts.rows(n)
	if err := needF32("Block.Backward", be.Device(), "din", din, r*c, "dout", dout, r*c, "in", in, r*c); err != nil {
		return err
	}
	if err := k.check("Block.Backward", be.Device(), true); err != nil {
		return err
	}
	steps := []func() error{
		func() error { return copyF32(be, s.DRes2, dout, r*c) },
		func() error { return ts.gatherSeq(s.Proj, dout, b, t, c) },
		func() error { return k.FCProj.backwardWrite(be, s.DFCAct, s.Proj, a.FCAct, n) },
		func() error { return k.Act.backwardWrite(be, s.DFC, a.FC, s.DFCAct, n*k.FC.Out) },
		func() error { return k.FC.backwardWrite(be, s.DLN, s.DFC, a.LN2, n) },
		func() error { return ts.scatterSeq(s.SeqLocal, s.DLN, b, t, c) },
		func() error { return ts.lnBackward(be, k.LN2, s.DRes2, s.SeqLocal, a.Res2, a.LN2Mean, a.LN2Rstd, r) },
		func() error { return ts.gatherSeq(s.Proj, s.DRes2, b, t, c) },
		func() error { return k.Proj.backwardWrite(be, s.DAttY, s.Proj, a.AttY, n) },
		func() error { return k.attendBackward(be, a, s, b, t) },
		func() error { return k.QKV.backwardWrite(be, s.DLN, s.DQKV, a.LN1, n) },
		func() error { return ts.scatterSeq(s.SeqLocal, s.DLN, b, t, c) },
		func() error { return add(be, din, din, s.DRes2, r*c) },
		func() error { return ts.lnBackward(be, k.LN1, din, s.SeqLocal, in, a.LN1Mean, a.LN1Rstd, r) },
	}
	return run(steps)
}

// run calls steps in order and returns the first error.
func run(steps []func() error) error {
	for _, f := range steps {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

// seqHeadForward is the head on a sequence-sharded stream x: ln_f on the
// shard, then the rows all-gathered for the vocabulary-parallel logits.
func (g *GPT) seqHeadForward(k backend.NN, x *tensor.Tensor) (model.Activation, error) {
	s, c := g.st, g.Config.Width
	n := s.b * s.t
	r := g.tp.rows(n)
	wte, err := g.headWeight("GPT.Forward", k.Device())
	if err != nil {
		return nil, err
	}
	if err := needF32("GPT.Forward", k.Device(), "head input", x, r*c); err != nil {
		return nil, err
	}
	s.headIn = x
	if err := g.LNF.Forward(k, s.scratch.SeqLocal, s.lnfMean, s.lnfRstd, x, r); err != nil {
		return nil, err
	}
	if err := g.tp.gatherSeq(s.lnf, s.scratch.SeqLocal, s.b, s.t, c); err != nil {
		return nil, err
	}
	if err := k.LinearForward(s.probs, s.lnf, wte, nil); err != nil {
		return nil, fmt.Errorf("nn.GPT.Forward: head: %w", err)
	}
	return s.probs, nil
}

// seqHeadBackward returns the gradient of the head's sequence-shard input:
// ln_f's input gradient, partial per vocabulary shard, is reduce-scattered
// back to the shard.
func (g *GPT) seqHeadBackward(k backend.NN, dlogits *tensor.Tensor) (*tensor.Tensor, error) {
	s, c := g.st, g.Config.Width
	n := s.b * s.t
	r := g.tp.rows(n)
	wte, err := g.headWeight("GPT.Backward", k.Device())
	if err != nil {
		return nil, err
	}
	dlnf := s.scratch.DLN
	if err := zero(k, dlnf, s.dwteHead, s.dA); err != nil {
		return nil, err
	}
	dwte := s.dwteHead
	if g.Embed.Tok.Frozen { // no weight gradient (see the head's Backward)
		dwte = nil
	}
	if err := k.LinearBackward(dlnf, dwte, nil, dlogits, s.lnf, wte); err != nil {
		return nil, fmt.Errorf("nn.GPT.Backward: head: %w", err)
	}
	if err := g.tp.scatterSeq(s.dB, dlnf, s.b, s.t, c); err != nil {
		return nil, err
	}
	if err := g.tp.lnBackward(k, g.LNF, s.dA, s.dB, s.headIn, s.lnfMean, s.lnfRstd, r); err != nil {
		return nil, err
	}
	return s.dA, nil
}
