package optim

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/deepgo-ml/deepgo/backend"
)

// ErrUnsupportedOptimizer is wrapped by New's error for an optimizer type
// deepgo does not implement (1-bit Adam, Adagrad, ...).
var ErrUnsupportedOptimizer = errors.New("optimizer not supported")

// ErrInvalidOptimizerParam is wrapped by every *ConfigError.
var ErrInvalidOptimizerParam = errors.New("invalid optimizer parameter")

// ConfigError is a bad value in the ds_config "optimizer" block (or in a
// ParamGroup.Hyper override). It formats as "<key>: <value>: <reason>", e.g.
// "optimizer.params.betas[1]: 1.5: must be in [0, 1)".
type ConfigError struct {
	Key    string // full path, e.g. "optimizer.params.lr"
	Value  any
	Reason string
}

func (e *ConfigError) Error() string {
	v, err := json.Marshal(e.Value)
	if err != nil {
		v = []byte(fmt.Sprint(e.Value))
	}
	return fmt.Sprintf("%s: %s: %s", e.Key, v, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalidOptimizerParam) true.
func (e *ConfigError) Unwrap() error { return ErrInvalidOptimizerParam }

// Option configures New.
type Option func(*options)

type options struct {
	kernels Kernels
	store   StateStore
}

// WithKernels runs the steps on k instead of the backend's default kernels.
func WithKernels(k Kernels) Option { return func(o *options) { o.kernels = k } }

// WithStateStore keeps the optimizer state in s (default: a HostStore).
func WithStateStore(s StateStore) Option { return func(o *options) { o.store = s } }

// spec is what one config type name means.
type spec struct {
	kind       Kind
	def        Hyper
	keys       []string // params it takes
	forceAdamW bool     // "AdamW": adam_w_mode is on whatever the params say
}

// unsupported names DeepSpeed accepts that deepgo does not implement, with why.
var unsupported = map[string]string{
	"onebitadam":  "1-bit Adam needs compressed communication",
	"zerooneadam": "0/1 Adam needs compressed communication",
	"onebitlamb":  "1-bit Lamb needs compressed communication",
	"adagrad":     "Adagrad has no fused kernel yet",
	"muadam":      "muP optimizers are not implemented",
	"muadamw":     "muP optimizers are not implemented",
	"musgd":       "muP optimizers are not implemented",
	"muon":        "Muon is not implemented",
}

func specFor(typ string) (spec, error) {
	k := strings.ToLower(strings.TrimSpace(typ))
	switch k {
	case "adam", "fusedadam", "cpuadam", "deepspeedcpuadam":
		return adamSpec(false), nil
	case "adamw":
		return adamSpec(true), nil
	case "sgd":
		return sgdSpec(), nil
	case "lamb", "fusedlamb":
		return lambSpec(), nil
	case "lion", "fusedlion", "cpulion", "deepspeedcpulion":
		return lionSpec(), nil
	}
	const allowed = "Adam, AdamW, FusedAdam, CPUAdam, DeepSpeedCPUAdam, SGD, Lamb, FusedLamb, Lion, FusedLion, DeepSpeedCPULion"
	if why, ok := unsupported[k]; ok {
		return spec{}, fmt.Errorf("optimizer.type %q: %w: %s (supported: %s)", typ, ErrUnsupportedOptimizer, why, allowed)
	}
	return spec{}, fmt.Errorf("optimizer.type %q: %w: unknown type (supported: %s)", typ, ErrUnsupportedOptimizer, allowed)
}

// New builds an optimizer from a ds_config "optimizer" block: typ is its
// "type" (DeepSpeed's names, case-insensitive) and params its "params".
// Missing params take DeepSpeed's defaults; unknown keys, out-of-range
// values and "auto" (which must be resolved before) are *ConfigError. The
// steps run on be's kernels (the CPU backend's C core) unless WithKernels
// says otherwise.
func New(typ string, params map[string]any, be backend.Backend, opts ...Option) (Optimizer, error) {
	sp, err := specFor(typ)
	if err != nil {
		return nil, err
	}
	h, err := parseParams(sp, params)
	if err != nil {
		return nil, err
	}
	var o options
	for _, f := range opts {
		f(&o)
	}
	if o.kernels == nil {
		switch b := be.(type) {
		case Kernels:
			o.kernels = b
		case *backend.CPU:
			o.kernels = NewCPUKernels(b)
		default:
			return nil, fmt.Errorf("optim.New: backend %T: %w: no optimizer kernels (pass WithKernels)", be, backend.ErrUnsupported)
		}
	}
	if o.store == nil {
		o.store = NewHostStore()
	}
	return &fused{kind: sp.kind, def: h, k: o.kernels, store: o.store, steps: map[string]int64{}, trust: map[string][]float64{}}, nil
}

// optPrefix is the ds_config path of the optimizer parameters.
const optPrefix = "optimizer.params."

func parseParams(sp spec, params map[string]any) (Hyper, error) {
	h := sp.def
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := params[k]
		if v == nil { // JSON null is Python None: the default
			continue
		}
		if s, ok := v.(string); ok && strings.EqualFold(s, "auto") {
			return h, &ConfigError{optPrefix + k, v, `"auto" must be resolved before the optimizer is built`}
		}
		if err := setParam(&h, sp, k, v); err != nil {
			return h, err
		}
	}
	if sp.forceAdamW {
		h.AdamWMode = true
	}
	return h, validate(sp.kind, h, optPrefix)
}

func setParam(h *Hyper, sp spec, k string, v any) error {
	if k == "max_grad_norm" {
		return &ConfigError{optPrefix + k, v, `not an optimizer parameter; use the top-level "gradient_clipping"`}
	}
	known := false
	for _, a := range sp.keys {
		known = known || a == k
	}
	if !known {
		return &ConfigError{optPrefix + k, v, fmt.Sprintf("unknown parameter for %v (allowed: %s)", sp.kind, strings.Join(sp.keys, ", "))}
	}
	var err error
	switch k {
	case "lr":
		h.LR, err = num(k, v)
	case "betas":
		h.Beta1, h.Beta2, err = pair(k, v)
	case "eps":
		h.Eps, err = num(k, v)
	case "weight_decay":
		h.WeightDecay, err = num(k, v)
	case "adam_w_mode":
		h.AdamWMode, err = flag(k, v)
	case "bias_correction":
		h.BiasCorrection, err = flag(k, v)
	case "momentum":
		h.Momentum, err = num(k, v)
	case "dampening":
		h.Dampening, err = num(k, v)
	case "nesterov":
		h.Nesterov, err = flag(k, v)
	case "max_coeff":
		h.MaxCoeff, err = num(k, v)
	case "min_coeff":
		h.MinCoeff, err = num(k, v)
	default:
		err = acceptedOnly(k, v)
	}
	return err
}

// acceptedOnly handles keys DeepSpeed takes that change nothing here, or
// that deepgo supports only at one value.
func acceptedOnly(k string, v any) error {
	b, err := flag(k, v)
	if err != nil {
		return err
	}
	switch k {
	case "torch_adam", "set_grad_none":
		return nil // implementation choices in DeepSpeed; the math is the same
	case "fp32_optimizer_states":
		if !b {
			return &ConfigError{optPrefix + k, v, "only float32 optimizer states are supported"}
		}
	case "amsgrad", "eps_inside_sqrt":
		if b {
			return &ConfigError{optPrefix + k, v, "not supported (FusedAdam/FusedLamb reject it too): must be false"}
		}
	}
	return nil
}

func num(k string, v any) (float64, error) {
	switch x := v.(type) {
	case float64:
		return x, nil
	case float32:
		return float64(x), nil
	case int:
		return float64(x), nil
	case int64:
		return float64(x), nil
	case json.Number:
		f, err := x.Float64()
		if err == nil {
			return f, nil
		}
	}
	return 0, &ConfigError{optPrefix + k, v, "must be a number"}
}

func flag(k string, v any) (bool, error) {
	if b, ok := v.(bool); ok {
		return b, nil
	}
	return false, &ConfigError{optPrefix + k, v, "must be true or false"}
}

func pair(k string, v any) (float64, float64, error) {
	var a []any
	switch x := v.(type) {
	case []any:
		a = x
	case []float64:
		a = []any{}
		for _, f := range x {
			a = append(a, f)
		}
	}
	if len(a) != 2 {
		return 0, 0, &ConfigError{optPrefix + k, v, "must be a list of two numbers [beta1, beta2]"}
	}
	b1, err := num(k+"[0]", a[0])
	if err != nil {
		return 0, 0, err
	}
	b2, err := num(k+"[1]", a[1])
	return b1, b2, err
}

// validate checks h for kind; keys in errors are prefix + the config name.
func validate(kind Kind, h Hyper, prefix string) error {
	bad := func(k string, v any, why string) error { return &ConfigError{prefix + k, v, why} }
	finiteGE0 := func(k string, v float64) error {
		if !(v >= 0) || math.IsInf(v, 0) {
			return bad(k, v, "must be finite and >= 0")
		}
		return nil
	}
	in01 := func(k string, v float64) error {
		if !(v >= 0 && v < 1) {
			return bad(k, v, "must be in [0, 1)")
		}
		return nil
	}
	if err := finiteGE0("lr", h.LR); err != nil {
		return err
	}
	if err := finiteGE0("weight_decay", h.WeightDecay); err != nil {
		return err
	}
	if kind == KindSGD {
		return validateSGD(h, bad, finiteGE0)
	}
	if err := in01("betas[0]", h.Beta1); err != nil {
		return err
	}
	if err := in01("betas[1]", h.Beta2); err != nil {
		return err
	}
	if kind == KindLion {
		return nil
	}
	if err := finiteGE0("eps", h.Eps); err != nil {
		return err
	}
	if kind == KindLamb {
		return validateLamb(h, bad, finiteGE0)
	}
	return nil
}
