package optim

// Lion follows DeepSpeed's FusedLion / DeepSpeedCPULion:
//
//	c  = b1*m + (1-b1)*g
//	p  = p*(1 - lr*wd) - lr*sign(c)     (sign(0) = 0, as torch.sign)
//	m  = b2*m + (1-b2)*g
//
// Defaults lr 1e-4, betas (0.9, 0.99), weight_decay 0.
func lionSpec() spec {
	return spec{
		kind: KindLion,
		def:  Hyper{LR: 1e-4, Beta1: 0.9, Beta2: 0.99},
		keys: []string{"lr", "betas", "weight_decay"},
	}
}
