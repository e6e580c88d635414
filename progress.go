package deepgo

// DeepSpeed's progress lines, which both engines print on the reporting
// rank: the data-parallel engine's _report_progress ("step=N, skipped=S,
// lr=[...], mom=[...]") once an optimizer is built and then every
// steps_per_print optimizer steps, and the PipelineEngine's "steps: N
// loss: L iter time (s): T samples/sec: S" every steps_per_print batches.

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/optim"
)

// progressLine is DeepSpeed's _report_progress line as log_dist prints it
// on rank 0: the step, the skipped steps, and get_lr() and get_mom(), the
// optimizer's one param group's lr and momentum as Python prints the
// lists.
func progressLine(step, skipped int, lr float64, mom string) string {
	return fmt.Sprintf("[Rank 0] step=%d, skipped=%d, lr=[%s], mom=[%s]", step, skipped, config.PyFloatRepr(lr), mom)
}

// momRepr is the param group's momentum as DeepSpeed's get_mom() holds it
// and Python prints it: torch SGD's momentum (the int 0 when the config
// leaves it out); for the others the betas: the list the config gave
// ("[0.9, 0.95]"), else the optimizer's default tuple ("(0.9, 0.999)"), or
// under a schedule that drives them (OneCycle's cycle_momentum) the tuple
// it writes, (momentum, 0.99); an optimizer passed with WithOptimizer
// prints as the config's defaults would. An integral value the config wrote
// without a fraction prints as a float here, where Python keeps an int.
func momRepr(cfg *config.Config, opt optim.Optimizer, sched optim.Schedule) string {
	h := opt.Defaults()
	var given map[string]any // the config's params; none for WithOptimizer's
	if cfg.Optimizer != nil {
		given = cfg.Optimizer.Params
	}
	if !hasBetas(opt.Kind()) {
		if _, ok := given["momentum"]; !ok {
			return "0"
		}
		return config.PyFloatRepr(h.Momentum)
	}
	if sched != nil {
		if b, ok := sched.Betas(); ok && len(b) > 0 {
			return "(" + config.PyFloatRepr(b[0][0]) + ", " + config.PyFloatRepr(b[0][1]) + ")"
		}
	}
	pair := config.PyFloatRepr(h.Beta1) + ", " + config.PyFloatRepr(h.Beta2)
	if _, ok := given["betas"]; ok {
		return "[" + pair + "]"
	}
	return "(" + pair + ")"
}

// reportEvery is steps_per_print, 0 when the config leaves it unset
// (DeepSpeed 0.19.8's default: no progress lines but the first).
func reportEvery(cfg *config.Config) int {
	if cfg.StepsPerPrint == nil || *cfg.StepsPerPrint < 1 {
		return 0
	}
	return *cfg.StepsPerPrint
}

// reportProgress prints progressLine to w after optimizer step step (0:
// as Initialize ends, which DeepSpeed does whatever steps_per_print says)
// when step is a multiple of steps_per_print.
func reportProgress(w io.Writer, cfg *config.Config, step, skipped int, lr float64, opt optim.Optimizer, sched optim.Schedule) {
	if n := reportEvery(cfg); step == 0 || n > 0 && step%n == 0 {
		fmt.Fprintln(w, progressLine(step, skipped, lr, momRepr(cfg, opt, sched)))
	}
}

// reportBatch prints, on the world's rank 0, DeepSpeed's progress line of
// the optimizer step the batch just took (its _take_model_step's) and the
// PipelineEngine's "steps:" line, each when steps_per_print says; the
// batch of mean loss loss took took.
func (e *PipeEngine) reportBatch(loss float64, took time.Duration) {
	e.win.took += took
	if e.world.Rank() != 0 {
		return
	}
	reportProgress(e.log, e.cfg, e.globalSteps, e.skippedSteps, e.LR(), e.opt, e.lrs)
	if line := pipeStepsLine(e.globalSteps, reportEvery(e.cfg), e.batch.TrainBatchSize, loss, e.win.took); line != "" {
		fmt.Fprintln(e.log, line)
		e.win = batchWindow{}
	}
}

// batchWindow adds up the PipelineEngine's train_batch times between two
// of its "steps:" lines (DeepSpeed's TRAIN_BATCH_TIMER, read and reset at
// each).
type batchWindow struct{ took time.Duration }

// pipeStepsLine is the PipelineEngine's line after batch step of mean loss
// loss, when step is a multiple of steps_per_print every (the window's
// batches took took in all; batch samples each), else "".
func pipeStepsLine(step, every, batch int, loss float64, took time.Duration) string {
	if every < 1 || step%every != 0 {
		return ""
	}
	iter := took.Seconds() / float64(every)
	var tput float64
	if iter > 0 {
		tput = float64(batch) / iter
	}
	return strings.TrimSpace(fmt.Sprintf("steps: %d loss: %0.4f iter time (s): %0.3f samples/sec: %0.3f", step, loss, iter, tput))
}
