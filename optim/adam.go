package optim

// Adam and AdamW follow DeepSpeed (FusedAdam, DeepSpeedCPUAdam):
//
//	g  = grad/gradScale (+ wd*p when adam_w_mode is false: L2)
//	m  = b1*m + (1-b1)*g
//	v  = b2*v + (1-b2)*g*g
//	p += -lr*wd*p                              (adam_w_mode true: decoupled)
//	p += -(lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps)
//
// with bc = 1 - beta^t when bias_correction is on, else 1. DeepSpeed's
// default adam_w_mode is true, so type "Adam" is AdamW unless told otherwise;
// type "AdamW" is always decoupled.
func adamSpec(forceW bool) spec {
	return spec{
		kind: KindAdam,
		def: Hyper{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0,
			AdamWMode: true, BiasCorrection: true},
		keys: []string{"lr", "betas", "eps", "weight_decay", "adam_w_mode", "bias_correction",
			"amsgrad", "torch_adam", "fp32_optimizer_states", "set_grad_none"},
		forceAdamW: forceW,
	}
}
