package doctor

import (
	"fmt"
	"strings"

	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/zero"
)

// checkMemory is §4.2's 显存OOM row against §6's memory target: the peak
// against the capacity, and each remedy with the memory the estimator says
// it frees per rank.
func checkMemory(in Input) (string, *Finding) {
	peak, okP := peakMemory(in.Run)
	capa, okC := capacity(in.Run)
	switch {
	case !okP:
		return NotMeasured + ": no memory series in the run", nil
	case !okC:
		return fmt.Sprintf("peak %s (%s); no capacity (deepgo_run.json memory_capacity_bytes or %s) to compare with", gib(peak.value), peak.from, "Train/GPU/memory_total_bytes"), nil
	}
	ratio := peak.value / capa.value
	// which reading was the largest: the engine's accounting, the process's
	// RSS or the GPU's own figure measure different things
	checked := fmt.Sprintf("peak %s (%s) = %s of %s (target < %s)", gib(peak.value), peak.from, pct(ratio), gib(capa.value), pct(MemoryTarget))
	if ratio < MemoryTarget {
		return checked, nil
	}
	f := &Finding{Title: "out-of-memory risk (显存OOM)", Evidence: []string{
		fmt.Sprintf("peak memory %s (%s, step %d) = %s of the %s capacity (%s); target < %s",
			gib(peak.value), peak.from, peak.step, pct(ratio), gib(capa.value), capa.from, pct(MemoryTarget)),
		fmt.Sprintf("to get under the target, free %s per rank", gib(peak.value-MemoryTarget*capa.value)),
	}}
	f.Advice = memoryAdvice(in, peak.value)
	return checked, f
}

// memoryAdvice proposes, in §4.2's order (ZeRO-3, then activation
// checkpointing) with offload and a smaller micro-batch beside them, each
// change with its estimated saving. It needs the config and the run's
// parameter count and world.
func memoryAdvice(in Input, peak float64) []Advice {
	info, cfg := in.Run.Info, in.Config
	if cfg == nil || info == nil || info.Params <= 0 || info.World <= 0 {
		return []Advice{{Text: "no estimates: they need the run's config, params and world (deepgo_run.json, --config)"}}
	}
	est, err := newEstimator(cfg, info.Params, info.World)
	if err != nil {
		return []Advice{{Text: "no estimates: " + err.Error()}}
	}
	stage := cfg.ZeroOptimization.Stage
	cur := est.modelStates(stage)
	var out []Advice
	for s := stage + 1; s <= 3; s++ {
		if next := est.modelStates(s); next < cur {
			out = append(out, Advice{SavingBytes: cur - next, Text: fmt.Sprintf(
				"zero_optimization.stage %d -> %d: model states per rank %s -> %s (deepgo's layout for %d params over %d ranks)",
				stage, s, gib(float64(cur)), gib(float64(next)), info.Params, info.World)})
		}
	}
	out = append(out, est.offload(cfg, info.OnCPU())...)
	// what the model states do not explain is activations and buffers,
	// which the micro-batch and checkpointing act on
	act := int64(peak) - cur
	if act <= 0 {
		return out
	}
	ac := cfg.ActivationCheckpointing
	if ac.NumberCheckpoints == nil && !ac.PartitionActivations && !ac.CPUCheckpointing {
		out = append(out, Advice{SavingBytes: act, Text: fmt.Sprintf(
			"activation_checkpointing (number_checkpoints = the layer count): blocks keep only their input and recompute the rest in backward; saves up to the %s of activations and buffers measured (peak - model states), at about one more forward of compute",
			gib(float64(act)))})
	}
	if mb := cfg.TrainMicroBatchSizePerGPU; mb != nil && *mb > 1 {
		gas := in.gradAccum()
		half := *mb / 2
		saving := act * int64(*mb-half) / int64(*mb)
		out = append(out, Advice{SavingBytes: saving, Text: fmt.Sprintf(
			"train_micro_batch_size_per_gpu %d -> %d with gradient_accumulation_steps %d -> %d (same train_batch_size): activations scale with the micro-batch, saves about %s of the %s",
			*mb, half, gas, gas**mb/half, gib(float64(saving)), gib(float64(act)))})
	}
	return out
}

// estimator wraps package zero's estimates for one model and world.
type estimator struct {
	lay                    *zero.Layout
	params                 int64
	world                  int
	modelB, accumB, states int
}

func newEstimator(cfg *config.Config, params int64, world int) (*estimator, error) {
	lay, err := zero.PlanBuckets([]zero.ModuleSpec{{Name: "model", Params: []zero.ParamSpec{{Name: "flat", Shape: []int{int(params)}}}}}, world, 2, 0)
	if err != nil {
		return nil, fmt.Errorf("doctor: layout of %d params over %d ranks: %w", params, world, err)
	}
	e := &estimator{lay: lay, params: params, world: world, modelB: 4, states: 2}
	if cfg.FP16.Enabled || cfg.BF16.Enabled {
		e.modelB = 2
	}
	e.accumB = e.modelB
	if d := cfg.DataTypes.GradAccumDtype; d != nil && *d == "fp32" {
		e.accumB = 4
	}
	if o := cfg.Optimizer; o != nil {
		switch strings.ToLower(o.Type) {
		case "sgd", "lion", "adagrad":
			e.states = 1 // one moment (momentum / squared sum)
		}
	}
	return e, nil
}

// modelStates is what zero allocates per rank for stage s.
func (e *estimator) modelStates(s int) int64 {
	return zero.PlannedModelStates(e.lay, s, e.modelB, e.accumB, e.states)
}

// offload is the offload_optimizer advice with DeepSpeed's estimate of the
// GPU memory it frees. On the CPU backend the states are in host memory
// already, so there is nothing to move.
func (e *estimator) offload(cfg *config.Config, onCPU bool) []Advice {
	z := cfg.ZeroOptimization
	if z.OffloadOptimizer != nil && z.OffloadOptimizer.Device != "none" {
		return nil
	}
	if onCPU {
		return []Advice{{Text: "offload_optimizer: not proposed, on the CPU backend the optimizer state is in host memory already"}}
	}
	var without, with int64
	how := "estimate_zero2_model_states_mem_needs"
	if z.Stage < 3 {
		_, without = zero.EstimateZero2(e.params, e.world, 1, false, 1.5)
		_, with = zero.EstimateZero2(e.params, e.world, 1, true, 1.5)
	} else {
		how = "estimate_zero3_model_states_mem_needs"
		_, without, _ = zero.EstimateZero3(e.params, e.params/10, e.world, 1, false, false, true, 1.5)
		_, with, _ = zero.EstimateZero3(e.params, e.params/10, e.world, 1, true, false, true, 1.5)
	}
	if with >= without {
		return nil
	}
	return []Advice{{SavingBytes: without - with, Text: fmt.Sprintf(
		"zero_optimization.offload_optimizer.device cpu: fp32 master and moments move to host memory, the step runs on the CPU; GPU model states %s -> %s (DeepSpeed's %s)",
		gib(float64(without)), gib(float64(with)), how)}}
}
