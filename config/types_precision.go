package config

// FP16 is the fp16 section: mixed precision with IEEE half and a loss scaler.
type FP16 struct {
	// Enabled turns fp16 training on.
	Enabled bool `json:"enabled" ds:"def=false;auto=false"`
	// AutoCast casts floating inputs to half in forward.
	AutoCast bool `json:"auto_cast" ds:"def=false"`
	// LossScale is a static loss scale; 0 selects dynamic scaling.
	LossScale float64 `json:"loss_scale" ds:"def=0;min=0"`
	// InitialScalePower is the power of two the dynamic loss scale starts
	// at (16: 65536).
	InitialScalePower int `json:"initial_scale_power" ds:"def=16;min=0;max=64"`
	// LossScaleWindow is the number of overflow-free steps before the scale grows.
	LossScaleWindow int `json:"loss_scale_window" ds:"def=1000;min=1"`
	// Hysteresis is the number of overflows tolerated before the scale shrinks.
	Hysteresis int `json:"hysteresis" ds:"def=2;min=1"`
	// ConsecutiveHysteresis refills hysteresis on every overflow-free step.
	ConsecutiveHysteresis bool `json:"consecutive_hysteresis" ds:"def=false"`
	// MinLossScale is the floor of the dynamic scale.
	MinLossScale float64 `json:"min_loss_scale" ds:"def=1;gt=0"`
	// FP16MasterWeightsAndGrads keeps master weights in fp16 (ZeRO + CPU offload only).
	FP16MasterWeightsAndGrads bool `json:"fp16_master_weights_and_grads" ds:"def=false"`
}

// BF16 is the bf16 section: bfloat16 mixed precision (no loss scaling).
type BF16 struct {
	// Enabled turns bf16 training on.
	Enabled bool `json:"enabled" ds:"def=false;auto=false"`
	// ImmediateGradUpdate applies gradients as soon as they are reduced.
	ImmediateGradUpdate bool `json:"immediate_grad_update" ds:"def=false"`
	// CheckGradOverflow skips steps with inf/nan gradients (ZeRO 1/2).
	CheckGradOverflow bool `json:"check_grad_overflow" ds:"def=true"`
	// BF16MasterWeightsAndGrads keeps master weights in bf16.
	BF16MasterWeightsAndGrads bool `json:"bf16_master_weights_and_grads" ds:"def=false"`
	// BF16OptimizerStates keeps optimizer states in bf16 (requires BF16MasterWeightsAndGrads).
	BF16OptimizerStates bool `json:"bf16_optimizer_states" ds:"def=false"`
}

// AMP is NVIDIA apex amp ("amp" section), kept verbatim. deepgo recognises
// the section and rejects "enabled": true (apex is not supported).
type AMP map[string]any

// Enabled reports whether the section has "enabled": true.
func (a AMP) Enabled() bool { b, _ := a["enabled"].(bool); return b }

// TorchAutocast is the torch_autocast section.
type TorchAutocast struct {
	// Enabled turns autocast on.
	Enabled bool `json:"enabled" ds:"def=false"`
	// Dtype is the autocast dtype (e.g. "bfloat16").
	Dtype *string `json:"dtype,omitempty"`
	// LowerPrecisionSafeModules lists module class paths safe in lower precision.
	LowerPrecisionSafeModules []string `json:"lower_precision_safe_modules,omitempty"`
}

// DataTypes is the data_types section.
type DataTypes struct {
	// GradAccumDtype is the gradient accumulation dtype; nil = the model dtype.
	GradAccumDtype *string `json:"grad_accum_dtype,omitempty" ds:"enum=fp32|fp16|bf16;fold"`
	// ParamDtype is the parameter dtype (must match fp16/bf16 mode).
	ParamDtype *string `json:"param_dtype,omitempty" ds:"enum=fp32|fp16|bf16;fold"`
	// BufferDtype is the buffer dtype (must match fp16/bf16 mode).
	BufferDtype *string `json:"buffer_dtype,omitempty" ds:"enum=fp32|fp16|bf16;fold"`
}
