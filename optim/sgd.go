package optim

// SGD is torch.optim.SGD (DeepSpeed falls back to torch for it):
//
//	g = grad/gradScale + wd*p
//	b = g on the first step, else momentum*b + (1-dampening)*g
//	g = g + momentum*b (nesterov) or b
//	p += -lr*g
//
// With momentum 0 there is no buffer and g is used directly.
func sgdSpec() spec {
	return spec{
		kind: KindSGD,
		def:  Hyper{LR: 1e-3},
		keys: []string{"lr", "momentum", "dampening", "weight_decay", "nesterov"},
	}
}

func validateSGD(h Hyper, bad func(string, any, string) error, finiteGE0 func(string, float64) error) error {
	if err := finiteGE0("momentum", h.Momentum); err != nil {
		return err
	}
	if !(h.Dampening >= 0 && h.Dampening <= 1) {
		return bad("dampening", h.Dampening, "must be in [0, 1]")
	}
	if h.Nesterov && (h.Momentum <= 0 || h.Dampening != 0) {
		return bad("nesterov", h.Nesterov, "needs momentum > 0 and dampening 0 (as torch.optim.SGD)")
	}
	return nil
}
