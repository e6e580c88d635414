package optim

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/tensor"
)

// bf16Golden is optim/testdata/bf16_adam_golden.json, written by
// scripts/gen-bf16-adam-golden.py from DeepSpeed's DeepSpeedCPUAdam on
// bf16 parameters: every tensor as bit patterns.
type bf16Golden struct {
	DeepSpeed string `json:"deepspeed"`
	N         int    `json:"n"`
	Cases     []struct {
		Name           string   `json:"name"`
		LR             float64  `json:"lr"`
		Beta1          float64  `json:"beta1"`
		Beta2          float64  `json:"beta2"`
		Eps            float64  `json:"eps"`
		WeightDecay    float64  `json:"weight_decay"`
		AdamWMode      bool     `json:"adamw_mode"`
		BiasCorrection bool     `json:"bias_correction"`
		BF16States     bool     `json:"bf16_states"`
		Init           []uint16 `json:"init"`
		Steps          []struct {
			Grad     []uint16 `json:"grad"`
			Param    []uint16 `json:"param"`
			ExpAvg   []uint32 `json:"exp_avg"`
			ExpAvgSq []uint32 `json:"exp_avg_sq"`
		} `json:"steps"`
	} `json:"cases"`
}

// stateBits reads a state tensor's bit patterns (bf16 widened to uint32).
func stateBits(t *testing.T, x *tensor.Tensor) []uint32 {
	out := make([]uint32, x.Numel())
	if x.DType() == tensor.BFloat16 {
		d, err := x.Uint16s()
		require.NoError(t, err)
		for i, v := range d {
			out[i] = uint32(v)
		}
		return out
	}
	b, err := x.RawBytes()
	require.NoError(t, err)
	for i := range out {
		out[i] = uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24
	}
	return out
}

// TestBF16MasterAdamMatchesDeepSpeed steps WithBF16Master Adam on the
// golden cases and compares params and moments bit for bit with
// DeepSpeedCPUAdam after every step: AdamW and L2 Adam, with and without
// bias correction and weight decay, fp32 and bf16 moments, the 300
// elements as one tensor on one thread and as two on two threads.
func TestBF16MasterAdamMatchesDeepSpeed(t *testing.T) {
	raw, err := os.ReadFile("testdata/bf16_adam_golden.json")
	require.NoError(t, err)
	var gold bf16Golden
	require.NoError(t, json.Unmarshal(raw, &gold))
	require.NotEmpty(t, gold.Cases)
	for _, c := range gold.Cases {
		for _, split := range []int{0, 137} {
			t.Run(c.Name, func(t *testing.T) {
				threads := 1
				sizes := []int{gold.N}
				if split > 0 {
					threads, sizes = 2, []int{split, gold.N - split}
				}
				be := newCPU(t, threads)
				states := tensor.Float32
				if c.BF16States {
					states = tensor.BFloat16
				}
				o, err := New("Adam", map[string]any{"lr": c.LR, "betas": []any{c.Beta1, c.Beta2}, "eps": c.Eps,
					"weight_decay": c.WeightDecay, "adam_w_mode": c.AdamWMode, "bias_correction": c.BiasCorrection},
					be, WithBF16Master(states))
				require.NoError(t, err)
				defer o.Close()
				var ps, gs []*tensor.Tensor
				for _, n := range sizes {
					ps = append(ps, mustEmpty(t, tensor.BFloat16, n))
					gs = append(gs, mustEmpty(t, tensor.BFloat16, n))
				}
				put := func(ts []*tensor.Tensor, bits []uint16) {
					off := 0
					for _, x := range ts {
						d, err := x.Uint16s()
						require.NoError(t, err)
						off += copy(d, bits[off:])
					}
				}
				get := func(ts []*tensor.Tensor, f func(*tensor.Tensor) []uint32) []uint32 {
					var out []uint32
					for _, x := range ts {
						out = append(out, f(x)...)
					}
					return out
				}
				put(ps, c.Init)
				for s, st := range c.Steps {
					put(gs, st.Grad)
					require.NoError(t, o.Step(ParamGroup{Name: "g", Params: ps, Grads: gs}, c.LR, 1))
					state := o.State("g")
					require.Equal(t, states, state["exp_avg"][0].DType())
					require.Equal(t, widen(st.Param), get(ps, func(x *tensor.Tensor) []uint32 { return stateBits(t, x) }), "params after step %d", s+1)
					require.Equal(t, st.ExpAvg, get(state["exp_avg"], func(x *tensor.Tensor) []uint32 { return stateBits(t, x) }), "exp_avg after step %d", s+1)
					require.Equal(t, st.ExpAvgSq, get(state["exp_avg_sq"], func(x *tensor.Tensor) []uint32 { return stateBits(t, x) }), "exp_avg_sq after step %d", s+1)
				}
			})
		}
	}
}

func widen(b []uint16) []uint32 {
	out := make([]uint32, len(b))
	for i, v := range b {
		out[i] = uint32(v)
	}
	return out
}

// TestBF16MasterRefusals: WithBF16Master is refused for update rules
// without the bf16 step, for a state dtype other than fp32/bf16 and for a
// store that keeps other state; its groups must be bf16 params and grads
// without copies.
func TestBF16MasterRefusals(t *testing.T) {
	be := newCPU(t, 1)
	for _, typ := range []string{"Lamb", "Lion", "SGD"} {
		_, err := New(typ, nil, be, WithBF16Master(tensor.BFloat16))
		require.ErrorIs(t, err, backend.ErrUnsupported, typ)
		require.ErrorContains(t, err, "only Adam and AdamW", typ)
	}
	_, err := New("AdamW", nil, be, WithBF16Master(tensor.Float16))
	require.ErrorContains(t, err, "allowed float32 or bfloat16")
	_, err = New("AdamW", nil, be, WithBF16Master(tensor.BFloat16), WithStateStore(NewHostStore()))
	require.ErrorIs(t, err, backend.ErrUnsupported)
	o, err := New("AdamW", nil, be, WithBF16Master(tensor.Float32))
	require.NoError(t, err)
	defer o.Close()
	p32, p16, g16 := mustEmpty(t, tensor.Float32, 4), mustEmpty(t, tensor.BFloat16, 4), mustEmpty(t, tensor.BFloat16, 4)
	err = o.Step(ParamGroup{Name: "g", Params: []*tensor.Tensor{p32}, Grads: []*tensor.Tensor{g16}}, 1e-3, 1)
	require.ErrorContains(t, err, "want bfloat16 both")
	err = o.Step(ParamGroup{Name: "g", Params: []*tensor.Tensor{p16}, Grads: []*tensor.Tensor{p32}}, 1e-3, 1)
	require.ErrorContains(t, err, "want bfloat16 both")
	require.Zero(t, o.Steps("g"), "nothing stepped")
	require.NoError(t, o.Step(ParamGroup{Name: "g", Params: []*tensor.Tensor{p16}, Grads: []*tensor.Tensor{g16}}, 1e-3, 1))
}
