package optim

import (
	"fmt"
	"math"
	"sync"

	"github.com/deepgo-ml/deepgo/tensor"
)

// Kind is an update rule of the fused optimizer kernels.
type Kind int

// Update rules. DeepSpeed's Adam, AdamW, FusedAdam and DeepSpeedCPUAdam are
// all KindAdam (Hyper.AdamWMode picks decoupled weight decay).
const (
	KindAdam Kind = iota
	KindSGD
	KindLamb
	KindLion
)

func (k Kind) String() string {
	switch k {
	case KindAdam:
		return "adam"
	case KindSGD:
		return "sgd"
	case KindLamb:
		return "lamb"
	case KindLion:
		return "lion"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Hyper holds an optimizer's hyperparameters. Each Kind reads its own
// fields; LR is the configured base rate (Step takes the scheduled one).
type Hyper struct {
	LR             float64
	Beta1, Beta2   float64 // Adam, Lamb, Lion
	Eps            float64 // Adam, Lamb
	WeightDecay    float64
	AdamWMode      bool    // Adam: decoupled weight decay (DeepSpeed's adam_w_mode)
	BiasCorrection bool    // Adam, Lamb
	Momentum       float64 // SGD
	Dampening      float64 // SGD
	Nesterov       bool    // SGD
	MaxCoeff       float64 // Lamb: upper clamp of the trust ratio
	MinCoeff       float64 // Lamb: lower clamp of the trust ratio
}

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
		if err := validate(o.kind, h, "ParamGroup.Hyper."); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
	}
	h.LR = lr
	if err := checkGroup(op, &g); err != nil {
		return err
	}
	names := stateNames(o.kind, h)
	st, err := o.store.Acquire(g.Name, names, g.Params)
	if err != nil {
		return fmt.Errorf("%s: state: %w", op, err)
	}
	o.mu.Lock()
	t := o.steps[g.Name] + 1
	o.mu.Unlock()
	a := &StepArgs{Kind: o.kind, Step: t, Hyper: h, GradScale: gradScale, Group: g}
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
