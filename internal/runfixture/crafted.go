package runfixture

import (
	"encoding/json"
	"math"

	"github.com/deepgo-ml/deepgo/rundir"
)

// Steps is the length of every crafted run.
const Steps = 60

// GiB is 2^30 bytes.
const GiB = 1 << 30

// Crafted-run facts the tests check findings against.
const (
	Params       = 6_700_000_000 // a 6.7B model
	World        = 8
	CapacityGiB  = 80 // an 80 GB GPU
	EntropyFloor = 2.5
	HealthyPeak  = 48 * GiB // 60% of capacity
	NearOOMPeak  = 76 * GiB // 95% of capacity
	StepMS       = 320.0
	HealthyComm  = 30.0  // 9.4% of the step
	BoundComm    = 150.0 // 46.9% of the step
	StormFrom    = 20    // first step of the overflow storm
	StormTo      = 40    // last step of the overflow storm
	MinLossScale = 1.0
	// TrainBatchSize is micro-batch 4 × accumulation 1 × World 8.
	TrainBatchSize = 32
)

// baseConfig is a DeepSpeed config for the crafted runs: fp16, ZeRO stage 1,
// no offload, warmup, default buckets.
func baseConfig() map[string]any {
	return map[string]any{
		"train_micro_batch_size_per_gpu": 4,
		"gradient_accumulation_steps":    1,
		"fp16":                           map[string]any{"enabled": true, "loss_scale": 0, "initial_scale_power": 16, "hysteresis": 2, "min_loss_scale": MinLossScale},
		"zero_optimization":              map[string]any{"stage": 1, "reduce_bucket_size": 500000000, "overlap_comm": true},
		"optimizer":                      map[string]any{"type": "Adam", "params": map[string]any{"lr": 1e-4}},
		"scheduler":                      map[string]any{"type": "WarmupLR", "params": map[string]any{"warmup_min_lr": 0, "warmup_max_lr": 1e-4, "warmup_num_steps": 10}},
		"gradient_clipping":              1.0,
		"wall_clock_breakdown":           true,
	}
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// Healthy is a run the doctor has nothing to say about: memory at 60% of
// capacity, communication under 10% of the step, one overflow at step 1 (the
// scaler's first calibration), a smoothly falling loss.
func Healthy() Run { return build(baseConfig(), HealthyPeak, HealthyComm, false) }

// NearOOM is Healthy with the device memory peaking at 95% of capacity.
func NearOOM() Run { return build(baseConfig(), NearOOMPeak, HealthyComm, false) }

// CommBound is Healthy with communication at 47% of the step, small gradient
// buckets and overlap_comm off.
func CommBound() Run {
	cfg := baseConfig()
	cfg["zero_optimization"] = map[string]any{"stage": 1, "reduce_bucket_size": 2000000, "allgather_bucket_size": 2000000, "overlap_comm": false}
	return build(cfg, HealthyPeak, BoundComm, false)
}

// OverflowStorm is Healthy with fp16 overflowing on most steps from
// StormFrom to StormTo: the loss scale halves down to min_loss_scale and the
// skipped-step count climbs.
func OverflowStorm() Run { return build(baseConfig(), HealthyPeak, HealthyComm, true) }

func build(cfg map[string]any, peak int64, comm float64, storm bool) Run {
	floor := EntropyFloor
	info := &rundir.Info{Config: mustJSON(cfg), World: World, Device: "cuda:0", Params: Params,
		EntropyFloor: &floor, MemoryCapacityBytes: CapacityGiB * GiB, Steps: Steps, TrainBatchSize: TrainBatchSize}
	v := map[string][]float64{}
	add := func(tag string, x float64) { v[tag] = append(v[tag], x) }
	scale, skipped := 65536.0, 0.0
	for i := 1; i <= Steps; i++ {
		overflow := i == 1 || storm && i >= StormFrom && i <= StormTo && i%4 != 0
		if overflow {
			skipped++
			scale = math.Max(scale/2, MinLossScale)
		}
		lr := 1e-4 * math.Min(1, float64(i)/10)
		add(rundir.TagLoss, EntropyFloor+3.5*math.Exp(-float64(i)/15)+0.01*math.Sin(float64(i)))
		add(rundir.TagLR, lr)
		add(rundir.TagLossScale, scale)
		fwd, opt := 100.0, 3.0
		bwd := StepMS - fwd - opt - 17 // 17 ms of the step is the engine's own bookkeeping
		add(rundir.TagForwardMS, fwd)
		add(rundir.TagBackwardMS, bwd)
		add(rundir.TagBackwardInnerMS, bwd-comm)
		add(rundir.TagBackwardReduceMS, comm)
		add(rundir.TagStepMS, opt)
		add(rundir.TagStepTimeMS, StepMS)
		add(rundir.TagCommTimeMS, comm)
		add(rundir.TagOptimizerTimeMS, opt)
		add(rundir.TagGradNorm, 1+0.1*math.Cos(float64(i)))
		add(rundir.TagSkippedSteps, skipped)
		add(rundir.TagOverflow, b2f(overflow))
		add(rundir.TagTokensPerS, 4*1024*World/(StepMS/1000))
		// memory climbs to its peak over the first steps (optimizer state
		// appears at the first step, activations at the first forward)
		dev := float64(peak) * math.Min(1, 0.7+0.1*float64(i))
		add(rundir.TagMemoryDevice, dev)
		add(rundir.TagMemoryPeak, float64(peak))
		add(rundir.TagMemoryHost, 6*GiB)
		add(rundir.TagRSS, 9*GiB)
		add(rundir.TagGPUMemoryUsed, dev+GiB/2)
		add(rundir.TagGPUMemoryTotal, CapacityGiB*GiB)
	}
	return Run{Info: info, Values: v}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
