package nn

import (
	"fmt"
	"math"
)

// MoEConfig turns the MLP of every EveryN-th block of a GPT into a
// mixture of experts, DeepSpeed's deepspeed.moe.layer.MoE as
// Megatron-DeepSpeed builds it (--num-experts, --moe-expert-parallel-size,
// --topk, --moe-loss-coeff, --expert-interval): a TopKGate (the linear wg
// without bias, see GateConfig) routes each token to K of Experts GPT
// MLPs (c_fc, GELU, c_proj). The zero value (Experts 0) is no MoE.
//
// Differences from DeepSpeed's defaults, all chosen so the routing is a
// function of the logits alone: use_rts (DeepSpeed's default true) and
// noisy_gate_policy RSample/Jitter need torch's random numbers and are
// refused, and so is top2_2nd_expert_sampling (DeepSpeed's default true;
// deepgo's second expert is the largest remaining logit, DeepSpeed's
// top2gating with the flag false). Under k = 1 an over-full expert keeps
// its first tokens (see route1).
type MoEConfig struct {
	// Experts is num_experts; 0 is no MoE.
	Experts int
	// EPSize is ep_size: 0 or 1 (every rank holds every expert, reduced
	// over the data-parallel group like any parameter).
	EPSize int
	// K is the experts per token: 1 or 2 (0 means 1).
	K int
	// CapacityFactor and EvalCapacityFactor size the experts' capacity in
	// training and evaluation (GPT.SetTraining); 0 means 1, DeepSpeed's
	// default.
	CapacityFactor, EvalCapacityFactor float64
	// MinCapacity is min_capacity (DeepSpeed's MoE default 4; here the
	// caller sets it, 0 is none).
	MinCapacity int
	// DropTokens is drop_tokens (DeepSpeed's default is true; the Go zero
	// value keeps every token, capacity growing to the busiest expert).
	DropTokens bool
	// LossCoeff is Megatron-DeepSpeed's --moe-loss-coeff: the GPT's loss
	// adds LossCoeff × Σ l_aux over its MoE layers (0: no load-balancing
	// loss; deepgo train's --moe-loss-coeff defaults to 0.1).
	LossCoeff float64
	// EveryN is --expert-interval: block l (from 0) is an MoE block when
	// (l+1) % EveryN == 0; 0 means 1, every block.
	EveryN int
	// UseResidual is PR-MoE (use_residual): a dense MLP beside the experts,
	// mixed with them by a softmax over coefficient(x) (see moe_residual.go).
	UseResidual bool
	// UseRTS, a NoisyGatePolicy other than "" or "None", and
	// Top2SecondExpertSampling are refused (see above).
	UseRTS                   bool
	NoisyGatePolicy          string
	Top2SecondExpertSampling bool
}

// On reports whether the configuration asks for MoE.
func (c MoEConfig) On() bool { return c.Experts > 0 }

// At reports whether block l is an MoE block.
func (c MoEConfig) At(l int) bool {
	if !c.On() {
		return false
	}
	n := max(c.EveryN, 1)
	return (l+1)%n == 0
}

// gate is the TopKGate's configuration at the given capacity factor.
func (c MoEConfig) gate(train bool) GateConfig {
	cf := c.CapacityFactor
	if !train {
		cf = c.EvalCapacityFactor
	}
	if cf == 0 {
		cf = 1
	}
	return GateConfig{K: max(c.K, 1), CapacityFactor: cf, MinCapacity: c.MinCapacity, DropTokens: c.DropTokens}
}

// check validates the configuration ("moe.<field>" in errors).
func (c MoEConfig) check() error {
	if !c.On() {
		if c.Experts < 0 {
			return fmt.Errorf("moe.num_experts %d: must be >= 0", c.Experts)
		}
		return nil
	}
	switch {
	case c.EPSize > 1:
		return fmt.Errorf("moe.ep_size %d: not supported: expert parallelism (ep_size %d > 1)", c.EPSize, c.EPSize)
	case c.EPSize < 0:
		return fmt.Errorf("moe.ep_size %d: must be 1", c.EPSize)
	case c.EveryN < 0:
		return fmt.Errorf("moe.expert_interval %d: must be >= 1", c.EveryN)
	case c.UseRTS:
		return fmt.Errorf("moe.use_rts true: not supported: random token selection needs torch's random numbers (use false)")
	case c.NoisyGatePolicy != "" && c.NoisyGatePolicy != "None":
		return fmt.Errorf("moe.noisy_gate_policy %q: not supported: noisy gating needs torch's random numbers (use None)", c.NoisyGatePolicy)
	case c.Top2SecondExpertSampling:
		return fmt.Errorf("moe.top2_2nd_expert_sampling true: not supported: Gumbel sampling needs torch's random numbers (use false)")
	case math.IsNaN(c.LossCoeff) || math.IsInf(c.LossCoeff, 0) || c.LossCoeff < 0:
		return fmt.Errorf("moe.loss_coeff %v: must be a finite number >= 0", c.LossCoeff)
	}
	for _, g := range []GateConfig{c.gate(true), c.gate(false)} {
		if err := g.Check("moe"); err != nil {
			return err
		}
	}
	if max(c.K, 1) > c.Experts {
		return fmt.Errorf("moe.k %d: more than num_experts %d", c.K, c.Experts)
	}
	return nil
}
