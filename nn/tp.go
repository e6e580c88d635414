package nn

// Megatron tensor parallelism for the GPT. Each rank of a TP group holds
// its shards: the token embedding and the tied head split along the
// vocabulary, c_attn and c_fc column-parallel (their output rows split,
// c_attn by heads), the two c_proj row-parallel (their input columns
// split). LayerNorms, position embeddings and the row-parallel biases are
// replicated: every rank computes the same values and the same gradients
// for them, so they need no reduction (model.TPLayout says which is which).
//
// The collectives are Megatron's conjugate pairs: a column-parallel layer
// needs none forward and an all-reduce of its input gradient backward (the
// f operator); a row-parallel layer all-reduces its output forward (g) and
// needs none backward. The residual stream, and so every LayerNorm, stays
// replicated.

import (
	"context"
	"fmt"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// TP is a tensor-parallel group for GPTConfig: the zero value (nil Comm)
// is no tensor parallelism.
type TP struct {
	// Comm is the group of ranks that share each layer: this rank's
	// shard is Comm.Rank() of Comm.Size().
	Comm comm.Comm
	// SequenceParallel is Megatron's sequence parallelism (its
	// --sequence-parallel; deepgo's megatron_sequence_parallel key): the
	// residual stream and the LayerNorms are split along the sequence
	// over the group (see tp_seq.go). It needs a group of 2 or more ranks.
	// It works in pipeline parts too (NewPart): the stages then exchange
	// each TP rank's sequence shard of the residual stream.
	SequenceParallel bool
}

// size is the TP degree, 1 without a group.
func (t TP) size() int {
	if t.Comm == nil {
		return 1
	}
	return t.Comm.Size()
}

// tpState is a GPT's live TP group: the comm, the context of the module
// call in progress (modules run one at a time) and how each sharded
// parameter was cut from its full value.
type tpState struct {
	c      comm.Comm
	ctx    context.Context
	shards map[*model.Param]shard
	// tokens are the batch's ids remapped into this rank's wte shard,
	// then the ids themselves (see tpTokens)
	tokens *tensor.Tensor
	// seq is TP.SequenceParallel; seqBuf and lnGrad are its buffers (on
	// the backend's device): the collectives' permutation and a
	// LayerNorm's gradient sum
	seq            bool
	seqBuf, lnGrad *tensor.Tensor
	// be is the module call's backend; on a device, devTokens is tokens
	// copied there. xent holds the cross-entropy's per-row scalars, on
	// be's device (see tpXent).
	be              backend.Backend
	devTokens, xent *tensor.Tensor
}

// free releases the remapped token buffer and the scratch buffers.
func (s *tpState) free() {
	if s == nil {
		return
	}
	freeAll(&s.tokens, &s.seqBuf, &s.lnGrad, &s.devTokens, &s.xent)
}

// bufferBytes is the size of the scratch buffers (used only inside one
// module call).
func (s *tpState) bufferBytes() int64 {
	if s == nil {
		return 0
	}
	var n int64
	for _, t := range []*tensor.Tensor{s.seqBuf, s.lnGrad, s.xent} {
		if t != nil {
			n += int64(t.Bytes())
		}
	}
	return n
}

// context is the module call's context (Background outside one).
func (s *tpState) context() context.Context {
	if s.ctx == nil {
		return context.Background()
	}
	return s.ctx
}

// shard says how a parameter is cut from the full one (of shape full), as
// model.TPLayout.Runs places it.
type shard struct {
	full   []int
	layout model.TPLayout
}

// allReduce sums the first n elements of t over the group; a nil group
// (no TP) does nothing.
func (s *tpState) allReduce(t *tensor.Tensor, n int, op comm.ReduceOp) error {
	if s == nil || s.c.Size() == 1 {
		return nil
	}
	v, err := t.Slice(0, n)
	if err != nil {
		return err
	}
	// comm.AllReduceHost: t is the backend's memory (the device's, or the
	// host's on the CPU backend, which a comm of device memory only, such
	// as NCCL's, would move staged)
	if err := comm.AllReduceHost(s.context(), s.c, v, op); err != nil {
		return fmt.Errorf("nn: tensor-parallel all-reduce: %w", err)
	}
	return nil
}

// checkTP validates that cfg's sizes split over tp ranks.
func checkTP(cfg GPTConfig) error {
	n := cfg.TP.size()
	if n == 1 {
		if cfg.TP.SequenceParallel {
			return fmt.Errorf("nn.NewGPT: sequence parallelism (TP.SequenceParallel) with tensor_model_parallel_size 1: it splits the sequence over the TP ranks, so it needs 2 or more")
		}
		return nil
	}
	for _, d := range []struct {
		what string
		v    int
	}{{"heads", cfg.Heads}, {"mlp hidden size (4 x width)", 4 * cfg.Width}, {"vocab", cfg.Vocab}} {
		if d.v%n != 0 {
			hint := ""
			if d.what == "vocab" {
				// ids past the tokenizer's are never targets: Megatron pads
				hint = fmt.Sprintf(" (pad it, as Megatron does: Vocab %d trains the same ids)", (d.v+n-1)/n*n)
			}
			return fmt.Errorf("nn.NewGPT: %s %d is not divisible by tensor_model_parallel_size %d%s", d.what, d.v, n, hint)
		}
	}
	if cfg.Checkpointing.ContiguousMemoryOptimization {
		return fmt.Errorf("nn.NewGPT: activation_checkpointing.contiguous_memory_optimization with tensor_model_parallel_size %d: not supported yet", n)
	}
	return nil
}

// shardTP replaces g's full layers with this rank's shards (declared, not
// yet bound) and records how each was cut.
func (g *GPT) shardTP() {
	c := g.Config.TP.Comm
	if c == nil || c.Size() == 1 {
		return
	}
	n := c.Size()
	st := &tpState{c: c, shards: map[*model.Param]shard{}, seq: g.Config.TP.SequenceParallel}
	g.tp = st
	cut := func(p *model.Param, dim, parts int) {
		p.Parallel = model.TPLayout{Split: true, Dim: dim, Parts: parts}
		st.shards[p] = shard{full: p.Shape, layout: p.Parallel}
		sh := append([]int(nil), p.Shape...)
		sh[dim] /= n
		p.Shape = sh
	}
	col := func(l *Linear, parts int) {
		cut(l.W, 0, parts)
		cut(l.B, 0, parts)
		l.Out /= n
	}
	row := func(l *Linear) {
		cut(l.W, 1, 1)
		l.In /= n
		// the bias is replicated and added once: by rank 0, before the
		// all-reduce of the partial outputs
		l.biasElsewhere = c.Rank() != 0
	}
	for _, b := range g.Blocks {
		b.tp = st
		col(b.QKV, 3)
		b.Attn.Heads /= n
		row(b.Proj)
		col(b.FC, 1)
		row(b.FCProj)
	}
	cut(g.Embed.Tok, 0, 1)
	g.Embed.Vocab /= n
	g.Xent.Vocab /= n
}

// vocabRange is the token ids [lo, lo+V/n) this rank's wte shard holds.
func (g *GPT) vocabRange() (lo, n int) {
	if g.tp == nil {
		return 0, g.Config.Vocab
	}
	return g.tp.c.Rank() * g.Embed.Vocab, g.Embed.Vocab
}

// cutFull copies this rank's shard of full (the unsharded value) into dst.
func (s shard) cutFull(dst, full []float32, rank, n int) {
	s.each(rank, n, func(fullOff, localOff, len int) {
		copy(dst[localOff:localOff+len], full[fullOff:fullOff+len])
	})
}

// each calls f for every contiguous run of the shard: its offset in the
// full tensor, in the shard, and its length.
func (s shard) each(rank, n int, f func(fullOff, localOff, len int)) {
	s.layout.Runs(s.full, rank, n, f)
}

// Unshard all-gathers local (parameter name -> this rank's values, as
// deepgo.Engine.Parameters returns) over the TP group and returns every
// parameter's full value; replicated ones are returned as they are.
// Without TP it returns local.
func (g *GPT) Unshard(ctx context.Context, local map[string][]float32) (map[string][]float32, error) {
	if g.tp == nil {
		return local, nil
	}
	c, n := g.tp.c, g.tp.c.Size()
	out := make(map[string][]float32, len(local))
	for _, p := range g.Params() {
		v, ok := local[p.Name]
		if !ok {
			return nil, fmt.Errorf("nn.GPT.Unshard: no value for %s", p.Name)
		}
		s, split := g.tp.shards[p]
		if !split {
			out[p.Name] = v
			continue
		}
		src, err := tensor.FromFloat32(v, len(v))
		if err != nil {
			return nil, err
		}
		all, err := tensor.Empty(tensor.Float32, n*len(v))
		if err != nil {
			src.Free()
			return nil, err
		}
		err = comm.AllGatherHost(ctx, c, all, src) // host values: staged over NCCL
		src.Free()
		if err != nil {
			all.Free()
			return nil, fmt.Errorf("nn.GPT.Unshard: %s: %w", p.Name, err)
		}
		gathered, _ := all.Float32s()
		full := make([]float32, n*len(v))
		for r := 0; r < n; r++ {
			part := gathered[r*len(v) : (r+1)*len(v)]
			s.each(r, n, func(fo, lo, l int) { copy(full[fo:fo+l], part[lo:lo+l]) })
		}
		all.Free()
		out[p.Name] = full
	}
	return out, nil
}

// shardOf reports how p was cut (false for a replicated parameter or
// without TP).
func (s *tpState) shardOf(p *model.Param) (shard, bool) {
	if s == nil {
		return shard{}, false
	}
	sh, ok := s.shards[p]
	return sh, ok
}

func (s shard) numel() int {
	n := 1
	for _, d := range s.full {
		n *= d
	}
	return n
}
