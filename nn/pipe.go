package nn

import (
	"context"
	"fmt"

	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

var (
	_ model.Pipelined              = (*GPT)(nil)
	_ model.ActivationCheckpointer = (*GPT)(nil)
)

// CheckpointEvery implements pipeline.activation_checkpoint_interval: n 1
// checkpoints every block (each keeps only its input and is recomputed in
// backward, Checkpointing with all blocks), which is DeepSpeed's interval 1
// for the blocks; the embedding and the head keep their activations.
// Intervals above 1 (one saved input per run of n blocks) are not
// supported: the GPT recomputes block by block.
func (g *GPT) CheckpointEvery(n int) error {
	if n != 1 {
		return fmt.Errorf("nn.GPT: activation checkpoint interval %d: not supported (allowed 1: the GPT checkpoints block by block)", n)
	}
	if g.st != nil || g.hi != 0 {
		return fmt.Errorf("nn.GPT: CheckpointEvery after activations were allocated: call it before the first forward and before NewPart")
	}
	g.Config.Checkpointing.Enabled = true
	g.Config.Checkpointing.NumberCheckpoints = 0 // all blocks
	return nil
}

// inPart reports whether module i (0 the embedding, 1..Layers the blocks,
// Layers+1 the head) belongs to this GPT's pipeline part.
func (g *GPT) inPart(i int) bool { return g.hi == 0 || (i >= g.lo && i < g.hi) }

// NewPart returns modules [start, stop) of Modules() as a pipeline part: a
// GPT sharing g's parameters (the same model.Params) with activation memory
// of its own, sized for those modules only. A part holding the head but
// not the embedding declares the tied wte as a parameter of its head
// module: the pipeline engine keeps the stage's copy of it and sums its
// gradient with the embedding stage's.
//
// Under tensor parallelism (GPTConfig.TP) the part holds this rank's
// shards and runs the layers' TP collectives over the model's group; each
// TP rank of a stage exchanges the residual stream with the same TP rank
// of the next, and the head stage's tied wte is its vocabulary shard,
// summed with the embedding stage's shard of the same TP rank. The stream
// is replicated over the group under plain TP ([B·T, C] on every rank);
// under Megatron sequence parallelism (TP.SequenceParallel) it stays
// split along the sequence between stages as between blocks, so a rank
// sends and receives only its shard [B·T/n, C] (what Input returns to
// receive into), as Megatron's p2p does: the scatter after the embedding
// and the gather before the head run on the first and last stage only.
//
// Under Ulysses sequence parallelism (GPTConfig.SP) every rank of a
// stage's SP group runs the part on its sequence shard of the micro-batch
// ([B, T/sp] tokens, positions at the shard's global offsets) and sends
// its shard of the residual stream [B·T/sp, C] to the same SP rank of the
// next stage: everything between the blocks works token by token, so the
// stream stays sharded from the embedding to the head, and only attention
// exchanges over the SP group (ulysses.go). The head part's loss is the
// mean over the SP group's tokens with the gradient of the rank's local
// mean, as without parts; the engine reduces the gradients over the
// sequence-data group (dp × sp ranks of a stage). With both, a rank sends
// its sequence shard of the TP-replicated stream to the rank of the same
// TP and SP coordinates in the next stage.
func (g *GPT) NewPart(start, stop int) (model.Part, error) {
	n := g.Config.Layers + 2
	if start < 0 || stop > n || start >= stop {
		return nil, fmt.Errorf("nn.GPT.NewPart: modules [%d, %d): want 0 <= start < stop <= %d", start, stop, n)
	}
	if g.Config.MoE.On() {
		return nil, fmt.Errorf("nn.GPT.NewPart: num_experts %d: not supported: MoE with pipeline stages", g.Config.MoE.Experts)
	}
	r := &GPT{Config: g.Config, Embed: g.Embed, Blocks: g.Blocks, LNF: g.LNF, Xent: g.Xent, be: g.be, lo: start, hi: stop}
	if g.tp != nil {
		// the part's own token remap: parts of one stage hold different
		// micro-batches between their forward and backward
		r.tp = &tpState{c: g.tp.c, shards: g.tp.shards, seq: g.tp.seq}
	}
	if g.sp != nil {
		// the embedding's positions and the loss's mean; the blocks
		// exchange through the whole model's state (its buffers)
		r.sp = &spState{c: g.sp.c}
	}
	for i := start; i < stop; i++ {
		switch {
		case i == 0:
			r.mods = append(r.mods, embedModule{r})
		case i <= g.Config.Layers:
			r.mods = append(r.mods, blockModule{r, i - 1})
		default:
			r.mods = append(r.mods, headModule{g: r, tied: start > 0})
		}
	}
	return gptPart{r}, nil
}

// gptPart is a GPT restricted to a range of modules.
type gptPart struct{ g *GPT }

// Modules are the part's modules.
func (p gptPart) Modules() []model.Module { return p.g.mods }

// Input sizes the part's activations for mb's batch and loads its tokens
// and targets (the last part's loss reads the targets); a part that does
// not start with the embedding gets the residual stream entering its first
// block (or the head) as the tensor to receive into.
func (p gptPart) Input(ctx context.Context, mb model.MicroBatch) (*tensor.Tensor, error) {
	g := p.g
	if g.lo == 0 {
		return nil, nil
	}
	be, k, err := g.compute(ctx)
	if err != nil {
		return nil, err
	}
	b, err := asBatch(mb.Input)
	if err != nil {
		return nil, err
	}
	if b.B < 1 || b.T < 1 || b.T > g.Config.SeqLen || len(b.Inputs) != b.B*b.T || len(b.Targets) != b.B*b.T {
		return nil, fmt.Errorf("nn.GPT: part input: batch %d x %d with %d inputs and %d targets: need B >= 1, 1 <= T <= %d and B*T of each",
			b.B, b.T, len(b.Inputs), len(b.Targets), g.Config.SeqLen)
	}
	if n := g.sp.size(); b.T*n > g.Config.SeqLen {
		return nil, fmt.Errorf("nn.GPT: part input: sequence shards of %d tokens on %d sequence-parallel ranks: sequences of %d tokens, need at most %d (seq_len)", b.T, n, b.T*n, g.Config.SeqLen)
	}
	// a later stage learns T here, not from the embedding
	if err := g.tp.checkSeqLen(b.T); err != nil {
		return nil, err
	}
	if err := g.alloc(be, b.B, b.T); err != nil {
		return nil, err
	}
	if err := upload(k, g.st.targets, b.Targets); err != nil {
		return nil, fmt.Errorf("nn.GPT: part input: targets: %w", err)
	}
	return g.st.resid[g.lo-1], nil
}

// Loss is the GPT's loss on the part's head output.
func (p gptPart) Loss(ctx context.Context, out, target model.Activation, gradScale float64) (float64, model.Activation, error) {
	if !p.g.inPart(p.g.Config.Layers + 1) {
		return 0, nil, fmt.Errorf("nn.GPT: Loss on a pipeline part without the head (modules [%d, %d))", p.g.lo, p.g.hi)
	}
	return p.g.Loss(ctx, out, target, gradScale)
}

// Free releases the part's activation memory.
func (p gptPart) Free() { p.g.freeActivations() }

// ActivationBytes is the part's activation memory: what lives from a
// forward to its backward, and the scratch of its layers.
func (p gptPart) ActivationBytes() int64 {
	s := p.g.ActivationStats()
	return s.Bytes + s.ScratchBytes
}
