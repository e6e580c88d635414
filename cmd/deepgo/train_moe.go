package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/deepgo-ml/deepgo/nn"
)

// moeFlags registers deepgo train's MoE flags (Megatron-DeepSpeed's
// --num-experts, --topk, --moe-train-capacity-factor,
// --moe-eval-capacity-factor, --moe-min-capacity, token dropping,
// --moe-loss-coeff, --expert-interval, --moe-expert-parallel-size) and
// returns what reads them back after Parse.
func moeFlags(fs *flag.FlagSet) func() (nn.MoEConfig, error) {
	experts := fs.Int("moe-experts", 0, "mixture of experts: replace the MLP of every --moe-expert-interval-th block by this many experts (DeepSpeed's MoE at ep_size 1; 0: none)")
	k := fs.Int("moe-k", 1, "MoE: experts per token, 1 or 2 (--topk)")
	cf := fs.Float64("moe-capacity-factor", 1, "MoE: training capacity factor")
	ecf := fs.Float64("moe-eval-capacity-factor", 1, "MoE: evaluation capacity factor")
	minCap := fs.Int("moe-min-capacity", 4, "MoE: minimum expert capacity")
	drop := fs.Bool("moe-drop-tokens", true, "MoE: drop the routes past an expert's capacity (false: the capacity is the busiest expert's count)")
	coeff := fs.Float64("moe-loss-coeff", 0.1, "MoE: the loss adds this times the sum of the layers' load-balancing loss l_aux")
	every := fs.Int("moe-expert-interval", 1, "MoE: every Nth block (Megatron-DeepSpeed's --expert-interval, whose default is 2)")
	res := fs.Bool("moe-use-residual", false, "MoE: PR-MoE, a dense MLP beside the experts mixed by a learned softmax coefficient (DeepSpeed's use_residual)")
	ep := fs.Int("moe-expert-parallel-size", 1, "MoE: expert parallel size; only 1 (every rank holds every expert)")
	return func() (nn.MoEConfig, error) {
		given := false
		fs.Visit(func(f *flag.Flag) { given = given || (len(f.Name) > 4 && f.Name[:4] == "moe-") })
		if *experts == 0 {
			if given {
				return nn.MoEConfig{}, fmt.Errorf("--moe-* flags given without --moe-experts: want --moe-experts N (N >= 1)")
			}
			return nn.MoEConfig{}, nil
		}
		if *experts < 0 {
			return nn.MoEConfig{}, fmt.Errorf("--moe-experts %d: want >= 0", *experts)
		}
		m := nn.MoEConfig{Experts: *experts, EPSize: *ep, K: *k, CapacityFactor: *cf, EvalCapacityFactor: *ecf,
			MinCapacity: *minCap, DropTokens: *drop, LossCoeff: *coeff, EveryN: *every, UseResidual: *res}
		if *every < 1 {
			return m, fmt.Errorf("--moe-expert-interval %d: want >= 1", *every)
		}
		if *k < 1 {
			return m, fmt.Errorf("--moe-k %d: want 1 or 2", *k)
		}
		// the flags' values, checked before any rank starts (the error
		// names DeepSpeed's MoE argument)
		if _, err := nn.NewMoE("check", 8, m); err != nil {
			return m, fmt.Errorf("--moe-* flags: %w", err)
		}
		return m, nil
	}
}

// printMoE writes the MoE layers' last l_aux and expert counts (rank 0's
// last micro-batch).
func printMoE(w io.Writer, g *nn.GPT, step int) {
	for _, s := range g.MoEStats() {
		fmt.Fprintf(w, "step %d moe layer %d: l_aux %.4f exp_counts %v dropped %d\n", step, s.Layer, s.LAux, s.ExpCounts, s.Dropped)
	}
}

// checkMoEShape refuses MoE with the parallelism it does not support,
// before any rank starts.
func checkMoEShape(m nn.MoEConfig, pp, tp, sp int) error {
	if !m.On() {
		return nil
	}
	for _, c := range []struct {
		n    int
		what string
	}{{pp, "pipeline stages"}, {tp, "tensor_model_parallel_size"}, {sp, "sequence_parallel_size"}} {
		if c.n > 1 {
			return fmt.Errorf("--moe-experts %d with %s %d: not supported: MoE with %s", m.Experts, c.what, c.n, c.what)
		}
	}
	return nil
}
