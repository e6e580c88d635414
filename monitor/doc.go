// Package monitor is what a training loop reports each optimizer step to:
// DeepSpeed's csv_monitor files and tensorboard event files under
// <output_path>/<job_name>/, a Prometheus /metrics endpoint, DeepSpeed's
// wall_clock_breakdown lines, a NaN/Inf check of the parameters at an
// interval, and deepgo's health targets (memory, communication
// share, update latency, finiteness) checked at every print.
//
// The loop builds a Monitor from its config.Config on every rank (only rank
// 0 writes) and calls Observe once per optimizer step with a Record, and
// ObserveEval with each evaluation's loss. The
// package knows nothing of the engine: the Record carries plain numbers,
// and the NaN/Inf check is a function the engine's owner supplies.
//
// Tags (the run-directory contract other tools read):
//   - DeepSpeed's: Train/Samples/train_loss, lr, loss_scale (fp16 only, as
//     DeepSpeed writes it), eval_loss (ObserveEval: at the samples of the
//     steps done, 0 before training, as its PipelineEngine.eval_batch
//     writes it) and, with
//     wall_clock_breakdown (forced on by flops_profiler), the
//     elapsed_time_ms_{forward,backward,backward_inner,backward_allreduce,step}.
//   - deepgo's, always: Train/deepgo/{grad_norm, skipped_steps, overflow,
//     tokens_per_s, step_time_ms, comm_time_ms, optimizer_time_ms,
//     memory_host_bytes, memory_device_bytes, memory_peak_bytes, rss_bytes},
//     and nonfinite_params at the check interval only; with
//     activation_checkpointing.profile, checkpoint_recompute_ms,
//     checkpoint_saved_bytes and checkpoint_saved_host_bytes.
//   - With GPU telemetry in the Record: Train/GPU/{memory_used_bytes,
//     memory_total_bytes, utilization_pct, power_w, temperature_c}.
//
// The x value of every event (csv_monitor's step column, tensorboard's
// step) is DeepSpeed's: the Train/Samples tags go at global_samples, the
// samples consumed so far (step × train_batch_size, see SetTrainBatchSize),
// train_loss before the step's update ((step-1) × train_batch_size, where
// DeepSpeed's data-parallel engine wrote it until its releases stopped
// writing train_loss; after it with WithTrainLossAfterStep, as DeepSpeed's
// PipelineEngine writes it)
// and the others after it (step × train_batch_size); deepgo's own tags go
// at the global optimizer step, 1-based (rundir.XAxis). deepgo_run.json
// records train_batch_size and train_loss_after_step, and rundir.Read keys
// every series back on steps.
package monitor
