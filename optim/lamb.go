package optim

// Lamb follows apex/DeepSpeed FusedLamb with eps outside the square root:
//
//	m, v as Adam;  u = (m/bc1) / (sqrt(v/bc2) + eps) + wd*p
//	trust = clamp(||p|| / ||u||, min_coeff, max_coeff), 1 if either norm is 0
//	p += -lr*trust*u
//
// with norms per tensor. (FusedLamb's CUDA kernel folds the bias
// corrections into the step size instead, which also scales eps and the
// decay term; the textbook form above is what the float64 reference
// checks.) Defaults: max_coeff 10, min_coeff 0.01.
func lambSpec() spec {
	return spec{
		kind: KindLamb,
		def: Hyper{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, BiasCorrection: true,
			MaxCoeff: 10, MinCoeff: 0.01},
		keys: []string{"lr", "betas", "eps", "weight_decay", "bias_correction", "max_coeff", "min_coeff",
			"eps_inside_sqrt", "amsgrad"},
	}
}

func validateLamb(h Hyper, bad func(string, any, string) error, finiteGE0 func(string, float64) error) error {
	if err := finiteGE0("min_coeff", h.MinCoeff); err != nil {
		return err
	}
	if err := finiteGE0("max_coeff", h.MaxCoeff); err != nil {
		return err
	}
	if h.MinCoeff > h.MaxCoeff {
		return bad("min_coeff", h.MinCoeff, "must be <= max_coeff")
	}
	return nil
}
