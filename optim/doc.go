// Package optim holds what runs at an optimizer step: the fused optimizers
// (Adam/AdamW, Lamb, Lion, SGD: one kernel call per ParamGroup, state kept
// in a StateStore), the loss scalers (static and DeepSpeed's dynamic one),
// the learning-rate schedules (DeepSpeed's lr_schedules.py) and gradient
// clipping (CombinedScale).
//
// New and NewSchedule take a ds_config "optimizer" / "scheduler" block as
// decoded from JSON. They do not read it themselves: config.ParseOptimizer
// and config.ParseScheduler do, the same functions config.Parse checks a
// document with: optimizer and scheduler blocks that `deepgo config check
// --strict` accepts are ones deepgo.Initialize accepts, and a bad value is
// reported at the same JSON path by both (here as a *ConfigError /
// *ParamError, which are config.ParamError).
//
// The step math is the C core's (csrc, dg_optim_math.h); Kernels lets
// package cuda run the same element math on a GPU with the same bits.
package optim
