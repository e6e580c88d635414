package sim_test

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/require"
)

// Sizes of the layer kernels' cases: batch, time, channels, linear
// outputs, vocabulary, heads, head size.
const bb, tt, cc, oc, vv, nh, hs = 2, 4, 16, 24, 32, 2, 8
const nTok = bb * tt

// kcase is one kernel call: the tensors it takes (all compared after the
// call, so in-place results count) and the call, returning its scalar
// results if any.
type kcase struct {
	name  string
	specs []spec
	call  func(k kern, x []*tensor.Tensor) ([]float64, error)
}

var floatTypes = []tensor.DType{tensor.Float32, tensor.Float16, tensor.BFloat16}

func backendCases() []kcase {
	cs := []kcase{}
	for _, from := range floatTypes {
		for _, to := range floatTypes {
			cs = append(cs, kcase{"Cast/" + from.String() + "-" + to.String(),
				[]spec{half(from, 1000), half(from, 17), half(to, 1000), half(to, 17)},
				func(k kern, x []*tensor.Tensor) ([]float64, error) { return nil, k.Cast(x[2:], x[:2]) }})
		}
		cs = append(cs,
			kcase{"QuantizeInt8+DequantizeInt8/" + from.String(), []spec{half(from, 1024), typed(tensor.Uint8, 1024), f32(8), half(from, 1024)},
				func(k kern, x []*tensor.Tensor) ([]float64, error) {
					q, ok := k.(backend.Quantizer)
					if !ok {
						return nil, fmt.Errorf("%T is not a backend.Quantizer", k)
					}
					if err := q.QuantizeInt8(x[1], x[2], x[0]); err != nil {
						return nil, err
					}
					return nil, q.DequantizeInt8(x[3], x[1], x[2])
				}},
			kcase{"Scale/" + from.String(), []spec{half(from, 1000), half(from, 3)},
				func(k kern, x []*tensor.Tensor) ([]float64, error) { return nil, k.Scale(x, -0.37) }},
			kcase{"Axpy/f32-" + from.String(), []spec{f32(1000), f32(5), half(from, 1000), half(from, 5)},
				func(k kern, x []*tensor.Tensor) ([]float64, error) { return nil, k.Axpy(0.25, x[:2], x[2:]) }},
			kcase{"SumSquares/" + from.String(), []spec{half(from, 1000), half(from, 33)},
				func(k kern, x []*tensor.Tensor) ([]float64, error) {
					per := make([]float64, 2)
					s, err := k.SumSquares(x, per)
					return append(per, s), err
				}},
			kcase{"NonFinite/" + from.String(), []spec{half(from, 100)},
				func(k kern, x []*tensor.Tensor) ([]float64, error) {
					// scaled past the largest float16 (and float32 in two steps)
					if err := k.Scale(x, 3e38); err != nil {
						return nil, err
					}
					if err := k.Scale(x, 3e38); err != nil {
						return nil, err
					}
					f, err := k.NonFinite(x)
					return []float64{b2f(f)}, err
				}},
			kcase{"Pack+Unpack/" + from.String(), []spec{half(from, 40), half(from, 7), half(from, 13), half(from, 7), half(from, 13)},
				func(k kern, x []*tensor.Tensor) ([]float64, error) {
					if err := k.Pack(x[0], []int{3, 20}, x[1:3]); err != nil {
						return nil, err
					}
					return nil, k.Unpack(x[3:], x[0], []int{0, 25})
				}},
			kcase{"Copy+Zero/" + from.String(), []spec{half(from, 100), half(from, 100), half(from, 9)},
				func(k kern, x []*tensor.Tensor) ([]float64, error) {
					if err := k.Copy(x[0], x[1]); err != nil {
						return nil, err
					}
					return nil, k.Zero(x[2:])
				}},
		)
		for _, op := range []backend.ReduceOp{backend.Sum, backend.Max, backend.Min} {
			cs = append(cs, kcase{"Reduce/" + op.String() + "/" + from.String(), []spec{half(from, 77), half(from, 77), half(from, 77), half(from, 77)},
				func(k kern, x []*tensor.Tensor) ([]float64, error) { return nil, k.Reduce(op, x[0], x[1:]) }})
		}
	}
	return cs
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func nnCases() []kcase {
	cs := []kcase{}
	for _, wt := range floatTypes {
		for _, gt := range floatTypes {
			w := wt.String() + "-" + gt.String()
			cs = append(cs,
				kcase{"Linear/" + w, []spec{f32(nTok, oc), f32(nTok, cc), typed(wt, oc, cc), typed(wt, oc), f32(nTok, cc), typed(gt, oc, cc), typed(gt, oc), f32(nTok, oc)},
					func(k kern, x []*tensor.Tensor) ([]float64, error) {
						if err := k.LinearForward(x[0], x[1], x[2], x[3]); err != nil {
							return nil, err
						}
						return nil, k.LinearBackward(x[4], x[5], x[6], x[7], x[1], x[2])
					}},
				kcase{"LayerNorm/" + w, []spec{f32(nTok * cc), f32(nTok), f32(nTok), f32(nTok * cc), typed(wt, cc), typed(wt, cc), f32(nTok * cc), typed(gt, cc), typed(gt, cc), f32(nTok * cc)},
					func(k kern, x []*tensor.Tensor) ([]float64, error) {
						if err := k.LayerNormForward(x[0], x[1], x[2], x[3], x[4], x[5], 1e-5, nTok, cc); err != nil {
							return nil, err
						}
						return nil, k.LayerNormBackward(x[6], x[7], x[8], x[9], x[3], x[4], x[1], x[2], nTok, cc)
					}},
				kcase{"Encoder/" + w, []spec{f32(nTok * cc), ids(vv, nTok), typed(wt, vv*cc), typed(wt, tt*cc), typed(gt, vv*cc), typed(gt, tt*cc), f32(nTok * cc)},
					func(k kern, x []*tensor.Tensor) ([]float64, error) {
						if err := k.EncoderForward(x[0], x[1], x[2], x[3], bb, tt, cc, vv); err != nil {
							return nil, err
						}
						return nil, k.EncoderBackward(x[4], x[5], x[6], x[1], bb, tt, cc, vv)
					}},
			)
		}
	}
	for _, window := range []int{0, 2} {
		cs = append(cs, kcase{"Attention/window" + string(rune('0'+window)), []spec{f32(nTok * cc), f32(bb * nh * tt * tt), f32(nTok * 3 * cc), f32(nTok * 3 * cc), f32(nTok * cc)},
			func(k kern, x []*tensor.Tensor) ([]float64, error) {
				if err := k.AttentionForward(x[0], x[1], x[2], bb, tt, nh, hs, window); err != nil {
					return nil, err
				}
				return nil, k.AttentionBackward(x[3], x[4], x[2], x[1], bb, tt, nh, hs, window)
			}})
	}
	cs = append(cs,
		kcase{"GELU+Add", []spec{f32(500), f32(500), f32(500), f32(500), f32(500)},
			func(k kern, x []*tensor.Tensor) ([]float64, error) {
				if err := k.GELUForward(x[0], x[1], 500); err != nil {
					return nil, err
				}
				if err := k.GELUBackward(x[2], x[1], x[3], 500); err != nil {
					return nil, err
				}
				return nil, k.Add(x[4], x[0], x[4], 500)
			}},
		kcase{"SoftmaxXent", []spec{f32(nTok, vv), f32(nTok), f32(nTok, vv), ids(vv, nTok), f32(nTok)},
			func(k kern, x []*tensor.Tensor) ([]float64, error) {
				if err := k.SoftmaxXentForward(x[0], x[1], x[2], x[3], nTok, vv); err != nil {
					return nil, err
				}
				return nil, k.SoftmaxXentBackward(x[2], x[0], x[3], x[4], nTok, vv)
			}},
		// the vocabulary-parallel steps on the slice [vv, 2vv) of 3vv, the
		// all-reduces left out (one rank)
		kcase{"VocabXent", []spec{f32(nTok, vv), f32(nTok), f32(nTok), f32(nTok), ids(3*vv, nTok)},
			func(k kern, x []*tensor.Tensor) ([]float64, error) {
				if err := k.VocabXentMax(x[1], x[0], nTok, vv); err != nil {
					return nil, err
				}
				if err := k.VocabXentExp(x[0], x[2], x[3], x[1], x[4], nTok, vv, vv, 3*vv); err != nil {
					return nil, err
				}
				return nil, k.VocabXentGrad(x[0], x[2], x[4], 0.37, nTok, vv, vv)
			}},
		kcase{"TransposeBlocks", []spec{f32(cc, nTok, 3), f32(nTok, cc, 3)},
			func(k kern, x []*tensor.Tensor) ([]float64, error) {
				return nil, k.TransposeBlocks(x[0], x[1], nTok, cc, 3)
			}},
		kcase{"VocabClearRows", []spec{f32(nTok, cc), ids(3*vv, nTok)},
			func(k kern, x []*tensor.Tensor) ([]float64, error) {
				return nil, k.VocabClearRows(x[0], x[1], nTok, cc, vv, vv)
			}},
	)
	return cs
}

// run makes the case's tensors on k from seed, calls it, and returns every
// tensor's bytes after the call and the scalar results.
func (c kcase) run(t *testing.T, k kern, seed uint64) ([][]byte, []float64) {
	r := rand.New(rand.NewPCG(seed, 1))
	x := make([]*tensor.Tensor, len(c.specs))
	for i, s := range c.specs {
		x[i] = onDevice(t, k, hostTensor(t, r, s))
	}
	res, err := c.call(k, x)
	require.NoError(t, err)
	out := make([][]byte, len(x))
	for i := range x {
		out[i] = toHost(t, k, x[i])
	}
	require.NoError(t, k.Synchronize(ctx(t)))
	return out, res
}

// Every kernel of backend.Backend and backend.NN gives on the simulated
// device exactly the bits the CPU backend gives, with and without delays.
func TestKernelsMatchCPU(t *testing.T) {
	cpu := newCPU(t)
	for _, d := range delays {
		t.Run(d.name, func(t *testing.T) {
			sb := newSim(t, 0, d.max)
			for i, c := range append(backendCases(), nnCases()...) {
				t.Run(c.name, func(t *testing.T) {
					want, wantRes := c.run(t, cpu, uint64(i))
					got, gotRes := c.run(t, sb, uint64(i))
					for j := range want {
						if !bytes.Equal(want[j], got[j]) {
							require.Failf(t, "tensor differs from the CPU's", "tensor %d (%v)", j, c.specs[j])
						}
					}
					require.Equal(t, len(wantRes), len(gotRes))
					for j := range wantRes {
						require.Equal(t, math.Float64bits(wantRes[j]), math.Float64bits(gotRes[j]), "result %d", j)
					}
				})
			}
		})
	}
}

// optimizer steps through optim.New on the simulated device, state and all,
// give the CPU's bits.
func TestOptimKernelsMatchCPU(t *testing.T) {
	cpu := newCPU(t)
	for _, d := range delays {
		t.Run(d.name, func(t *testing.T) {
			sb := newSim(t, 0, d.max)
			ks, err := sb.OptimKernels()
			require.NoError(t, err)
			for _, kind := range []optim.Kind{optim.KindAdam, optim.KindSGD, optim.KindLamb, optim.KindLion} {
				t.Run(kind.String(), func(t *testing.T) {
					step := func(k kern, kern optim.Kernels) [][]byte {
						r := rand.New(rand.NewPCG(9, uint64(kind)))
						p := onDevice(t, k, hostTensor(t, r, f32(300)))
						g := onDevice(t, k, hostTensor(t, r, f32(300)))
						m, v := onDevice(t, k, hostTensor(t, r, f32(300))), onDevice(t, k, hostTensor(t, r, f32(300)))
						a := &optim.StepArgs{Kind: kind, Step: 3, GradScale: 2,
							Hyper:  optim.Hyper{LR: 1e-2, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8, WeightDecay: 0.01, AdamWMode: true, BiasCorrection: true, Momentum: 0.9, MaxCoeff: 10, MinCoeff: 0.01},
							Group:  optim.ParamGroup{Params: []*tensor.Tensor{p}, Grads: []*tensor.Tensor{g}},
							ExpAvg: []*tensor.Tensor{m}}
						if kind == optim.KindAdam || kind == optim.KindLamb {
							a.ExpAvgSq = []*tensor.Tensor{v}
						}
						if kind == optim.KindLamb {
							a.Trust = make([]float64, 1)
						}
						require.NoError(t, kern.Step(a))
						found, err := kern.UnscaleCheck([]*tensor.Tensor{g}, 4)
						require.NoError(t, err)
						require.False(t, found)
						out := [][]byte{toHost(t, k, p), toHost(t, k, g), toHost(t, k, m), toHost(t, k, v)}
						for _, tr := range a.Trust {
							out = append(out, []byte(fmt.Sprint(math.Float64bits(tr))))
						}
						return out
					}
					require.Equal(t, step(cpu, optim.NewCPUKernels(cpu)), step(sb, ks))
				})
			}
		})
	}
}

// backend.GradWriter's kernels write what Zero and the accumulating kernel
// give, bit for bit, whatever the input gradient held (random values
// here), on the CPU backend and on the simulated device with and without
// delays; every weight and gradient dtype.
func TestGradWriterMatchesClearAndAdd(t *testing.T) {
	type gradKern interface {
		kern
		backend.GradWriter
	}
	bes := []struct {
		name string
		k    gradKern
	}{{"cpu", newCPU(t)}, {"sim", newSim(t, 0, -1)}, {"sim delay", newSim(t, 1, 300*time.Microsecond)}}
	for _, be := range bes {
		k := be.k
		for i, wt := range floatTypes {
			for j, gt := range floatTypes {
				t.Run(fmt.Sprintf("%s/%v-%v", be.name, wt, gt), func(t *testing.T) {
					r := rand.New(rand.NewPCG(uint64(3*i+j), 5))
					mk := func(s spec) *tensor.Tensor { return onDevice(t, k, hostTensor(t, r, s)) }
					dinA, dinB := mk(f32(nTok, cc)), mk(f32(nTok, cc))
					dwA, dbA, dout, in, w := mk(typed(gt, oc, cc)), mk(typed(gt, oc)), mk(f32(nTok, oc)), mk(f32(nTok, cc)), mk(typed(wt, oc, cc))
					dwB, dbB := mk(typed(gt, oc, cc)), mk(typed(gt, oc))
					require.NoError(t, k.Copy(dwB, dwA))
					require.NoError(t, k.Copy(dbB, dbA))
					require.NoError(t, k.LinearBackwardWrite(dinA, dwA, dbA, dout, in, w))
					require.NoError(t, k.Zero([]*tensor.Tensor{dinB}))
					require.NoError(t, k.LinearBackward(dinB, dwB, dbB, dout, in, w))
					for _, p := range [][2]*tensor.Tensor{{dinA, dinB}, {dwA, dwB}, {dbA, dbB}} {
						require.Equal(t, toHost(t, k, p[1]), toHost(t, k, p[0]))
					}
					gA, gB, x, d := mk(f32(500)), mk(f32(500)), mk(f32(500)), mk(f32(500))
					require.NoError(t, k.GELUBackwardWrite(gA, x, d, 500))
					require.NoError(t, k.Zero([]*tensor.Tensor{gB}))
					require.NoError(t, k.GELUBackward(gB, x, d, 500))
					require.Equal(t, toHost(t, k, gB), toHost(t, k, gA))
					qkv, att, out, d := mk(f32(nTok*3*cc)), mk(f32(bb*nh*tt*tt)), mk(f32(nTok*cc)), mk(f32(nTok*cc))
					qA, qB := mk(f32(nTok*3*cc)), mk(f32(nTok*3*cc))
					require.NoError(t, k.AttentionForward(out, att, qkv, bb, tt, nh, hs, 0))
					require.NoError(t, k.AttentionBackwardWrite(qA, d, qkv, att, bb, tt, nh, hs, 0))
					require.NoError(t, k.Zero([]*tensor.Tensor{qB}))
					require.NoError(t, k.AttentionBackward(qB, d, qkv, att, bb, tt, nh, hs, 0))
					require.Equal(t, toHost(t, k, qB), toHost(t, k, qA))
					require.NoError(t, k.Synchronize(ctx(t)))
				})
			}
		}
	}
}
