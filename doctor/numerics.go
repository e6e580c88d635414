package doctor

import (
	"fmt"
	"strings"

	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/rundir"
)

// maxListed is how many steps a finding lists.
const maxListed = 5

// checkSpikes is §4.2's 损失波动大 row: loss spikes, with warmup, LR and
// clipping advice.
func checkSpikes(in Input) (string, *Finding) {
	loss := in.Run.Get(rundir.TagLoss)
	if loss == nil || loss.Len() == 0 {
		return NotMeasured + ": no " + rundir.TagLoss, nil
	}
	spikes := lossSpikes(loss)
	checked := fmt.Sprintf("%d loss spikes in %d steps (a spike: > %.1fx the median of up to %d steps before, or not finite; a step needs %d finite losses before it)", len(spikes), loss.Len(), SpikeRatio, SpikeWindow, SpikeMinHistory)
	if len(spikes) == 0 {
		return checked, nil
	}
	lr, gn := in.Run.Get(rundir.TagLR), in.Run.Get(rundir.TagGradNorm)
	var lines []string
	for _, s := range spikes[:min(len(spikes), maxListed)] {
		l := fmt.Sprintf("step %d: loss %.4g vs median %.4g (%.2fx)", s.step, s.loss, s.median, s.loss/s.median)
		if lr != nil {
			if v, ok := lr.At(s.step); ok {
				l += fmt.Sprintf(", lr %.3g", v)
			}
		}
		if gn != nil {
			if v, ok := gn.At(s.step); ok {
				l += fmt.Sprintf(", grad_norm %.3g", v)
			}
		}
		lines = append(lines, l)
	}
	f := &Finding{Title: "loss spikes (损失波动大)", Evidence: []string{
		fmt.Sprintf("%d loss spikes in %d steps: %s", len(spikes), loss.Len(), strings.Join(lines, "; ")),
	}}
	f.Advice = lrAdvice(in.Config, lr, spikes[0].step)
	if in.Config != nil && in.Config.GradientClipping == 0 {
		f.Advice = append(f.Advice, Advice{Text: "gradient_clipping 0 -> 1.0: bound the update a single bad batch can make"})
	}
	return checked, f
}

// lrAdvice is the guide's remedy for an LR too high: a linear warmup past
// the first trouble, and a lower peak.
func lrAdvice(cfg *config.Config, lr *rundir.Series, first int64) []Advice {
	var out []Advice
	warm := max(2*first, 100)
	switch {
	case cfg == nil:
	case cfg.Scheduler == nil:
		out = append(out, Advice{Text: fmt.Sprintf("scheduler WarmupLR with warmup_num_steps >= %d: the first trouble is at step %d and there is no warmup", warm, first)})
	default:
		if w, ok := cfg.Scheduler.Int("warmup_num_steps"); ok && int64(w) < warm {
			out = append(out, Advice{Text: fmt.Sprintf("scheduler.params.warmup_num_steps %d -> %d: the first trouble is at step %d", w, warm, first)})
		}
	}
	if lr != nil {
		if peak, _, ok := lr.Max(); ok {
			out = append(out, Advice{Text: fmt.Sprintf("lower the peak learning rate %.3g -> %.3g (optimizer.params.lr, and the scheduler's max)", peak, peak/2)})
		}
	}
	return out
}

// checkOverflow finds fp16 overflow storms: many skipped steps after the
// scaler's calibration, or the scale pinned at min_loss_scale.
func checkOverflow(in Input) (string, *Finding) {
	steps, n, from, ok := overflowSteps(in.Run)
	if !ok {
		return NotMeasured + ": no " + rundir.TagOverflow + " or " + rundir.TagSkippedSteps, nil
	}
	cal := calibration(steps)
	after := steps[cal:]
	rate := 0.0
	if n > int64(cal) {
		rate = float64(len(after)) / float64(n-int64(cal))
	}
	streak, streakFrom := longestStreak(after)
	checked := fmt.Sprintf("%d overflows in %d steps, %d of them the scaler's calibration from step 1 (storm: >= %d and >= %s of the rest)", len(steps), n, cal, StormMin, pct(StormRate))
	scale := in.Run.Get(rundir.TagLossScale)
	minScale, minStep := floorHit(in.Config, scale)
	if (len(after) < StormMin || rate < StormRate) && minStep == 0 {
		return checked, nil
	}
	f := &Finding{Title: "overflow storm: skipped steps (损失波动大, fp16)", Evidence: []string{fmt.Sprintf(
		"%d of %d steps after the calibration skipped for overflow (%s), steps %s; longest run %d steps from step %d (%s); target < %s",
		len(after), n-int64(cal), pct(rate), stepRange(after), streak, streakFrom, from, pct(StormRate))}}
	if scale != nil {
		hi, _, _ := scale.Max()
		lo, last, _ := scale.Last()
		f.Evidence = append(f.Evidence, fmt.Sprintf("loss scale %g at most, %g at step %d (%s)", hi, lo, last, rundir.TagLossScale))
	}
	if minStep > 0 {
		f.Evidence = append(f.Evidence, fmt.Sprintf("the scale reached fp16.min_loss_scale %g at step %d: the gradients overflow even unscaled", minScale, minStep))
	}
	cfg := in.Config
	if cfg != nil && cfg.FP16.Enabled {
		if cfg.FP16.LossScale > 0 {
			f.Advice = append(f.Advice, Advice{Text: fmt.Sprintf("fp16.loss_scale %g -> 0: a dynamic scale halves on overflow instead of skipping every step", cfg.FP16.LossScale)})
		} else if minStep == 0 {
			f.Advice = append(f.Advice, Advice{Text: fmt.Sprintf("fp16.hysteresis %d -> %d: tolerate more overflows before halving, and fp16.loss_scale_window %d -> %d: grow the scale back more slowly",
				cfg.FP16.Hysteresis, 2*cfg.FP16.Hysteresis, cfg.FP16.LossScaleWindow, 2*cfg.FP16.LossScaleWindow)})
		}
		f.Advice = append(f.Advice, Advice{Text: "bf16.enabled true, fp16.enabled false where the hardware has bfloat16 (the guide: A100 and later): fp32's range, no loss scaling"})
	}
	first := minStep
	if len(after) > 0 {
		first = after[0]
	}
	f.Advice = append(f.Advice, lrAdvice(cfg, in.Run.Get(rundir.TagLR), first)...)
	return checked, f
}

// floorHit is the first step the loss scale sits at fp16.min_loss_scale
// (0 when it never does, or without the config or the series).
func floorHit(cfg *config.Config, scale *rundir.Series) (float64, int64) {
	if cfg == nil || !cfg.FP16.Enabled || cfg.FP16.LossScale > 0 || scale == nil {
		return 0, 0
	}
	for i, v := range scale.Values {
		if v <= cfg.FP16.MinLossScale {
			return cfg.FP16.MinLossScale, scale.Steps[i]
		}
	}
	return 0, 0
}
