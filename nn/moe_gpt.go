package nn

import "fmt"

// checkMoE refuses MoE with what it does not support yet.
func checkMoE(cfg GPTConfig) error {
	if err := cfg.MoE.check(); err != nil {
		return fmt.Errorf("nn.NewGPT: %w", err)
	}
	if !cfg.MoE.On() {
		return nil
	}
	if n := cfg.TP.size(); n > 1 {
		return fmt.Errorf("nn.NewGPT: num_experts %d with tensor_model_parallel_size %d: not supported: MoE with tensor parallelism", cfg.MoE.Experts, n)
	}
	if n := cfg.SP.size(); n > 1 {
		return fmt.Errorf("nn.NewGPT: num_experts %d with sequence_parallel_size %d: not supported: MoE with sequence parallelism (the capacity is per rank's tokens)", cfg.MoE.Experts, n)
	}
	return nil
}

// buildMoE replaces the MLP of the MoE blocks (MoEConfig.At).
func (g *GPT) buildMoE() error {
	for l, b := range g.Blocks {
		if !g.Config.MoE.At(l) {
			continue
		}
		m, err := NewMoE(fmt.Sprintf("transformer.h.%d", l), g.Config.Width, g.Config.MoE)
		if err != nil {
			return fmt.Errorf("nn.NewGPT: %w", err)
		}
		b.MoE, b.FC, b.FCProj = m, nil, nil
	}
	return nil
}

// moeParams is the parameter count of one MoE layer over c channels
// with e experts, less the MLP it replaces; residual adds PR-MoE's MLP and
// coefficient.
func moeParams(c, e int, residual bool) int {
	n := (e-1)*(8*c*c+5*c) + e*c
	if residual {
		n += 8*c*c + 5*c + 2*c + 2
	}
	return n
}

// SetTraining selects the MoE layers' capacity factor: CapacityFactor in
// training (the default), EvalCapacityFactor otherwise (torch's
// model.train() and model.eval(); deepgo's engines do not switch it).
// Out of training, Loss leaves the aux loss out too: an evaluation
// reports the language-model loss alone (and its perplexity), as
// Megatron-DeepSpeed's validation reports "lm loss" apart from the MoE
// loss.
func (g *GPT) SetTraining(on bool) {
	for _, b := range g.Blocks {
		if b.MoE != nil {
			b.MoE.eval = !on
		}
	}
}

// MoEStats is one MoE layer's last forward: its l_aux and exp_counts.
type MoEStats struct {
	Layer     int
	LAux      float32
	ExpCounts []int64
	// Dropped is the routes capacity dropped.
	Dropped int
}

// MoEStats lists the MoE layers' last l_aux and expert counts, in block
// order; nil without MoE.
func (g *GPT) MoEStats() []MoEStats {
	var st []MoEStats
	for l, b := range g.Blocks {
		if b.MoE != nil {
			st = append(st, MoEStats{Layer: l, LAux: b.MoE.LAux, ExpCounts: append([]int64(nil), b.MoE.ExpCounts...), Dropped: b.MoE.Dropped})
		}
	}
	return st
}

// moeLoss is LossCoeff × Σ l_aux of the last forward, and hands each MoE
// layer its aux loss's gradient scale for the coming Backward.
func (g *GPT) moeLoss(gradScale float64) float64 {
	c := g.Config.MoE.LossCoeff
	var sum float64
	for _, b := range g.Blocks {
		if b.MoE != nil && b.MoE.eval {
			b.MoE.dLAux = 0 // an evaluation's loss is the language model's (SetTraining)
			continue
		}
		if b.MoE != nil {
			sum += float64(b.MoE.LAux)
			b.MoE.dLAux = c * gradScale
		}
	}
	return c * sum
}

// newRecompute allocates the activations the GPT's own checkpointed
// blocks share: a dense block's and, when there are MoE blocks too, an
// MoE layer's beside them.
func (g *GPT) newRecompute(a *Arena, b, t int) (*BlockActivations, error) {
	var dense, moe *Block
	for _, blk := range g.Blocks {
		switch {
		case blk.MoE != nil && moe == nil:
			moe = blk
		case blk.MoE == nil && dense == nil:
			dense = blk
		}
	}
	if dense == nil {
		return moe.NewActivations(a, b, t)
	}
	acts, err := dense.NewActivations(a, b, t)
	if err != nil || moe == nil {
		return acts, err
	}
	acts.MoE, err = moe.MoE.newActs(a, b*t)
	return acts, err
}
