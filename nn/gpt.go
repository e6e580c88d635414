package nn

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// GPTConfig sizes a GPT-2 style model.
type GPTConfig struct {
	Layers, Heads, Width int
	Vocab                int
	SeqLen               int // the position table's length: the longest T
	// AttentionWindow is attention_window_size: each query attends to at
	// most this many positions, itself included; <= 0 is full causal.
	AttentionWindow int
	Checkpointing   Checkpointing
	// TP is the tensor-parallel group the model is sharded over (see
	// tp.go); the zero value is none.
	TP TP
	// SP is the Ulysses sequence-parallel group (see ulysses.go): each
	// rank runs on its shard of every sequence; the zero value is none.
	// With TP, each TP rank's SP group shares that rank's heads.
	SP SP
	// MoE replaces the MLP of some blocks by a mixture of experts (see
	// moe_config.go); the zero value is none.
	MoE MoEConfig
}

// NumParams is the parameter count of the model cfg describes (the tied
// embedding counted once).
func (c GPTConfig) NumParams() int {
	C := c.Width
	n := c.Vocab*C + c.SeqLen*C + c.Layers*(12*C*C+13*C) + 2*C
	for l := 0; l < c.Layers; l++ {
		if c.MoE.At(l) {
			n += moeParams(C, c.MoE.Experts, c.MoE.UseResidual)
		}
	}
	return n
}

// GPT is a GPT-2 style language model: token + position embedding, Layers
// pre-LN blocks, a final LayerNorm and an output head tied to the token
// embedding (one parameter used twice; both uses add into its gradient).
type GPT struct {
	Config GPTConfig
	Embed  *Embedding
	Blocks []*Block
	LNF    *LayerNorm
	Xent   CrossEntropy

	st    *gptState
	notes []string
	be    backend.Backend // UseBackend's, for calls whose context carries none
	mods  []model.Module
	own   *ParamBuffers // from NewReadyGPT; freed by Free
	// lo, hi are the modules [lo, hi) of a pipeline part (NewPart), whose
	// activation memory covers only those; hi 0 is the whole model.
	lo, hi int
	tp     *tpState // nil without tensor parallelism
	sp     *spState // nil without sequence parallelism
}

// ParamGroup is a named group of parameters: the unit a ZeRO stage-3 engine
// gathers and releases together.
type ParamGroup struct {
	Name   string
	Params []*model.Param
}

// NewGPT declares a model; bind its parameters (Bind or NewParamBuffers)
// and Init them before use.
func NewGPT(cfg GPTConfig) (*GPT, error) {
	if cfg.Layers < 1 || cfg.Vocab < 1 || cfg.SeqLen < 1 {
		return nil, fmt.Errorf("nn.NewGPT: layers %d, vocab %d, seq_len %d: all must be >= 1", cfg.Layers, cfg.Vocab, cfg.SeqLen)
	}
	if cfg.Heads < 1 || cfg.Width < 1 || cfg.Width%cfg.Heads != 0 {
		return nil, fmt.Errorf("nn.NewGPT: width %d, heads %d: heads must be >= 1 and width a positive multiple of heads", cfg.Width, cfg.Heads)
	}
	if err := checkTP(cfg); err != nil {
		return nil, err
	}
	if err := checkSP(cfg); err != nil {
		return nil, err
	}
	if err := checkMoE(cfg); err != nil {
		return nil, err
	}
	g := &GPT{Config: cfg, Embed: NewEmbedding("transformer", cfg.Vocab, cfg.SeqLen, cfg.Width),
		LNF: NewLayerNorm("transformer.ln_f", cfg.Width), Xent: CrossEntropy{Vocab: cfg.Vocab}}
	for l := 0; l < cfg.Layers; l++ {
		b, err := NewBlock(fmt.Sprintf("transformer.h.%d", l), cfg.Width, cfg.Heads, cfg.AttentionWindow)
		if err != nil {
			return nil, fmt.Errorf("nn.NewGPT: %w", err)
		}
		g.Blocks = append(g.Blocks, b)
	}
	if err := g.buildMoE(); err != nil {
		return nil, err
	}
	g.shardTP()
	g.shardSP()
	ck := cfg.Checkpointing
	if ck.Enabled {
		if ck.NumberCheckpoints < 0 {
			return nil, fmt.Errorf("nn.NewGPT: number_checkpoints %d: must be >= 0", ck.NumberCheckpoints)
		}
		// an engine (deepgo.Initialize) checkpoints the blocks and applies
		// these itself (its Notes say where they do nothing); only a
		// pipeline part's private recompute ignores them
		for _, k := range []struct {
			on   bool
			name string
		}{{ck.PartitionActivations, "partition_activations"}, {ck.CPUCheckpointing, "cpu_checkpointing"},
			{ck.SynchronizeCheckpointBoundary, "synchronize_checkpoint_boundary"}} {
			if k.on {
				g.notes = append(g.notes, "activation_checkpointing."+k.name+": applied by the data-parallel engine; a pipeline part's checkpointed blocks keep their inputs whole in their own memory")
			}
		}
	}
	return g, nil
}

// Notes lists configuration choices that have no effect in this build, for
// the trainer to log.
func (g *GPT) Notes() []string { return append([]string(nil), g.notes...) }

// Params lists every parameter once, in forward order: wte, wpe, the blocks,
// ln_f. The output head has none of its own (it is wte).
func (g *GPT) Params() []*model.Param {
	var ps []*model.Param
	for _, grp := range g.Groups() {
		ps = append(ps, grp.Params...)
	}
	return ps
}

// Groups lists the parameters by module: the embedding, each block, ln_f.
// The head reuses the embedding's group.
func (g *GPT) Groups() []ParamGroup {
	gs := []ParamGroup{{Name: "transformer.embed", Params: g.Embed.Params()}}
	for l, b := range g.Blocks {
		gs = append(gs, ParamGroup{Name: fmt.Sprintf("transformer.h.%d", l), Params: b.Params()})
	}
	return append(gs, ParamGroup{Name: "transformer.ln_f", Params: g.LNF.Params()})
}

// NewReadyGPT is NewGPT, its own parameter buffers (NewParamBuffers), Init
// with seed and UseBackend(be) in one call: a model ready to hand to
// deepgo.Initialize. be may be nil when only an engine drives the model
// (the engine hands its modules its own backend). Free releases the
// buffers with the rest.
func NewReadyGPT(cfg GPTConfig, be backend.Backend, seed uint64) (*GPT, error) {
	g, err := NewGPT(cfg)
	if err != nil {
		return nil, err
	}
	pb, err := NewParamBuffers(g)
	if err != nil {
		return nil, err
	}
	g.own = pb
	if err := g.Init(seed); err != nil {
		g.Free()
		return nil, err
	}
	g.UseBackend(be)
	return g, nil
}

// Init fills the bound values GPT-2's way, from seed: weights N(0, 0.02),
// the residual projections N(0, 0.02/sqrt(2 Layers)), biases 0,
// LayerNorm gains 1; an MoE gate's wg and its experts' weights likewise,
// every expert its own draw.
func (g *GPT) Init(seed uint64) error {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	proj := map[*model.Param]bool{}
	for _, b := range g.Blocks {
		proj[b.Proj.W] = true
		if b.MoE == nil {
			proj[b.FCProj.W] = true
			continue
		}
		// each expert is drawn on its own (DeepSpeed deep-copies one, so
		// its experts start equal) and wg like any weight
		for _, p := range b.MoE.Proj {
			proj[p.W] = true
		}
		if b.MoE.Res != nil {
			proj[b.MoE.Res.Proj.W] = true
		}
	}
	ln := map[*model.Param]bool{g.LNF.W: true}
	for _, b := range g.Blocks {
		ln[b.LN1.W], ln[b.LN2.W] = true, true
	}
	for _, p := range g.Params() {
		if p.Data == nil {
			return fmt.Errorf("nn.GPT.Init: parameter %s has no value bound", p.Name)
		}
		v, err := p.Data.Float32s()
		if err != nil {
			return fmt.Errorf("nn.GPT.Init: %s: %w", p.Name, err)
		}
		switch {
		case ln[p]:
			for i := range v {
				v[i] = 1
			}
		case len(p.Shape) == 1:
			clear(v)
		default:
			std := 0.02
			if proj[p] {
				std /= math.Sqrt(2 * float64(g.Config.Layers))
			}
			// a shard draws the full value and keeps its cut, so the
			// sharded model is the unsharded one with the same seed
			full := v
			s, cut := g.tp.shardOf(p)
			if cut {
				full = make([]float32, s.numel())
			}
			for i := range full {
				full[i] = float32(r.NormFloat64() * std)
			}
			if cut {
				s.cutFull(v, full, g.tp.c.Rank(), g.tp.c.Size())
			}
		}
	}
	return nil
}

// gptState is the activation memory for one (B, T).
type gptState struct {
	b, t       int
	acts, scr  Arena
	dev        tensor.Device // where acts and scr allocate
	saved      int64
	tokens     *tensor.Tensor   // [B, T] int32
	targets    *tensor.Tensor   // [B, T] int32
	resid      []*tensor.Tensor // Layers+1 of [N, C]
	blockActs  []*BlockActivations
	recompute  *BlockActivations // shared by checkpointed blocks
	scratch    *BlockScratch
	lnf        *tensor.Tensor // [N, C]
	lnfMean    *tensor.Tensor // [N]
	lnfRstd    *tensor.Tensor
	probs      *tensor.Tensor // [N, V]: logits, then probs, then dlogits
	losses     *tensor.Tensor // [N]
	dlosses    *tensor.Tensor // [N]
	dA, dB     *tensor.Tensor // [N, C] residual-stream gradients
	dwteHead   *tensor.Tensor // [V, C]: the head's share of the tied wte gradient
	recomputed time.Duration
	gradOut    model.Activation
	// engine is true when an engine checkpoints the model's segments
	// (model.CheckpointingFrom): every block then allocates its
	// activations and output from the call's arena, for the engine to
	// free or keep, and in, bacts, headIn are what the last forward of
	// each block and of the head ran on.
	engine bool
	in     []*tensor.Tensor
	bacts  []*BlockActivations
	headIn *tensor.Tensor
}

// checkpointed reports how many leading blocks are checkpointed.
func (g *GPT) checkpointed() int {
	ck := g.Config.Checkpointing
	if !ck.Enabled {
		return 0
	}
	if ck.NumberCheckpoints == 0 || ck.NumberCheckpoints > g.Config.Layers {
		return g.Config.Layers
	}
	return ck.NumberCheckpoints
}

// private is how many leading blocks the GPT checkpoints itself: none
// when an engine does.
func (g *GPT) private() int {
	if g.st != nil && g.st.engine {
		return 0
	}
	return g.checkpointed()
}

func (g *GPT) alloc(be backend.Backend, b, t int) error { return g.allocFor(be, b, t, false) }

// allocFor sizes the activation memory; engine: an engine checkpoints
// (gptState.engine).
func (g *GPT) allocFor(be backend.Backend, b, t int, engine bool) error {
	dev := be.Device()
	if g.st != nil && g.st.b == b && g.st.t == t && g.st.dev == dev && g.st.engine == engine {
		return nil
	}
	g.freeActivations()
	s := &gptState{b: b, t: t, dev: dev, engine: engine}
	if !dev.IsCPU() {
		s.acts.SetAlloc(be.Empty)
		s.scr.SetAlloc(be.Empty)
	}
	n, c, L := b*t, g.Config.Width, g.Config.Layers
	// rn: the residual stream's rows here (a shard of them under Megatron
	// sequence parallelism)
	rn := g.tp.rows(n)
	k := g.checkpointed()
	if engine {
		k = 0
		s.in, s.bacts = make([]*tensor.Tensor, L), make([]*BlockActivations, L)
	}
	fail := func(err error) error { s.acts.Reset(); s.scr.Reset(); return err }
	var err error
	if s.tokens, err = s.acts.Int32(b, t); err != nil {
		return fail(err)
	}
	if s.targets, err = s.acts.Int32(b, t); err != nil {
		return fail(err)
	}
	// resid[l] is block l's input; for a checkpointed block it is all that
	// block keeps, and with contiguous_memory_optimization those inputs
	// share one buffer
	s.resid = make([]*tensor.Tensor, L+1)
	if k > 0 && g.Config.Checkpointing.ContiguousMemoryOptimization && g.hi == 0 {
		pack, err := s.acts.Float32(k * n * c)
		if err != nil {
			return fail(err)
		}
		for l := 0; l < k; l++ {
			v, _ := pack.Slice(l*n*c, n*c)
			s.resid[l] = v
		}
	}
	for l := range s.resid {
		// resid[l] is the input of module l+1 and the output of module l;
		// under an engine's checkpointing the blocks' outputs are the
		// engine's
		if engine && l > 0 {
			break
		}
		if s.resid[l] == nil && (g.inPart(l) || g.inPart(l+1)) {
			if s.resid[l], err = s.acts.Float32(rn, c); err != nil {
				return fail(err)
			}
		}
	}
	s.blockActs = make([]*BlockActivations, L)
	recompute := false
	for l, blk := range g.Blocks {
		if !g.inPart(l+1) || engine {
			continue
		}
		if l < k {
			recompute = true
			s.saved += int64(rn * c * 4)
			continue
		}
		if s.blockActs[l], err = blk.NewActivations(&s.acts, b, t); err != nil {
			return fail(err)
		}
	}
	if recompute {
		if s.recompute, err = g.newRecompute(&s.acts, b, t); err != nil {
			return fail(err)
		}
	}
	type buf struct {
		p     **tensor.Tensor
		a     *Arena
		shape []int
	}
	bufs := []buf{{&s.dA, &s.scr, []int{rn, c}}, {&s.dB, &s.scr, []int{rn, c}}}
	if head := L + 1; g.inPart(head) {
		bufs = append(bufs, buf{&s.lnf, &s.acts, []int{n, c}}, buf{&s.lnfMean, &s.acts, []int{n}}, buf{&s.lnfRstd, &s.acts, []int{n}},
			buf{&s.probs, &s.acts, []int{n, g.Embed.Vocab}}, buf{&s.losses, &s.acts, []int{n}}, buf{&s.dlosses, &s.scr, []int{n}})
	}
	if g.inPart(0) || g.inPart(L+1) {
		bufs = append(bufs, buf{&s.dwteHead, &s.scr, []int{g.Embed.Vocab, c}})
	}
	for _, f := range bufs {
		if *f.p, err = f.a.Float32(f.shape...); err != nil {
			return fail(err)
		}
	}
	if s.scratch, err = g.Blocks[0].NewScratch(&s.scr, b, t); err != nil {
		return fail(err)
	}
	g.st = s
	return nil
}

// Free releases everything the model allocated: activation memory and the
// parameter buffers of NewReadyGPT. Parameters bound by the caller (Bind, NewParamBuffers) stay
// the caller's to free.
func (g *GPT) Free() {
	if g.own != nil {
		g.own.Free()
		g.own = nil
	}
	g.freeActivations()
}

// freeActivations releases the activation memory (the next Forward
// allocates again, for a new batch shape).
func (g *GPT) freeActivations() {
	g.tp.free()
	g.sp.free()
	if g.st != nil {
		g.st.acts.Reset()
		g.st.scr.Reset()
		g.st = nil
	}
}

// ActivationBytes is the GPT's activation memory, live from a forward to
// its backward, and its layers' scratch (ActivationStats' Bytes and
// ScratchBytes): deepgo's engines report it in Memory as
// ModelActivations.
func (g *GPT) ActivationBytes() int64 {
	s := g.ActivationStats()
	return s.Bytes + s.ScratchBytes
}

// ActivationStats reports the activation memory of the last Forward.
func (g *GPT) ActivationStats() ActivationStats {
	if g.st == nil {
		return ActivationStats{Checkpointed: g.checkpointed()}
	}
	return ActivationStats{Bytes: g.st.acts.Bytes(), Allocs: g.st.acts.Allocs(), SavedInputBytes: g.st.saved,
		ScratchBytes: g.st.scr.Bytes() + g.sp.bufferBytes() + g.tp.bufferBytes(), Checkpointed: g.checkpointed(), Recompute: g.st.recomputed}
}

func (g *GPT) actsFor(l int) *BlockActivations {
	if g.st.engine {
		return g.st.bacts[l]
	}
	if l < g.checkpointed() {
		return g.st.recompute
	}
	return g.st.blockActs[l]
}

// CheckpointSegments marks the checkpointed blocks (Checkpointing) as one
// segment each, for an engine that checkpoints (model.Checkpointed); a
// pipeline part marks none: the pipeline engine checkpoints through
// CheckpointEvery.
func (g *GPT) CheckpointSegments() []model.Segment {
	if g.hi != 0 {
		return nil
	}
	segs := make([]model.Segment, g.checkpointed())
	for l := range segs {
		name := fmt.Sprintf("transformer.h.%d", l)
		segs[l] = model.Segment{First: name, Last: name}
	}
	return segs
}

// Forward runs the model on inputs[B*T] (token ids, row-major [B, T]) and
// returns the mean cross-entropy against targets[B*T], keeping what
// Backward needs. It runs the same modules the engine runs (Modules, Loss),
// on be (nil: UseBackend's). T may be at most Config.SeqLen. Under
// sequence parallelism (Config.SP) inputs and targets are this rank's
// sequence shard (model.TokenBatch.SequenceShard), T its length, T·sp at
// most SeqLen, and the loss is the mean over the whole sequences.
func (g *GPT) Forward(be backend.Backend, inputs, targets []int32, b, t int) (float32, error) {
	bg := withBackend(be)
	var act model.Activation = model.TokenBatch{Inputs: inputs, Targets: targets, B: b, T: t}
	batch := act
	for _, m := range g.Modules() {
		out, err := m.Forward(bg, act)
		if err != nil {
			return 0, err
		}
		act = out
	}
	loss, grad, err := g.Loss(bg, act, batch, 1)
	if err != nil {
		return 0, err
	}
	g.st.gradOut = grad
	return float32(loss), nil
}

// Backward accumulates the gradient of the last Forward's mean loss into
// every bound gradient (zero them first unless accumulating micro-batches).
// It may run once per Forward, on be (nil: UseBackend's).
func (g *GPT) Backward(be backend.Backend) error {
	if g.st == nil || g.st.gradOut == nil {
		return fmt.Errorf("nn.GPT.Backward: no forward pass to differentiate")
	}
	bg := withBackend(be)
	grad := g.st.gradOut
	g.st.gradOut = nil
	mods := g.Modules()
	for i := len(mods) - 1; i >= 0; i-- {
		var err error
		if grad, err = mods[i].Backward(bg, grad); err != nil {
			return err
		}
	}
	return nil
}

// withBackend is the context Forward and Backward run the modules in: one
// carrying be, or none (the modules then use UseBackend's).
func withBackend(be backend.Backend) context.Context {
	if be == nil {
		return context.Background()
	}
	return backend.NewContext(context.Background(), be)
}
