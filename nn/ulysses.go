package nn

// DeepSpeed-Ulysses sequence parallelism for the GPT. Each rank of an SP
// group holds T/sp consecutive tokens of every sequence of the micro-batch
// (rank r: positions [r·T/sp, (r+1)·T/sp)) and a full replica of the
// parameters (of its TP shards under TP, below). Everything but attention works token by token, so it runs on
// the local shard unchanged. Around attention, q, k and v (this rank's
// tokens, all heads) go through an all-to-all that leaves each rank all T
// tokens of Heads/sp heads; the attention kernel runs on those whole
// sequences, and a second all-to-all brings its output back to sequence
// shards before c_proj. Backward runs the conjugate exchanges in reverse
// (DeepSpeed's _SeqAllToAll swaps scatter and gather dimensions).
//
// Parameter gradients on a rank are its tokens' share; the engine sums
// them over the sequence-data-parallel group (dp × sp, DeepSpeed's
// seq_data_parallel_group) when it averages over that group, which also
// divides out the SP degree: each rank seeds the gradient of its local mean
// loss, and the mean of the sp local means is the mean over all tokens.
//
// With tensor parallelism (GPTConfig.TP too) each TP rank holds its
// Megatron shards and heads/tp heads; within the TP rank's SP group the
// all-to-alls move those local heads only (width C/tp, heads divisible by
// tp × sp), and the vocabulary-parallel embedding and cross-entropy run
// on the sequence shard over the TP group, the embedding reading its
// position rows at the shard's offsets. The residual stream is the TP
// group's replicated one, sharded along the sequence over SP; Megatron's
// own sequence parallelism (TP.SequenceParallel) is refused with it, as
// Megatron-DeepSpeed refuses --ds-sequence-parallel-size with
// --sequence-parallel.
//
// In pipeline parts (NewPart) the residual stream stays sharded between
// stages as between blocks: a stage's SP rank sends its shard to the same
// SP rank of the next stage (deepgo's pipeline engine pairs them), and a
// part's embedding and loss work on the shard as the whole model's do.

import (
	"context"
	"fmt"
	"math"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
)

// SP is a Ulysses sequence-parallel group for GPTConfig: the zero value
// (nil Comm) is no sequence parallelism. Every rank of Comm gets shard
// Comm.Rank() of each sequence (model.TokenBatch.SequenceShard).
type SP struct {
	// Comm is the group of ranks that share each sequence.
	Comm comm.Comm
}

// size is the SP degree, 1 without a group.
func (s SP) size() int {
	if s.Comm == nil {
		return 1
	}
	return s.Comm.Size()
}

// SequenceParallelSize is the SP degree the model shards its sequences
// over (1 without): the engine checks it against sequence_parallel_size,
// since a sharded model under an engine reducing over the wrong group
// would train on a wrong gradient without any error.
func (g *GPT) SequenceParallelSize() int { return g.sp.size() }

// spState is a GPT's live SP group: the comm, the context and backend of
// the module call in progress, and the buffers the all-to-alls pack into,
// on that backend's device (shared by every block: modules run one at a
// time).
type spState struct {
	c          comm.Comm
	ctx        context.Context
	be         backend.Backend
	send, recv *tensor.Tensor
}

// size is the SP degree, 1 for a nil state.
func (s *spState) size() int {
	if s == nil {
		return 1
	}
	return s.c.Size()
}

// free releases the exchange buffers.
func (s *spState) free() {
	if s == nil {
		return
	}
	freeAll(&s.send, &s.recv)
}

// bufferBytes is the exchange buffers' size (scratch: used only inside
// one block's forward or backward).
func (s *spState) bufferBytes() int64 {
	if s == nil {
		return 0
	}
	var n int64
	for _, t := range []*tensor.Tensor{s.send, s.recv} {
		if t != nil {
			n += int64(t.Bytes())
		}
	}
	return n
}

// checkSP validates that cfg's heads split over the SP group (under TP,
// a TP rank's heads over its SP group) and that Megatron's sequence
// parallelism is not asked for as well.
func checkSP(cfg GPTConfig) error {
	n := cfg.SP.size()
	if n == 1 {
		return nil
	}
	if cfg.TP.SequenceParallel {
		// Megatron-DeepSpeed refuses --ds-sequence-parallel-size > 1 with
		// --sequence-parallel too: both split the sequence
		return fmt.Errorf("nn.NewGPT: sequence_parallel_size %d (Ulysses) with megatron_sequence_parallel (TP.SequenceParallel): not supported: both split the sequence; use one of them", n)
	}
	if tp := cfg.TP.size(); tp > 1 {
		if cfg.Heads%(tp*n) != 0 {
			return fmt.Errorf("nn.NewGPT: heads %d is not divisible by tensor_model_parallel_size %d x sequence_parallel_size %d (each TP rank's heads/tp heads go heads/(tp x sp) to each Ulysses rank)", cfg.Heads, tp, n)
		}
		return nil
	}
	if cfg.Heads%n != 0 {
		return fmt.Errorf("nn.NewGPT: heads %d is not divisible by sequence_parallel_size %d (Ulysses gives each rank heads/sp heads)", cfg.Heads, n)
	}
	return nil
}

// shardSP gives every block heads/sp heads for its attention over whole
// sequences (of the TP rank's heads/tp under TP, shardTP having run); the
// parameters stay as they are.
func (g *GPT) shardSP() {
	c := g.Config.SP.Comm
	if c == nil || c.Size() == 1 {
		return
	}
	g.sp = &spState{c: c}
	for _, b := range g.Blocks {
		b.sp = g.sp
		b.Attn.Heads /= c.Size()
	}
}

// buffers returns send and recv buffers of n float32 each, on the module
// call's device.
func (s *spState) buffers(n int) (send, recv *tensor.Tensor, err error) {
	if send, err = scratchOn(s.be, &s.send, tensor.Float32, n); err != nil {
		return nil, nil, err
	}
	if recv, err = scratchOn(s.be, &s.recv, tensor.Float32, n); err != nil {
		return nil, nil, err
	}
	if send, err = send.Slice(0, n); err != nil {
		return nil, nil, err
	}
	recv, err = recv.Slice(0, n)
	return send, recv, err
}

// exchange packs the send buffer with pack, all-to-alls n floats and
// unpacks the receive buffer with unpack. Both see the buffers as sp
// chunks of [b, tl, parts, cs] (chunk j goes to, or came from, rank j).
func (s *spState) exchange(n int, pack, unpack func(buf *tensor.Tensor) error) error {
	send, recv, err := s.buffers(n)
	if err != nil {
		return err
	}
	if err := pack(send); err != nil {
		return fmt.Errorf("nn: sequence-parallel packing: %w", err)
	}
	ctx := s.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	// the buffers are the backend's memory (the host's on the CPU backend,
	// which a comm of device memory only, such as NCCL's, moves staged)
	if err := comm.AllToAllHost(ctx, s.c, recv, send); err != nil {
		return fmt.Errorf("nn: sequence-parallel all-to-all: %w", err)
	}
	if err := unpack(recv); err != nil {
		return fmt.Errorf("nn: sequence-parallel unpacking: %w", err)
	}
	return nil
}

// toHeads moves x[b, tl, parts, c] (this rank's tokens, all heads) to
// y[b, tl·sp, parts, c/sp] (all tokens, this rank's heads): two block
// transposes around the all-to-all, on k's device.
func (s *spState) toHeads(k backend.NN, y, x *tensor.Tensor, b, tl, parts, c int) error {
	n, cs := s.size(), c/s.size()
	rows, w := b*tl*parts, tl*parts*cs
	return s.exchange(rows*c, func(send *tensor.Tensor) error {
		// chunk j: every row's heads of rank j
		return k.TransposeBlocks(send, x, rows, n, cs)
	}, func(recv *tensor.Tensor) error {
		// chunk i: rank i's tokens, positions [i·tl, (i+1)·tl) of each
		// sequence
		return k.TransposeBlocks(y, recv, n, b, w)
	})
}

// toSeq is toHeads' inverse: y[b, tl·sp, parts, c/sp] back to
// x[b, tl, parts, c].
func (s *spState) toSeq(k backend.NN, x, y *tensor.Tensor, b, tl, parts, c int) error {
	n, cs := s.size(), c/s.size()
	rows, w := b*tl*parts, tl*parts*cs
	return s.exchange(rows*c, func(send *tensor.Tensor) error {
		// chunk j: rank j's tokens of each sequence
		return k.TransposeBlocks(send, y, b, n, w)
	}, func(recv *tensor.Tensor) error {
		// chunk i: rank i's heads of every row
		return k.TransposeBlocks(x, recv, n, rows, cs)
	})
}

// attend is the block's attention: the Attention kernel itself, or under
// SP the exchange to head shards, the kernel on whole sequences and the
// exchange back. t is the local sequence length. Under TP the exchanges
// move the TP rank's heads only (width Proj.In, C/tp).
func (k *Block) attend(be backend.NN, acts *BlockActivations, s *BlockScratch, b, t int) error {
	if k.sp == nil {
		return k.Attn.Forward(be, acts.AttY, acts.Att, acts.QKV, b, t)
	}
	if err := k.sp.toHeads(be, acts.QKVHeads, acts.QKV, b, t, 3, k.Proj.In); err != nil {
		return err
	}
	if err := k.Attn.Forward(be, s.Heads, acts.Att, acts.QKVHeads, b, t*k.sp.size()); err != nil {
		return err
	}
	return k.sp.toSeq(be, acts.AttY, s.Heads, b, t, 1, k.Proj.In)
}

// attendBackward sets s.DQKV to the gradient of q, k and v from s.DAttY,
// running attend's exchanges in reverse under SP.
func (k *Block) attendBackward(be backend.NN, acts *BlockActivations, s *BlockScratch, b, t int) error {
	if k.sp == nil {
		return k.Attn.backwardWrite(be, s.DQKV, s.DAttY, acts.QKV, acts.Att, b, t)
	}
	if err := k.sp.toHeads(be, s.Heads, s.DAttY, b, t, 1, k.Proj.In); err != nil {
		return err
	}
	if err := k.Attn.backwardWrite(be, s.DQKVHeads, s.Heads, acts.QKVHeads, acts.Att, b, t*k.sp.size()); err != nil {
		return err
	}
	// every element of DQKV is written: no clearing needed
	return k.sp.toSeq(be, s.DQKV, s.DQKVHeads, b, t, 3, k.Proj.In)
}

// spPositions views rows [rank·t, (rank+1)·t) of a position table (or its
// gradient) p[SeqLen, C]: the global positions of this rank's tokens.
func (g *GPT) spPositions(p *tensor.Tensor, t int) (*tensor.Tensor, error) {
	c := g.Config.Width
	v, err := p.Slice(g.sp.c.Rank()*t*c, t*c)
	if err != nil {
		return nil, fmt.Errorf("nn.GPT: sequence shard %d of %d tokens: %w", g.sp.c.Rank(), t, err)
	}
	return v, nil
}

// positions is the position table p (or its gradient) as this rank's
// tokens read it: p itself without SP, rows [rank·t, (rank+1)·t) under SP
// (the vocabulary-parallel embedding of TP × SP reads them so).
func (g *GPT) positions(p *tensor.Tensor, t int) (*tensor.Tensor, error) {
	if g.sp == nil {
		return p, nil
	}
	return g.spPositions(p, t)
}

// spEmbedForward writes out[N, C] = wte[tokens] + wpe[rank·t + τ].
func (g *GPT) spEmbedForward(k backend.NN, out, tokens *tensor.Tensor, b, t int) error {
	e := g.Embed
	if err := e.check("Embedding.Forward", k.Device(), tokens, b, t, false); err != nil {
		return err
	}
	pos, err := g.spPositions(e.Pos.Data, t)
	if err != nil {
		return err
	}
	if err := k.EncoderForward(out, tokens, e.Tok.Data, pos, b, t, e.Width, e.Vocab); err != nil {
		return fmt.Errorf("nn.Embedding.Forward: %w", err)
	}
	return nil
}

// spEmbedBackward adds the token rows into dtok and the position rows into
// this rank's rows of wpe's gradient.
func (g *GPT) spEmbedBackward(k backend.NN, dtok, dout, tokens *tensor.Tensor, b, t int) error {
	e := g.Embed
	if err := e.check("GPT.Backward", k.Device(), tokens, b, t, true); err != nil {
		return err
	}
	// a frozen table (model.Param.Frozen: dtok or Pos.Grad nil) is skipped
	if dtok != nil {
		if err := k.EncoderBackward(dtok, nil, dout, tokens, b, t, e.Width, e.Vocab); err != nil {
			return fmt.Errorf("nn.Embedding.Backward: %w", err)
		}
	}
	pg := gradOf(e.Pos)
	if pg == nil {
		return nil
	}
	pos, err := g.spPositions(pg, t)
	if err != nil {
		return err
	}
	if err := k.EncoderBackward(nil, pos, dout, tokens, b, t, e.Width, e.Vocab); err != nil {
		return fmt.Errorf("nn.Embedding.Backward: %w", err)
	}
	return nil
}

// spLoss is the mean loss over the SP group's tokens, from this rank's
// mean over its n tokens (every rank holds as many).
func (g *GPT) spLoss(local float64) (float64, error) {
	if g.sp == nil {
		return local, nil
	}
	ctx := g.sp.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	all, err := comm.AllGatherInt64s(ctx, g.sp.c, []int64{int64(math.Float64bits(local))})
	if err != nil {
		return 0, fmt.Errorf("nn.GPT.Loss: sequence-parallel mean: %w", err)
	}
	var sum float64
	for _, v := range all {
		sum += math.Float64frombits(uint64(v))
	}
	return sum / float64(len(all)), nil
}
