package deepgo

// This file holds the LR schedule's construction for an engine's optimizer
// and the momentum the schedule drives (OneCycle's cycle_momentum).

import (
	"fmt"
	"slices"

	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/zero"
)

// newSchedule builds the config's LR schedule for an engine stepping with
// opt, whose param group starts at opt's learning rate. An optimizer
// without betas (SGD) gets optim.WithoutBetas: OneCycle then does not
// cycle the momentum, as DeepSpeed's OneCycle does not for an optimizer
// whose defaults have no "betas" (it warns). That warning, and the others
// building the schedule gives, are returned when config.Parse did not
// already give them (the config said nothing of the optimizer's type: one
// passed with WithOptimizer).
func newSchedule(cfg *config.Config, opt optim.Optimizer) (optim.Schedule, []string, error) {
	var warns []string
	opts := []optim.ScheduleOption{optim.WithWarnings(func(msg string) {
		if !slices.ContainsFunc(cfg.Warnings, func(w config.Warning) bool { return w.String() == msg }) {
			warns = append(warns, "config warning: "+msg)
		}
	})}
	if !hasBetas(opt.Kind()) {
		opts = append(opts, optim.WithoutBetas())
	}
	s, err := optim.NewSchedule(cfg.Scheduler.Type, cfg.Scheduler.Params, []float64{opt.Defaults().LR}, opts...)
	if err != nil {
		return nil, nil, err
	}
	return s, warns, nil
}

// hasBetas reports whether DeepSpeed's optimizer of kind k has "betas" in
// its defaults (FusedAdam, DeepSpeedCPUAdam, FusedLamb, FusedLion do;
// torch.optim.SGD has "momentum" instead).
func hasBetas(k optim.Kind) bool { return k != optim.KindSGD }

// applyScheduleBetas gives z, for its next Step, the betas the schedule s
// (nil: none) drives at its current t, on top of opt's defaults: OneCycle
// with cycle_momentum, which in DeepSpeed writes betas = (momentum, 0.99)
// into every param group when it is built (t = -1) and at each
// scheduler.step() after a step that did not overflow. The step then runs
// with them, its Adam/Lamb bias correction 1 - beta1^step included, as
// DeepSpeed's fused and CPU Adam read the group's current betas each step.
// Every other schedule leaves the optimizer's betas alone. A momentum
// outside [0, 1) (decay_mom_rate growing it past 1) is an error naming the
// schedule's keys, not a step that diverges.
func applyScheduleBetas(z *zero.Optimizer, opt optim.Optimizer, s optim.Schedule) error {
	if s == nil {
		return nil
	}
	b, ok := s.Betas()
	if !ok || len(b) == 0 {
		return nil
	}
	for i, v := range b[0] {
		if !(v >= 0 && v < 1) {
			return fmt.Errorf("deepgo: scheduler.type %s: betas[%d] %.6g at last_batch_iteration %d: must be in [0, 1) (scheduler.params.cycle_min_mom, cycle_max_mom, decay_mom_rate)",
				s.Type(), i, v, s.LastBatchIteration())
		}
	}
	h := opt.Defaults()
	h.Beta1, h.Beta2 = b[0][0], b[0][1]
	z.SetHyper(&h)
	return nil
}
