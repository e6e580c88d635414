package doctor

import (
	"fmt"
	"math"
)

// smallBucket is the bucket size (elements) below which doctor proposes
// DeepSpeed's default: the guide's own example uses 5e7.
const (
	smallBucket   = 50_000_000
	defaultBucket = 500_000_000
)

// checkComm is §4.2's 训练速度慢 row against §6's communication target:
// the share of the step spent communicating, and the settings that cut it.
func checkComm(in Input) (string, *Finding) {
	c, ok := measureComm(in.Run)
	if !ok {
		return NotMeasured + ": the run has neither Train/deepgo/comm_time_ms with step_time_ms nor wall_clock_breakdown's times", nil
	}
	share := c.comm / c.step
	checked := fmt.Sprintf("%s of the step (target < %s)", pct(share), pct(CommTarget))
	if share < CommTarget {
		return checked, nil
	}
	f := &Finding{Title: "slow: communication-bound (训练速度慢)", Evidence: []string{fmt.Sprintf(
		"communication %.1f ms of a %.1f ms step = %s (%s, mean of %d steps from step %d); target < %s",
		c.comm, c.step, pct(share), c.from, c.n, c.first, pct(CommTarget))}}
	cfg := in.Config
	if cfg == nil {
		f.Advice = []Advice{{Text: "no config: pass --config for bucket and overlap advice"}}
		return checked, f
	}
	z := cfg.ZeroOptimization
	if z.OverlapComm != nil && !*z.OverlapComm || z.OverlapComm == nil && z.Stage != 3 {
		f.Advice = append(f.Advice, Advice{Text: "zero_optimization.overlap_comm false -> true: reduce each gradient bucket while backward computes the next, hiding up to the backward time"})
	}
	if z.Stage <= 2 && z.ReduceBucketSize < smallBucket {
		f.Advice = append(f.Advice, Advice{Text: fmt.Sprintf(
			"zero_optimization.reduce_bucket_size %d -> %d: fewer, larger reductions run nearer the link's bandwidth (the guide warns larger buckets fragment memory: up to 2 buckets in flight)",
			z.ReduceBucketSize, defaultBucket)})
	}
	if z.Stage <= 2 && z.AllgatherBucketSize < smallBucket {
		f.Advice = append(f.Advice, Advice{Text: fmt.Sprintf(
			"zero_optimization.allgather_bucket_size %d -> %d: fewer, larger parameter all-gathers after the step",
			z.AllgatherBucketSize, defaultBucket)})
	}
	if z.Stage == 3 && z.Stage3PrefetchBucketSize < smallBucket {
		f.Advice = append(f.Advice, Advice{Text: fmt.Sprintf(
			"zero_optimization.stage3_prefetch_bucket_size %d -> %d: gather parameters further ahead of the compute that needs them",
			z.Stage3PrefetchBucketSize, smallBucket)})
	}
	if compute := c.step - c.comm; compute > 0 {
		// gradients are reduced once per optimizer step, so k times the
		// micro-batches per step divides the communication per sample by k
		k := int(math.Ceil(c.comm * (1 - CommTarget) / (CommTarget * compute)))
		gas := in.gradAccum()
		if k > 1 {
			projected := c.comm / (float64(k)*compute + c.comm)
			f.Advice = append(f.Advice, Advice{Text: fmt.Sprintf(
				"gradient_accumulation_steps %d -> %d (the guide's remedy; train_batch_size grows %dx): one reduction per %d micro-batches, projected communication share %s",
				gas, gas*k, k, gas*k, pct(projected))})
		}
	}
	return checked, f
}
