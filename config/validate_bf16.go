package config

import "fmt"

// bf16Master checks bf16.bf16_master_weights_and_grads and
// bf16.bf16_optimizer_states as DeepSpeed 0.19.8 does (runtime/config.py,
// base_optimizer.py _configure_master_weights, the ZeRO optimizers'
// _enforce_cpu_offload), plus what deepgo does not implement:
//
//   - both need bf16.enabled and ZeRO stage 1, 2 or 3;
//   - bf16_optimizer_states needs bf16_master_weights_and_grads;
//   - bf16 masters with fp32 optimizer states need offload_optimizer cpu
//     or nvme (DeepSpeed: ZeRO-Offload with DeepSpeedCPUAdam, the fp32
//     states living on the host);
//   - the optimizer must be Adam or AdamW (DeepSpeedCPUAdam), the gradient
//     partitions bf16 (data_types.grad_accum_dtype bf16 or unset), and bf16
//     states are not paged to NVMe.
func (l *loader) bf16Master(c *Config) {
	b := c.BF16
	const mw, ms = "bf16.bf16_master_weights_and_grads", "bf16.bf16_optimizer_states"
	if b.BF16OptimizerStates && !b.BF16MasterWeightsAndGrads {
		l.fail(ms, true, "false unless "+mw+" is true", "bf16 optimizer states require bf16 master weights (DeepSpeed asserts it)")
	}
	if !b.BF16MasterWeightsAndGrads {
		return
	}
	if !b.Enabled {
		l.fail(mw, true, "false unless bf16.enabled is true", "")
		return
	}
	z := c.ZeroOptimization
	if z.Stage < 1 || z.Stage > 3 {
		l.fail(mw, true, fmt.Sprintf("false at zero_optimization.stage %d (bf16 master weights need ZeRO stage 1, 2 or 3)", z.Stage), "DeepSpeed asserts it")
		return
	}
	dev := "none"
	if z.OffloadOptimizer != nil {
		dev = z.OffloadOptimizer.Device
	}
	if !b.BF16OptimizerStates && dev != "cpu" && dev != "nvme" {
		l.fail("zero_optimization.offload_optimizer.device", dev,
			fmt.Sprintf(`"cpu" or "nvme" when %s is true and %s is false`, mw, ms),
			"the fp32 optimizer states live on the host and DeepSpeedCPUAdam updates the bf16 masters there (DeepSpeed: Master weights feature requires ZeRO Offload with DeepSpeedCPUAdam); or set "+ms)
	}
	if b.BF16OptimizerStates && dev == "nvme" {
		l.fail("zero_optimization.offload_optimizer.device", dev, `"cpu" or "none" with `+ms,
			"not supported: the NVMe optimizer-state swapper keeps fp32 state")
	}
	if o := c.Optimizer; o != nil {
		if r, err := optimizerRuleFor(o.Type); err == nil && r.kind != OptimizerAdam {
			l.fail("optimizer.type", o.Type, "Adam or AdamW with "+mw, "not supported: only Adam/AdamW (DeepSpeedCPUAdam) step bf16 master weights")
		}
	}
	if d := c.DataTypes.GradAccumDtype; d != nil && *d != "bf16" {
		l.fail("data_types.grad_accum_dtype", *d, `"bf16" or unset with `+mw, "the gradient partitions are bf16 with bf16 master weights")
	}
}
