package deepgo_test

import (
	"context"
	"errors"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// allParams lists m's parameters.
func allParams(m model.Model) []*model.Param {
	var ps []*model.Param
	for _, mod := range m.Modules() {
		ps = append(ps, mod.Params()...)
	}
	return ps
}

// TestInitialValues: whether the caller keeps the initial tensors alive
// through training, frees them right after Initialize, or donates them
// (freed by Initialize, Donate cleared), training gives the same bits.
func TestInitialValues(t *testing.T) {
	for _, r := range []run{{stage: 0, world: 1, gas: 1, steps: 4}, {stage: 3, world: 2, gas: 2, steps: 4, precision: "bf16"}} {
		var ref map[string][]float32
		for _, mode := range []string{"keep", "free", "donate"} {
			t.Run(r.String()+"/"+mode, func(t *testing.T) {
				data := testmodel.NewDataset(42, 64, sizes[0], sizes[len(sizes)-1])
				var got map[string][]float32
				err := newWorld(context.Background(), r.world, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
					cfg, err := config.Parse([]byte(r.config()))
					if err != nil {
						return err
					}
					m := testmodel.NewMLP(1, sizes...)
					ps := allParams(m)
					initial := make([]*tensor.Tensor, len(ps))
					for i, p := range ps {
						initial[i] = p.Data
						p.Donate = mode == "donate"
					}
					e, err := initEngine(ctx, cfg, m, opts...)
					if err != nil {
						return err
					}
					defer e.Close()
					for i, p := range ps {
						switch {
						case p.Donate:
							return errors.New("Donate still set after Initialize")
						case p.Data == initial[i]:
							return errors.New("Data still points at the initial value after Initialize")
						case initial[i].Storage().Freed() != (mode == "donate"):
							return errors.New("the initial value was freed without being donated, or kept though donated")
						}
						if mode == "free" {
							if err := initial[i].Free(); err != nil {
								return err
							}
						}
					}
					for s := range r.steps {
						if _, err := e.TrainBatch(ctx, data.RankBatch(s, globalBatch, r.world, c.Rank(), r.gas)); err != nil {
							return err
						}
					}
					p, err := e.Parameters(ctx)
					if c.Rank() == 0 {
						got = p
					}
					if mode == "keep" {
						for _, v := range initial {
							v.Free()
						}
					}
					return err
				})
				require.NoError(t, err)
				if ref == nil {
					ref = got
				} else {
					d, where := relDiff(ref, got)
					assert.Zero(t, d, "parameters differ from the run that kept its initial values at %s", where)
				}
			})
		}
	}
}

// TestDonateRejected: a donated view into a larger buffer, or two
// parameters donating one storage, fail Initialize naming the parameter;
// nothing is freed and Donate stays set.
func TestDonateRejected(t *testing.T) {
	cfg, err := config.Parse([]byte(run{stage: 0, world: 1, gas: 1}.config()))
	require.NoError(t, err)
	cases := []struct {
		name string
		set  func(w, b *model.Param) error // rebinds fc1's weight and bias
		want string
	}{
		{"view of a larger buffer", func(w, b *model.Param) error {
			w.Data.Free()
			big, err := tensor.Empty(tensor.Float32, 2*w.Data.Numel())
			if err != nil {
				return err
			}
			v, err := big.Slice(w.Data.Numel(), w.Data.Numel())
			if err == nil {
				v, err = v.Reshape(w.Shape...)
			}
			w.Data = v
			return err
		}, "fc1.weight: Donate is set, but Data float32[16 8]@cpu is 512 bytes at element 128 of a 1024-byte storage"},
		{"one storage for two", func(w, b *model.Param) error {
			w.Data.Free()
			b.Data.Free()
			flat, err := tensor.NewFlat(tensor.Float32, []tensor.ParamSpec{{Name: "w", Shape: w.Shape}, {Name: "b", Shape: b.Shape}}, 1, 1)
			if err != nil {
				return err
			}
			// the whole flat, viewed as each: both cover the storage
			if w.Data, err = flat.Data.Reshape(1, -1); err == nil {
				b.Data = flat.Data
			}
			w.Shape = []int{1, flat.Numel()}
			b.Shape = []int{flat.Numel()}
			return err
		}, "parameters fc1.weight and fc1.bias: both donate the same storage"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := testmodel.NewMLP(1, sizes...)
			ps := allParams(m)
			require.NoError(t, tc.set(ps[0], ps[1]))
			_, err := deepgo.Initialize(context.Background(), cfg, m)
			require.ErrorContains(t, err, tc.want, "Initialize")
			for _, p := range ps {
				assert.True(t, p.Donate, "%s: Donate after a failed Initialize; want it untouched", p.Name)
				assert.False(t, p.Data.Storage().Freed(), "%s: freed after a failed Initialize; want it untouched", p.Name)

			}
			ps[0].Data.Free()
			for _, p := range ps[1:] {
				p.Data.Free() // ErrFreed for the shared case: it went with ps[0]
			}
		})
	}
}
