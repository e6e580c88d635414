package optim

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/tensor"
)

// ErrUnsupportedOptimizer is wrapped by New's error for an optimizer type
// deepgo does not implement (1-bit Adam, Adagrad, ...). It is
// config.ErrUnsupportedOptimizer.
var ErrUnsupportedOptimizer = config.ErrUnsupportedOptimizer

// ErrInvalidOptimizerParam is matched by every *ConfigError from New or
// Step. It is config.ErrInvalidOptimizerParam.
var ErrInvalidOptimizerParam = config.ErrInvalidOptimizerParam

// ConfigError is a bad value in the ds_config "optimizer" block (or in a
// ParamGroup.Hyper override). It formats as "<key>: <value>: <reason>",
// e.g. "optimizer.params.betas[1]: 1.5: must be in [0, 1)". It is
// config.ParamError: config.Parse and New apply the same rules
// (config.ParseOptimizer) and report the same path.
type ConfigError = config.ParamError

// Option configures New.
type Option func(*options)

type options struct {
	kernels Kernels
	store   StateStore
	bf16    bool         // WithBF16Master
	states  tensor.DType // its state dtype
}

// WithKernels runs the steps on k instead of the backend's default kernels.
func WithKernels(k Kernels) Option { return func(o *options) { o.kernels = k } }

// WithStateStore keeps the optimizer state in s (default: a HostStore).
func WithStateStore(s StateStore) Option { return func(o *options) { o.store = s } }

// WithBF16Master makes the optimizer step bfloat16 master weights with
// bfloat16 gradients as DeepSpeedCPUAdam does (ds_config
// bf16.bf16_master_weights_and_grads): each element widened to float32,
// updated with DeepSpeed's operation order, fused multiply-adds and float
// coefficients, and rounded back to nearest even; the moments are kept in
// states, tensor.Float32 or tensor.BFloat16 (bf16.bf16_optimizer_states).
// Only Adam and AdamW have this path: New refuses other types with an error
// matching backend.ErrUnsupported. A store passed with WithStateStore must
// report states through StateDType (HostStore does).
func WithBF16Master(states tensor.DType) Option {
	return func(o *options) { o.bf16, o.states = true, states }
}

// New builds an optimizer from a ds_config "optimizer" block: typ is its
// "type" and params its "params", read by config.ParseOptimizer (DeepSpeed's
// names and defaults; unknown keys, out-of-range values and an unresolved
// "auto" are a *ConfigError, a type deepgo does not implement an error
// matching ErrUnsupportedOptimizer). The steps run on be's kernels (the CPU
// backend's C core) unless WithKernels says otherwise.
func New(typ string, params map[string]any, be backend.Backend, opts ...Option) (Optimizer, error) {
	spec, err := config.ParseOptimizer(typ, params)
	if err != nil {
		return nil, err
	}
	kind, err := kindOf(spec.Kind)
	if err != nil {
		return nil, err
	}
	var o options
	for _, f := range opts {
		f(&o)
	}
	if o.kernels == nil {
		if o.kernels, err = KernelsFor(be); err != nil {
			return nil, err
		}
	}
	if err := checkBF16Master(kind, o); err != nil {
		return nil, err
	}
	if _, ok := o.kernels.(BF16MasterKernels); o.bf16 && !ok {
		return nil, fmt.Errorf("optim.New: bf16 master weights (bf16.bf16_master_weights_and_grads) stepped by %T: %w: only the C core's kernels have the bf16 master step; offload the optimizer to the host (offload_optimizer cpu)", o.kernels, backend.ErrUnsupported)
	}
	if o.store == nil {
		o.store = NewResidentStore(be.Empty)
		if o.bf16 {
			o.store = NewTypedStore(be.Empty, o.states)
		}
	}
	return &fused{kind: kind, def: spec.Hyper, k: o.kernels, store: o.store, be: be, bf16: o.bf16, steps: map[string]int64{}, trust: map[string][]float64{}}, nil
}

// checkBF16Master refuses WithBF16Master where it has no kernel.
func checkBF16Master(kind Kind, o options) error {
	switch {
	case !o.bf16:
		return nil
	case o.states != tensor.Float32 && o.states != tensor.BFloat16:
		return fmt.Errorf("optim.New: bf16 master weights with %v optimizer states: allowed float32 or bfloat16", o.states)
	case kind != KindAdam:
		return fmt.Errorf("optim.New: optimizer %s with bf16.bf16_master_weights_and_grads: %w: only Adam and AdamW (DeepSpeedCPUAdam) step bf16 master weights", kind, backend.ErrUnsupported)
	case o.store != nil && stateDType(o.store) != o.states:
		return fmt.Errorf("optim.New: %v optimizer states in a %T (which keeps %v state): %w", o.states, o.store, stateDType(o.store), backend.ErrUnsupported)
	}
	return nil
}

// BF16MasterKernels is implemented by Kernels that run StepArgs.BF16Master
// steps (CPUKernels: the C core's, on the host or a simulated device;
// cuda.OptimKernels: its twin on a GPU).
type BF16MasterKernels interface {
	Kernels
	// StepsBF16Master reports that Step runs BF16Master steps.
	StepsBF16Master() bool
}

// KernelSource is a backend that brings its own optimizer kernels (the
// CUDA and simulated devices).
type KernelSource interface {
	OptimKernels() (Kernels, error)
}

// KernelsFor returns the optimizer kernels of be: its own (KernelSource),
// be itself when it implements Kernels, or the C core's on the pool of a
// CPU backend (CPUPool).
func KernelsFor(be backend.Backend) (Kernels, error) {
	if ks, ok := be.(KernelSource); ok {
		return ks.OptimKernels()
	}
	if k, ok := be.(Kernels); ok {
		return k, nil
	}
	if c, ok := be.(CPUPool); ok {
		return NewCPUKernels(c), nil
	}
	return nil, fmt.Errorf("optim.New: backend %s on %v: %w: no optimizer kernels (pass WithKernels)", be.Name(), be.Device(), backend.ErrUnsupported)
}

// kindOf maps config's update-rule name to its Kind.
func kindOf(name string) (Kind, error) {
	for _, k := range []Kind{KindAdam, KindSGD, KindLamb, KindLion} {
		if k.String() == name {
			return k, nil
		}
	}
	return 0, fmt.Errorf("optim.New: update rule %q: %w: no kernel", name, ErrUnsupportedOptimizer)
}

// StepsBF16Master reports whether o was built WithBF16Master.
func StepsBF16Master(o Optimizer) bool {
	f, ok := o.(*fused)
	return ok && f.bf16
}
