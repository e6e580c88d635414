package optim

import "math"

// clipEps is the epsilon DeepSpeed adds to the global norm before dividing.
const clipEps = 1e-6

// ClipCoefficient returns the factor to multiply gradients by so that their
// global L2 norm does not exceed maxNorm, computed as torch's
// clip_grad_norm_ and DeepSpeed's BF16_Optimizer do:
// coef = maxNorm / (norm + 1e-6), applied only when coef < 1.
//
// It returns 1 (no clipping) when maxNorm <= 0 (clipping disabled, the
// ds_config "gradient_clipping": 0) and when norm is not finite: DeepSpeed
// maps inf/nan norms to -1, which disables clipping, and such steps are
// skipped by overflow detection anyway.
func ClipCoefficient(norm, maxNorm float64) float64 {
	if !(maxNorm > 0) || math.IsNaN(norm) || math.IsInf(norm, 0) {
		return 1
	}
	coef := maxNorm / (norm + clipEps)
	if coef < 1 {
		return coef
	}
	return 1
}

// CombinedScale returns the divisor c that ZeRO stages 1/2/3 apply to the
// loss-scaled gradients in one pass to both unscale and clip them (grads *=
// 1/c). scaledNorm is the global L2 norm of the still-scaled gradients,
// lossScale the scale they were computed with, and maxNorm the ds_config
// "gradient_clipping" value (<= 0 disables clipping, so c = lossScale):
//
//	clip = (scaledNorm/lossScale + 1e-6) / maxNorm
//	c    = lossScale * clip   if clip > 1, else lossScale
//
// So the threshold applies to the unscaled norm. A non-finite scaledNorm
// gives c = lossScale, as DeepSpeed's -1 sentinel does.
func CombinedScale(scaledNorm, lossScale, maxNorm float64) float64 {
	if !(maxNorm > 0) || math.IsNaN(scaledNorm) || math.IsInf(scaledNorm, 0) {
		return lossScale
	}
	clip := (scaledNorm/lossScale + clipEps) / maxNorm
	if clip > 1 {
		return clip * lossScale
	}
	return lossScale
}
