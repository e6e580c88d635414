package optim

import (
	"fmt"
	"math"
	"sync"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Kind is an update rule of the fused optimizer kernels.
type Kind int

// Update rules, one per fused kernel. config.ParseOptimizer maps the
// ds_config type names onto them: DeepSpeed's Adam and AdamW are KindAdam
// (Hyper.AdamWMode picks decoupled weight decay), Lamb KindLamb, Lion
// KindLion, torch.optim's SGD KindSGD. g is grad/gradScale throughout and
// bc = 1 - beta^t when bias_correction is on, else 1.
const (
	// KindAdam follows DeepSpeed's FusedAdam and DeepSpeedCPUAdam:
	//
	//	g += wd*p                    (adam_w_mode false: L2)
	//	m  = b1*m + (1-b1)*g
	//	v  = b2*v + (1-b2)*g*g
	//	p += -lr*wd*p                (adam_w_mode true: decoupled)
	//	p += -(lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps)
	KindAdam Kind = iota
	// KindSGD is torch.optim.SGD (DeepSpeed falls back to torch for it):
	//
	//	g += wd*p
	//	b  = g on the first step, else momentum*b + (1-dampening)*g
	//	g  = g + momentum*b (nesterov) or b
	//	p += -lr*g
	//
	// With momentum 0 there is no buffer and g is used directly.
	KindSGD
	// KindLamb follows apex/DeepSpeed FusedLamb with eps outside the
	// square root:
	//
	//	m, v as Adam;  u = (m/bc1) / (sqrt(v/bc2) + eps) + wd*p
	//	trust = clamp(||p|| / ||u||, min_coeff, max_coeff), 1 if either norm is 0
	//	p += -lr*trust*u
	//
	// with norms per tensor. (FusedLamb's CUDA kernel folds the bias
	// corrections into the step size instead, which also scales eps and
	// the decay term; the textbook form above is what the float64
	// reference checks.)
	KindLamb
	// KindLion follows DeepSpeed's FusedLion / DeepSpeedCPULion:
	//
	//	c  = b1*m + (1-b1)*g
	//	p  = p*(1 - lr*wd) - lr*sign(c)     (sign(0) = 0, as torch.sign)
	//	m  = b2*m + (1-b2)*g
	KindLion
)

// String returns the update rule's name in config.OptimizerSpec.Kind:
// "adam", "sgd", "lamb" or "lion".
func (k Kind) String() string {
	switch k {
	case KindAdam:
		return config.OptimizerAdam
	case KindSGD:
		return config.OptimizerSGD
	case KindLamb:
		return config.OptimizerLamb
	case KindLion:
		return config.OptimizerLion
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Hyper holds an optimizer's hyperparameters. Each Kind reads its own
// fields; LR is the configured base rate (Step takes the scheduled one). It
// is config.OptimizerHyper, which config.ParseOptimizer fills with
// DeepSpeed's defaults.
type Hyper = config.OptimizerHyper

// ParamGroup is one list of parameters stepped together: a ZeRO rank's
// shard, or one sub-group of it. Entry i of Grads (and Copies) goes with
// Params[i] and has the same number of elements.
type ParamGroup struct {
	// Name keys the group's state and step count across steps and in
	// checkpoints (e.g. "rank0/sub3"); it must stay the same from step to step.
	Name string
	// Params are updated in place: float32 master weights, or float16 /
	// bfloat16 parameters (their state is still float32).
	Params []*tensor.Tensor
	// Grads are read only: float32, float16 or bfloat16, one dtype for all.
	Grads []*tensor.Tensor
	// Copies, when non-nil, receive the updated float32 Params rounded to
	// float16 or bfloat16 in the same pass (the 16-bit model weights).
	Copies []*tensor.Tensor
	// Hyper overrides the optimizer's defaults for this group (nil: use
	// them). Its LR is ignored: Step's lr argument is the rate.
	Hyper *Hyper
}

// Optimizer updates parameter groups with one fused kernel call per Step.
// It is safe for concurrent use on different groups; two concurrent Steps
// on the same group are a caller bug.
type Optimizer interface {
	// Kind is the update rule.
	Kind() Kind
	// Defaults are the hyperparameters from the config.
	Defaults() Hyper
	// StateNames lists the per-parameter state tensors this optimizer keeps
	// with its current defaults, e.g. ["exp_avg", "exp_avg_sq"].
	StateNames() []string
	// Step applies one update to g with learning rate lr (from the
	// schedule), treating the gradients as multiplied by gradScale (the loss
	// scale times the clip divisor, see CombinedScale; 1 for none): the
	// kernel multiplies them by 1/gradScale as it reads them. On error
	// nothing is written and the step count is unchanged.
	Step(g ParamGroup, lr, gradScale float64) error
	// Steps reports how many updates group name has had.
	Steps(group string) int64
	// SetSteps restores a group's step count (checkpoint load).
	SetSteps(group string, n int64) error
	// State returns the named state tensors of a group, each list aligned
	// with the group's Params, or nil before its first Step. The tensors
	// belong to the optimizer's StateStore.
	State(group string) map[string][]*tensor.Tensor
	// Close frees the state.
	Close() error
}

// fused is the Optimizer over a Kernels and a StateStore.
type fused struct {
	kind  Kind
	def   Hyper
	k     Kernels
	store StateStore
	be    backend.Backend // copies state that lives on its device (LoadState)
	bf16  bool            // WithBF16Master: DeepSpeedCPUAdam on bf16 masters
	// lamb keeps the last trust ratios per group (FusedLamb's get_lamb_coeffs)
	mu    sync.Mutex
	steps map[string]int64
	trust map[string][]float64
}

func (o *fused) Kind() Kind      { return o.kind }
func (o *fused) Defaults() Hyper { return o.def }

func (o *fused) StateNames() []string { return stateNames(o.kind, o.def) }

func stateNames(k Kind, h Hyper) []string {
	switch k {
	case KindAdam, KindLamb:
		return []string{"exp_avg", "exp_avg_sq"}
	case KindLion:
		return []string{"exp_avg"}
	case KindSGD:
		if h.Momentum != 0 {
			return []string{"momentum_buffer"}
		}
	}
	return nil
}

func (o *fused) Steps(group string) int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.steps[group]
}

func (o *fused) SetSteps(group string, n int64) error {
	if n < 0 {
		return fmt.Errorf("optim.SetSteps(%q): %d: must be >= 0", group, n)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.steps[group] = n
	return nil
}

func (o *fused) State(group string) map[string][]*tensor.Tensor { return o.store.Lookup(group) }

func (o *fused) Close() error { return o.store.Close() }

// TrustRatios returns the Lamb trust ratio of each tensor of group's last
// Step (nil for other kinds or before a Step).
func (o *fused) TrustRatios(group string) []float64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]float64(nil), o.trust[group]...)
}

func (o *fused) Step(g ParamGroup, lr, gradScale float64) error {
	op := fmt.Sprintf("optim.Step(group %q)", g.Name)
	if !(lr >= 0) || math.IsInf(lr, 0) {
		return fmt.Errorf("%s: lr %v: must be finite and >= 0", op, lr)
	}
	if !(gradScale > 0) || math.IsInf(gradScale, 0) {
		return fmt.Errorf("%s: gradScale %v: must be finite and > 0", op, gradScale)
	}
	h := o.def
	if g.Hyper != nil {
		h = *g.Hyper
		if err := config.ValidateOptimizerHyper(o.kind.String(), h, "ParamGroup.Hyper."); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
	}
	h.LR = lr
	if err := checkGroup(op, &g); err != nil {
		return err
	}
	if o.bf16 {
		if err := checkBF16Group(op, &g); err != nil {
			return err
		}
	}
	names := stateNames(o.kind, h)
	st, err := o.store.Acquire(g.Name, names, g.Params)
	if err != nil {
		return fmt.Errorf("%s: state: %w", op, err)
	}
	o.mu.Lock()
	t := o.steps[g.Name] + 1
	o.mu.Unlock()
	a := &StepArgs{Kind: o.kind, Step: t, Hyper: h, GradScale: gradScale, Group: g, BF16Master: o.bf16}
	if len(names) > 0 {
		a.ExpAvg = st[names[0]]
	}
	if len(names) > 1 {
		a.ExpAvgSq = st[names[1]]
	}
	if o.kind == KindLamb {
		a.Trust = make([]float64, len(g.Params))
	}
	err = o.k.Step(a)
	if rerr := o.store.Release(g.Name); err == nil && rerr != nil {
		err = fmt.Errorf("%s: state: %w", op, rerr)
	}
	if err != nil {
		return err
	}
	o.mu.Lock()
	o.steps[g.Name] = t
	if a.Trust != nil {
		o.trust[g.Name] = a.Trust
	}
	o.mu.Unlock()
	return nil
}
