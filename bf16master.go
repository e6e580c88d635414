package deepgo

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/tensor"
)

// masterDType is the ZeRO master dtype the config asks for: bfloat16 with
// bf16.bf16_master_weights_and_grads (config.Parse has checked the keys
// that go with it), else float32.
func masterDType(cfg *config.Config) tensor.DType {
	if cfg.BF16.Enabled && cfg.BF16.BF16MasterWeightsAndGrads {
		return tensor.BFloat16
	}
	return tensor.Float32
}

// bf16MasterOptions are the optim.New options of bf16 master weights: the
// DeepSpeedCPUAdam update on bf16 masters, its moments in bf16 with
// bf16.bf16_optimizer_states.
func bf16MasterOptions(cfg *config.Config) []optim.Option {
	if masterDType(cfg) != tensor.BFloat16 {
		return nil
	}
	states := tensor.Float32
	if cfg.BF16.BF16OptimizerStates {
		states = tensor.BFloat16
	}
	return []optim.Option{optim.WithBF16Master(states)}
}

// checkBF16MasterOptimizer refuses an optimizer passed with WithOptimizer
// that cannot step bf16 masters.
func checkBF16MasterOptimizer(cfg *config.Config, opt optim.Optimizer) error {
	if masterDType(cfg) != tensor.BFloat16 || optim.StepsBF16Master(opt) {
		return nil
	}
	return fmt.Errorf("deepgo.Initialize: bf16.bf16_master_weights_and_grads with the optimizer passed by WithOptimizer (%T): %w: build it with optim.WithBF16Master", opt, backend.ErrUnsupported)
}
