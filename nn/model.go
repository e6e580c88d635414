package nn

import (
	"context"
	"fmt"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// GPT as a model.Model: the modules are the embedding, each block, and the
// head (ln_f plus the output projection tied to wte); activations between
// them are *tensor.Tensor views of the model's residual stream, and the
// input of the first module is a model.TokenBatch.
//
// The tied weight belongs to the embedding module only. The head reads its
// Data during the head's forward and backward, and writes its share of the
// gradient into a private [V, C] buffer that the embedding module's
// Backward adds into wte's Grad: an engine may bind a module's gradients
// only while that module runs backward (ZeRO 2 buckets), and the embedding
// runs last, so both uses land in the one gradient before it is reduced.
// Under ZeRO stage 3 the embedding module is model.Resident, so the engine
// keeps wte gathered for the head instead of releasing it after the
// embedding's forward. Under fp16 or bf16 the modules run directly on the
// half-precision weights and gradients the engine binds: the kernels widen
// weights tile by tile and compute in float32 (activations are float32),
// and add into half gradients with one rounding per element; the tied
// wte's two uses are summed in float32 and added into its gradient once.

var (
	_ model.Model        = (*GPT)(nil)
	_ model.Checkpointed = (*GPT)(nil)
)

// UseBackend sets the backend the modules compute on when their context
// carries none. An engine's does (deepgo.Initialize passes its backend to
// every module call, see backend.FromContext) and wins, so a model an
// engine drives needs no UseBackend.
func (g *GPT) UseBackend(be backend.Backend) { g.be = be }

// Modules lists embedding, blocks, head; the same values on every call.
func (g *GPT) Modules() []model.Module {
	if g.mods == nil {
		g.mods = append(g.mods, embedModule{g})
		for l := range g.Blocks {
			g.mods = append(g.mods, blockModule{g, l})
		}
		g.mods = append(g.mods, headModule{g: g})
	}
	return g.mods
}

// compute returns the backend a module call runs on: the one ctx carries,
// else UseBackend's; it must offer the nn kernels (backend.NN), and on a
// device the TP and SP groups must move that device's memory
// (checkGroupComm). The call's backend is recorded in the groups' state
// for the host staging of tp_device.go.
func (g *GPT) compute(ctx context.Context) (backend.Backend, backend.NN, error) {
	be, ok := backend.FromContext(ctx)
	if !ok {
		be = g.be
	}
	if be == nil {
		return nil, nil, fmt.Errorf("nn.GPT: no backend: drive the model with an engine (deepgo.Initialize hands every module its backend), or call UseBackend (or pass one to NewReadyGPT)")
	}
	k, ok := be.(backend.NN)
	if ok && g.tp != nil {
		if err := checkGroupComm("tensor parallelism", g.tp.c, be); err != nil {
			return nil, nil, err
		}
		g.tp.ctx, g.tp.be = ctx, be
		if len(g.Blocks) > 0 && g.Blocks[0].tp != nil {
			// a pipeline part's blocks share the whole model's TP state
			g.Blocks[0].tp.ctx, g.Blocks[0].tp.be = ctx, be
		}
	}
	if ok && g.sp != nil {
		if err := checkGroupComm("sequence parallelism", g.sp.c, be); err != nil {
			return nil, nil, err
		}
		g.sp.ctx, g.sp.be = ctx, be
		if len(g.Blocks) > 0 && g.Blocks[0].sp != nil {
			// a pipeline part's blocks exchange through the whole model's
			// SP state
			g.Blocks[0].sp.ctx, g.Blocks[0].sp.be = ctx, be
		}
	}
	if !ok {
		return nil, nil, fmt.Errorf("nn.GPT: backend %s offers no nn kernels (backend.NN): %w yet", be.Name(), backend.ErrUnsupported)
	}
	return be, k, nil
}

func asBatch(a model.Activation) (model.TokenBatch, error) {
	switch b := a.(type) {
	case model.TokenBatch:
		return b, nil
	case *model.TokenBatch:
		return *b, nil
	}
	return model.TokenBatch{}, fmt.Errorf("nn.GPT: input is %T, want model.TokenBatch", a)
}

func asTensor(what string, a model.Activation) (*tensor.Tensor, error) {
	t, ok := a.(*tensor.Tensor)
	if !ok {
		return nil, fmt.Errorf("nn.GPT: %s is %T, want *tensor.Tensor", what, a)
	}
	return t, nil
}

type embedModule struct{ g *GPT }

func (m embedModule) Name() string { return "transformer.embed" }

// Resident keeps the tied wte gathered under ZeRO stage 3: the head reads it.
func (m embedModule) Resident() bool         { return true }
func (m embedModule) Params() []*model.Param { return m.g.Embed.Params() }

// Forward embeds the batch's tokens into the residual stream.
func (m embedModule) Forward(ctx context.Context, in model.Activation) (model.Activation, error) {
	g := m.g
	be, k, err := g.compute(ctx)
	if err != nil {
		return nil, err
	}
	b, err := asBatch(in)
	if err != nil {
		return nil, err
	}
	if b.B < 1 || b.T < 1 || b.T > g.Config.SeqLen {
		return nil, fmt.Errorf("nn.GPT.Forward: batch %d x %d tokens: need B >= 1 and 1 <= T <= %d (GPTConfig.SeqLen, the position table's length)", b.B, b.T, g.Config.SeqLen)
	}
	if n := g.sp.size(); b.T*n > g.Config.SeqLen {
		return nil, fmt.Errorf("nn.GPT.Forward: sequence shards of %d tokens on %d sequence-parallel ranks: sequences of %d tokens, need at most %d (seq_len)", b.T, n, b.T*n, g.Config.SeqLen)
	}
	if err := g.tp.checkSeqLen(b.T); err != nil {
		return nil, err
	}
	if len(b.Inputs) != b.B*b.T || len(b.Targets) != b.B*b.T {
		return nil, fmt.Errorf("nn.GPT.Forward: %d inputs and %d targets for %d x %d tokens", len(b.Inputs), len(b.Targets), b.B, b.T)
	}
	if err := g.allocFor(be, b.B, b.T, model.CheckpointingFrom(ctx) && g.hi == 0); err != nil {
		return nil, err
	}
	s := g.st
	s.gradOut = nil
	if err := upload(k, s.tokens, b.Inputs); err != nil {
		return nil, fmt.Errorf("nn.GPT.Forward: tokens: %w", err)
	}
	if err := upload(k, s.targets, b.Targets); err != nil {
		return nil, fmt.Errorf("nn.GPT.Forward: targets: %w", err)
	}
	switch {
	case g.tp != nil:
		err = g.tpEmbedForward(k, s.resid[0], b.Inputs, b.B, b.T)
	case g.sp != nil:
		err = g.spEmbedForward(k, s.resid[0], s.tokens, b.B, b.T)
	default:
		err = g.Embed.Forward(k, s.resid[0], s.tokens, b.B, b.T)
	}
	if err != nil {
		return nil, err
	}
	return s.resid[0], nil
}

// Backward adds the embedding's gradients, and the head's share of the
// tied wte's, into what the engine bound.
func (m embedModule) Backward(ctx context.Context, gout model.Activation) (model.Activation, error) {
	g := m.g
	be, k, err := g.compute(ctx)
	if err != nil {
		return nil, err
	}
	d, err := asTensor("embedding gradient", gout)
	if err != nil {
		return nil, err
	}
	// the token rows join the head's share of the tied weight's gradient
	// in float32; the sum goes into wte's gradient with one rounding
	s := g.st
	if !g.inPart(g.Config.Layers+1) || g.Embed.Tok.Frozen {
		// a pipeline part without the head: the head's share arrives with
		// the stages' tied-gradient reduction; or wte is frozen (no
		// gradient bound), and the head left its share out
		if g.tp != nil {
			spare := s.dA
			if d == s.dA {
				spare = s.dB
			}
			return nil, g.tpEmbedBackward(k, gradOf(g.Embed.Tok), d, spare, s.b, s.t)
		}
		if g.sp != nil {
			return nil, g.spEmbedBackward(k, gradOf(g.Embed.Tok), d, s.tokens, s.b, s.t)
		}
		return nil, g.Embed.Backward(k, d, s.tokens, s.b, s.t)
	}
	if g.tp != nil {
		spare := s.dA
		if d == s.dA {
			spare = s.dB
		}
		err = g.tpEmbedBackward(k, s.dwteHead, d, spare, s.b, s.t)
	} else if g.sp != nil {
		err = g.spEmbedBackward(k, s.dwteHead, d, s.tokens, s.b, s.t)
	} else {
		err = g.Embed.backward(k, "GPT.Backward", s.dwteHead, d, s.tokens, s.b, s.t)
	}
	if err != nil {
		return nil, err
	}
	if err := be.Axpy(1, []*tensor.Tensor{s.dwteHead}, []*tensor.Tensor{g.Embed.Tok.Grad}); err != nil {
		return nil, fmt.Errorf("nn.GPT.Backward: tied wte: %w", err)
	}
	return nil, nil
}

type blockModule struct {
	g *GPT
	l int
}

func (m blockModule) Name() string           { return fmt.Sprintf("transformer.h.%d", m.l) }
func (m blockModule) Params() []*model.Param { return m.g.Blocks[m.l].Params() }

// Forward runs block l on the residual stream.
func (m blockModule) Forward(ctx context.Context, in model.Activation) (model.Activation, error) {
	g := m.g
	_, k, err := g.compute(ctx)
	if err != nil {
		return nil, err
	}
	if g.st == nil {
		return nil, fmt.Errorf("nn.GPT: block %d before the embedding", m.l)
	}
	s := g.st
	x, err := asTensor("block input", in)
	if err != nil {
		return nil, err
	}
	if s.engine {
		return g.engineBlockForward(ctx, k, m.l, x)
	}
	if x != s.resid[m.l] {
		return nil, fmt.Errorf("nn.GPT: block %d got an input that is not the previous module's output", m.l)
	}
	if err := g.Blocks[m.l].Forward(k, s.resid[m.l+1], x, g.actsFor(m.l), s.scratch, s.b, s.t); err != nil {
		return nil, err
	}
	return s.resid[m.l+1], nil
}

// engineBlockForward runs block l with its activations and output from
// the call's arena: the engine frees a checkpointed block's right after
// its forward and recomputes them before its backward.
func (g *GPT) engineBlockForward(ctx context.Context, k backend.NN, l int, x *tensor.Tensor) (model.Activation, error) {
	s := g.st
	a, ok := tensor.ArenaFromContext(ctx)
	if !ok {
		return nil, fmt.Errorf("nn.GPT: block %d: the engine checkpoints, but the call carries no arena", l)
	}
	n, c := g.tp.rows(s.b*s.t), g.Config.Width
	if x.Numel() != n*c {
		return nil, fmt.Errorf("nn.GPT: block %d: input %v, want %d x %d", l, x.Shape(), n, c)
	}
	acts, err := g.Blocks[l].NewActivations(a, s.b, s.t)
	if err != nil {
		return nil, err
	}
	out, err := a.Float32(n, c)
	if err != nil {
		return nil, err
	}
	s.in[l], s.bacts[l] = x, acts
	if err := g.Blocks[l].Forward(k, out, x, acts, s.scratch, s.b, s.t); err != nil {
		return nil, err
	}
	return out, nil
}

// blockInput is what block l's last forward ran on.
func (g *GPT) blockInput(l int) *tensor.Tensor {
	if g.st.engine {
		return g.st.in[l]
	}
	return g.st.resid[l]
}

// Backward runs block l's backward (recomputing it first when it is
// checkpointed), adding its gradients into what the engine bound.
func (m blockModule) Backward(ctx context.Context, gout model.Activation) (model.Activation, error) {
	g := m.g
	_, k, err := g.compute(ctx)
	if err != nil {
		return nil, err
	}
	s := g.st
	dout, err := asTensor("block gradient", gout)
	if err != nil {
		return nil, err
	}
	blk, acts := g.Blocks[m.l], g.actsFor(m.l)
	if m.l < g.private() {
		// recompute the block's internals from its saved input; the
		// output lands where it was (same values) and is not read again
		t0 := time.Now()
		if err := blk.Forward(k, s.resid[m.l+1], s.resid[m.l], acts, s.scratch, s.b, s.t); err != nil {
			return nil, fmt.Errorf("nn.GPT: recompute block %d: %w", m.l, err)
		}
		if g.Config.Checkpointing.Profile {
			s.recomputed += time.Since(t0)
		}
	}
	din := s.dA
	if dout == s.dA {
		din = s.dB
	}
	if err := zero(k, din); err != nil {
		return nil, err
	}
	if err := blk.Backward(k, din, dout, g.blockInput(m.l), acts, s.scratch, s.b, s.t); err != nil {
		return nil, err
	}
	return din, nil
}

// headModule is ln_f and the output projection. In a pipeline part
// without the embedding, tied is true: the module declares the wte it reads
// as a parameter of its own (the stage's copy of the tied weight) and adds
// its gradient into it.
type headModule struct {
	g    *GPT
	tied bool
}

// headWeight checks the tied wte the head reads and views it as [V, C].
func (g *GPT) headWeight(op string, dev tensor.Device) (*tensor.Tensor, error) {
	if err := checkParams(op, dev, false, []*model.Param{g.Embed.Tok}, []int{g.Embed.Vocab, g.Config.Width}); err != nil {
		return nil, err
	}
	w := g.Embed.Tok.Data
	if err := asMatrices(mat{&w, g.Embed.Vocab, g.Config.Width}); err != nil {
		return nil, fmt.Errorf("nn.%s: head: %w", op, err)
	}
	return w, nil
}

func (m headModule) Name() string { return "transformer.ln_f" }
func (m headModule) Params() []*model.Param {
	if m.tied {
		return append(m.g.LNF.Params(), m.g.Embed.Tok)
	}
	return m.g.LNF.Params()
}

// Forward runs ln_f and the output projection on wte (read, not owned).
func (m headModule) Forward(ctx context.Context, in model.Activation) (model.Activation, error) {
	g := m.g
	_, k, err := g.compute(ctx)
	if err != nil {
		return nil, err
	}
	s := g.st
	x, err := asTensor("head input", in)
	if err != nil {
		return nil, err
	}
	if g.tp.seqOn() {
		return g.seqHeadForward(k, x)
	}
	n := s.b * s.t
	wte, err := g.headWeight("GPT.Forward", k.Device())
	if err != nil {
		return nil, err
	}
	s.headIn = x
	if err := g.LNF.Forward(k, s.lnf, s.lnfMean, s.lnfRstd, x, n); err != nil {
		return nil, err
	}
	// logits[N, V] = lnf @ wte^T
	if err := k.LinearForward(s.probs, s.lnf, wte, nil); err != nil {
		return nil, fmt.Errorf("nn.GPT.Forward: head: %w", err)
	}
	return s.probs, nil
}

// Backward adds ln_f's gradients into what the engine bound and the
// projection's wte gradient into the model's float32 share (see
// embedModule.Backward).
func (m headModule) Backward(ctx context.Context, gout model.Activation) (model.Activation, error) {
	g := m.g
	be, k, err := g.compute(ctx)
	if err != nil {
		return nil, err
	}
	s := g.st
	dlogits, err := asTensor("logits gradient", gout)
	if err != nil {
		return nil, err
	}
	if g.tp.seqOn() {
		din, err := g.seqHeadBackward(k, dlogits)
		if err != nil || !m.tied || g.Embed.Tok.Frozen {
			return din, err
		}
		// a part without the embedding: the stage's wte copy takes the
		// head's share itself (see the non-sequence-parallel path below)
		if err := be.Axpy(1, []*tensor.Tensor{s.dwteHead}, []*tensor.Tensor{g.Embed.Tok.Grad}); err != nil {
			return nil, fmt.Errorf("nn.GPT.Backward: tied wte: %w", err)
		}
		return din, nil
	}
	n := s.b * s.t
	wte, err := g.headWeight("GPT.Backward", k.Device())
	if err != nil {
		return nil, err
	}
	// a frozen wte skips the head's weight gradient (its Grad, the
	// embedding module's, is not bound while the head runs: ask Frozen)
	dwte := s.dwteHead
	if g.Embed.Tok.Frozen {
		dwte = nil
	} else if err := zero(k, s.dwteHead); err != nil {
		return nil, err
	}
	if err := linearBackward(k, true, s.dB, dwte, nil, dlogits, s.lnf, wte); err != nil { // dB is dlnf
		return nil, fmt.Errorf("nn.GPT.Backward: head: %w", err)
	}
	// the head is column-parallel over the vocabulary: sum ln_f's gradient
	if err := g.tp.allReduce(s.dB, n*g.Config.Width, comm.Sum); err != nil {
		return nil, err
	}
	if err := zero(k, s.dA); err != nil {
		return nil, err
	}
	if err := g.LNF.Backward(k, s.dA, s.dB, s.headIn, s.lnfMean, s.lnfRstd, n); err != nil {
		return nil, err
	}
	if m.tied && dwte != nil {
		if err := be.Axpy(1, []*tensor.Tensor{s.dwteHead}, []*tensor.Tensor{g.Embed.Tok.Grad}); err != nil {
			return nil, fmt.Errorf("nn.GPT.Backward: tied wte: %w", err)
		}
	}
	return s.dA, nil
}

// Loss is the mean cross-entropy of the head's logits against the batch's
// targets, plus MoE.LossCoeff × Σ l_aux of the MoE layers in training
// (SetTraining: evaluation leaves it out); the gradient
// it returns (in place of the logits) is that of gradScale x loss (the aux
// loss's part is added by the MoE layers' Backward). Under sequence parallelism the loss is the mean over
// the SP group's tokens and the gradient that of this rank's local mean
// (the engine's average over the sequence-data-parallel group makes the
// rest; see ulysses.go).
func (g *GPT) Loss(ctx context.Context, out, target model.Activation, gradScale float64) (float64, model.Activation, error) {
	_, k, err := g.compute(ctx)
	if err != nil {
		return 0, nil, err
	}
	s := g.st
	logits, err := asTensor("logits", out)
	if err != nil {
		return 0, nil, err
	}
	if target != nil {
		b, err := asBatch(target)
		if err != nil {
			return 0, nil, fmt.Errorf("nn.GPT.Loss: target: %w (or nil: the targets of the input batch)", err)
		}
		if len(b.Targets) != s.b*s.t {
			return 0, nil, fmt.Errorf("nn.GPT.Loss: %d targets for %d x %d tokens", len(b.Targets), s.b, s.t)
		}
		if err := upload(k, s.targets, b.Targets); err != nil {
			return 0, nil, fmt.Errorf("nn.GPT.Loss: targets: %w", err)
		}
	}
	n := s.b * s.t
	if g.tp != nil {
		loss, err := g.tpXent(k, logits, s.targets, n, gradScale)
		if err != nil {
			return 0, nil, err
		}
		// under TP × SP the TP group's mean is over this SP rank's tokens
		mean, err := g.spLoss(loss)
		return mean, logits, err
	}
	loss, err := g.Xent.Forward(k, logits, s.losses, logits, s.targets, n)
	if err != nil {
		return 0, nil, err
	}
	dl := make([]float32, n)
	for i := range dl {
		dl[i] = float32(gradScale / float64(n))
	}
	if err := upload(k, s.dlosses, dl); err != nil {
		return 0, nil, fmt.Errorf("nn.GPT.Loss: loss gradient: %w", err)
	}
	// probs become dlogits in place
	if err := g.Xent.Backward(k, logits, logits, s.targets, s.dlosses, n); err != nil {
		return 0, nil, err
	}
	// under SP the gradient stays that of the local mean (see ulysses.go)
	mean, err := g.spLoss(float64(loss))
	// MoE: LossCoeff × Σ l_aux, whose gradient the MoE layers' Backward adds
	return mean + g.moeLoss(gradScale), logits, err
}
