package backend

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/deepgo-ml/deepgo/csrc"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// spec is one named tensor of an NN kernel test: random values of dt, or
// with ids > 0 int32 ids in [0, ids).
type spec struct {
	name  string
	dt    tensor.DType
	shape []int
	ids   int
}

// makeSet builds the tensors of specs from seed: two calls with one seed
// give equal sets.
func makeSet(t *testing.T, seed uint64, specs []spec) map[string]*tensor.Tensor {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	ts := map[string]*tensor.Tensor{}
	for _, s := range specs {
		n := 1
		for _, d := range s.shape {
			n *= d
		}
		var x *tensor.Tensor
		if s.ids > 0 {
			x = mustEmpty(t, tensor.Int32, n)
			v, _ := x.Int32s()
			for i := range v {
				v[i] = int32(r.IntN(s.ids))
			}
		} else {
			x = fill(t, s.dt, randVals(r, n))
		}
		x, err := x.Reshape(s.shape...)
		require.NoError(t, err)
		ts[s.name] = x
	}
	return ts
}

// Every NN method of the CPU backend computes exactly what the C core's
// binding computes when called directly, for every weight and gradient
// dtype the mixed kernels take: same bits in every output and gradient.
func TestNNMatchesCore(t *testing.T) {
	const B, T, C, V, NH, HS, OC = 2, 5, 8, 11, 2, 4, 6
	const n = B * T
	f32 := tensor.Float32
	type kcase struct {
		name   string
		specs  []spec
		viaNN  func(be NN, x map[string]*tensor.Tensor) error
		direct func(c *csrc.Ctx, x map[string]*tensor.Tensor) error
	}
	var cases []kcase
	for _, wdt := range floatTypes {
		w := dt(wdt)
		cases = append(cases,
			kcase{fmt.Sprintf("LinearForward/%v", wdt),
				[]spec{{"out", f32, []int{n, OC}, 0}, {"in", f32, []int{n, C}, 0}, {"w", wdt, []int{OC, C}, 0}, {"b", wdt, []int{OC}, 0}},
				func(be NN, x map[string]*tensor.Tensor) error {
					return be.LinearForward(x["out"], x["in"], x["w"], x["b"])
				},
				func(c *csrc.Ctx, x map[string]*tensor.Tensor) error {
					return c.MatmulForwardMixed(x["out"].Ptr(), x["in"].Ptr(), w, x["w"].Ptr(), x["b"].Ptr(), n, C, OC)
				}},
			kcase{fmt.Sprintf("LayerNormForward/%v", wdt),
				[]spec{{"out", f32, []int{n, C}, 0}, {"mean", f32, []int{n}, 0}, {"rstd", f32, []int{n}, 0}, {"in", f32, []int{n, C}, 0}, {"w", wdt, []int{C}, 0}, {"b", wdt, []int{C}, 0}},
				func(be NN, x map[string]*tensor.Tensor) error {
					return be.LayerNormForward(x["out"], x["mean"], x["rstd"], x["in"], x["w"], x["b"], 1e-5, n, C)
				},
				func(c *csrc.Ctx, x map[string]*tensor.Tensor) error {
					return c.LayerNormForwardMixed(x["out"].Ptr(), x["mean"].Ptr(), x["rstd"].Ptr(), x["in"].Ptr(), w, x["w"].Ptr(), x["b"].Ptr(), 1e-5, n, C)
				}},
			kcase{fmt.Sprintf("EncoderForward/%v", wdt),
				[]spec{{"out", f32, []int{n, C}, 0}, {"tok", 0, []int{B, T}, V}, {"wte", wdt, []int{V, C}, 0}, {"wpe", wdt, []int{T + 2, C}, 0}},
				func(be NN, x map[string]*tensor.Tensor) error {
					return be.EncoderForward(x["out"], x["tok"], x["wte"], x["wpe"], B, T, C, V)
				},
				func(c *csrc.Ctx, x map[string]*tensor.Tensor) error {
					return c.EncoderForwardMixed(x["out"].Ptr(), x["tok"].Ptr(), w, x["wte"].Ptr(), x["wpe"].Ptr(), B, T, C, V)
				}},
			kcase{fmt.Sprintf("EncoderBackward/%v", wdt),
				[]spec{{"dwte", wdt, []int{V, C}, 0}, {"dwpe", wdt, []int{T, C}, 0}, {"dout", f32, []int{n, C}, 0}, {"tok", 0, []int{n}, V}},
				func(be NN, x map[string]*tensor.Tensor) error {
					return be.EncoderBackward(x["dwte"], x["dwpe"], x["dout"], x["tok"], B, T, C, V)
				},
				func(c *csrc.Ctx, x map[string]*tensor.Tensor) error {
					return c.EncoderBackwardMixed(w, x["dwte"].Ptr(), x["dwpe"].Ptr(), x["dout"].Ptr(), x["tok"].Ptr(), B, T, C, V)
				}},
		)
		for _, gdt := range floatTypes {
			g := dt(gdt)
			cases = append(cases,
				kcase{fmt.Sprintf("LinearBackward/%v weights/%v grads", wdt, gdt),
					[]spec{{"din", f32, []int{n, C}, 0}, {"dw", gdt, []int{OC, C}, 0}, {"db", gdt, []int{OC}, 0}, {"dout", f32, []int{n, OC}, 0}, {"in", f32, []int{n, C}, 0}, {"w", wdt, []int{OC, C}, 0}},
					func(be NN, x map[string]*tensor.Tensor) error {
						return be.LinearBackward(x["din"], x["dw"], x["db"], x["dout"], x["in"], x["w"])
					},
					func(c *csrc.Ctx, x map[string]*tensor.Tensor) error {
						return c.MatmulBackwardMixed(x["din"].Ptr(), g, x["dw"].Ptr(), x["db"].Ptr(), x["dout"].Ptr(), x["in"].Ptr(), w, x["w"].Ptr(), n, C, OC)
					}},
				kcase{fmt.Sprintf("LayerNormBackward/%v weights/%v grads", wdt, gdt),
					[]spec{{"din", f32, []int{n, C}, 0}, {"dw", gdt, []int{C}, 0}, {"db", gdt, []int{C}, 0}, {"dout", f32, []int{n, C}, 0}, {"in", f32, []int{n, C}, 0}, {"w", wdt, []int{C}, 0}, {"mean", f32, []int{n}, 0}, {"rstd", f32, []int{n}, 0}},
					func(be NN, x map[string]*tensor.Tensor) error {
						return be.LayerNormBackward(x["din"], x["dw"], x["db"], x["dout"], x["in"], x["w"], x["mean"], x["rstd"], n, C)
					},
					func(c *csrc.Ctx, x map[string]*tensor.Tensor) error {
						return c.LayerNormBackwardMixed(x["din"].Ptr(), g, x["dw"].Ptr(), x["db"].Ptr(), x["dout"].Ptr(), x["in"].Ptr(), w, x["w"].Ptr(), x["mean"].Ptr(), x["rstd"].Ptr(), n, C)
					}},
			)
		}
	}
	cases = append(cases,
		kcase{"GELUForward", []spec{{"out", f32, []int{n * C}, 0}, {"in", f32, []int{n * C}, 0}},
			func(be NN, x map[string]*tensor.Tensor) error { return be.GELUForward(x["out"], x["in"], n*C) },
			func(c *csrc.Ctx, x map[string]*tensor.Tensor) error {
				return c.GELUForward(x["out"].Ptr(), x["in"].Ptr(), n*C)
			}},
		kcase{"GELUBackward", []spec{{"din", f32, []int{n * C}, 0}, {"in", f32, []int{n * C}, 0}, {"dout", f32, []int{n * C}, 0}},
			func(be NN, x map[string]*tensor.Tensor) error {
				return be.GELUBackward(x["din"], x["in"], x["dout"], n*C)
			},
			func(c *csrc.Ctx, x map[string]*tensor.Tensor) error {
				return c.GELUBackward(x["din"].Ptr(), x["in"].Ptr(), x["dout"].Ptr(), n*C)
			}},
		kcase{"Add", []spec{{"out", f32, []int{n * C}, 0}, {"a", f32, []int{n * C}, 0}, {"b", f32, []int{n * C}, 0}},
			func(be NN, x map[string]*tensor.Tensor) error { return be.Add(x["out"], x["a"], x["b"], n*C) },
			func(c *csrc.Ctx, x map[string]*tensor.Tensor) error {
				return c.Add(x["out"].Ptr(), x["a"].Ptr(), x["b"].Ptr(), n*C)
			}},
		kcase{"SoftmaxXentForward", []spec{{"probs", f32, []int{n, V}, 0}, {"losses", f32, []int{n}, 0}, {"logits", f32, []int{n, V}, 0}, {"targets", 0, []int{n}, V}},
			func(be NN, x map[string]*tensor.Tensor) error {
				return be.SoftmaxXentForward(x["probs"], x["losses"], x["logits"], x["targets"], n, V)
			},
			func(c *csrc.Ctx, x map[string]*tensor.Tensor) error {
				return c.SoftmaxXentForward(x["probs"].Ptr(), x["losses"].Ptr(), x["logits"].Ptr(), x["targets"].Ptr(), n, V)
			}},
		kcase{"SoftmaxXentBackward", []spec{{"dlogits", f32, []int{n, V}, 0}, {"probs", f32, []int{n, V}, 0}, {"targets", 0, []int{n}, V}, {"dlosses", f32, []int{n}, 0}},
			func(be NN, x map[string]*tensor.Tensor) error {
				return be.SoftmaxXentBackward(x["dlogits"], x["probs"], x["targets"], x["dlosses"], n, V)
			},
			func(c *csrc.Ctx, x map[string]*tensor.Tensor) error {
				return c.SoftmaxXentBackward(x["dlogits"].Ptr(), x["probs"].Ptr(), x["targets"].Ptr(), x["dlosses"].Ptr(), n, V)
			}},
	)
	// the vocabulary-parallel kernels on the middle third [V, 2V) of a
	// vocabulary of 3V
	cases = append(cases,
		kcase{"VocabXentMax", []spec{{"maxes", f32, []int{n}, 0}, {"logits", f32, []int{n, V}, 0}},
			func(be NN, x map[string]*tensor.Tensor) error { return be.VocabXentMax(x["maxes"], x["logits"], n, V) },
			func(c *csrc.Ctx, x map[string]*tensor.Tensor) error {
				return c.VocabXentMax(x["maxes"].Ptr(), x["logits"].Ptr(), n, V)
			}},
		kcase{"VocabXentExp", []spec{{"logits", f32, []int{n, V}, 0}, {"sums", f32, []int{n}, 0}, {"tlogits", f32, []int{n}, 0},
			{"maxes", f32, []int{n}, 0}, {"targets", 0, []int{n}, 3 * V}},
			func(be NN, x map[string]*tensor.Tensor) error {
				return be.VocabXentExp(x["logits"], x["sums"], x["tlogits"], x["maxes"], x["targets"], n, V, V, 3*V)
			},
			func(c *csrc.Ctx, x map[string]*tensor.Tensor) error {
				return c.VocabXentExp(x["logits"].Ptr(), x["sums"].Ptr(), x["tlogits"].Ptr(), x["maxes"].Ptr(), x["targets"].Ptr(), n, V, V, 3*V)
			}},
		kcase{"VocabXentGrad", []spec{{"logits", f32, []int{n, V}, 0}, {"sums", f32, []int{n}, 0}, {"targets", 0, []int{n}, 3 * V}},
			func(be NN, x map[string]*tensor.Tensor) error {
				return be.VocabXentGrad(x["logits"], x["sums"], x["targets"], 0.37, n, V, V)
			},
			func(c *csrc.Ctx, x map[string]*tensor.Tensor) error {
				return c.VocabXentGrad(x["logits"].Ptr(), x["sums"].Ptr(), x["targets"].Ptr(), 0.37, n, V, V)
			}},
		kcase{"TransposeBlocks", []spec{{"dst", f32, []int{C, n, 3}, 0}, {"src", f32, []int{n, C, 3}, 0}},
			func(be NN, x map[string]*tensor.Tensor) error { return be.TransposeBlocks(x["dst"], x["src"], n, C, 3) },
			func(c *csrc.Ctx, x map[string]*tensor.Tensor) error {
				return c.TransposeBlocks(x["dst"].Ptr(), x["src"].Ptr(), n, C, 3)
			}},
		kcase{"VocabClearRows", []spec{{"x", f32, []int{n, C}, 0}, {"ids", 0, []int{n}, 3 * V}},
			func(be NN, x map[string]*tensor.Tensor) error { return be.VocabClearRows(x["x"], x["ids"], n, C, V, V) },
			func(c *csrc.Ctx, x map[string]*tensor.Tensor) error {
				return c.VocabClearRows(x["x"].Ptr(), x["ids"].Ptr(), n, C, V, V)
			}},
	)
	for _, window := range []int{0, 3} {
		cases = append(cases,
			kcase{fmt.Sprintf("AttentionForward/window %d", window),
				[]spec{{"out", f32, []int{n, NH * HS}, 0}, {"att", f32, []int{B, NH, T, T}, 0}, {"qkv", f32, []int{n, 3 * NH * HS}, 0}},
				func(be NN, x map[string]*tensor.Tensor) error {
					return be.AttentionForward(x["out"], x["att"], x["qkv"], B, T, NH, HS, window)
				},
				func(c *csrc.Ctx, x map[string]*tensor.Tensor) error {
					return c.AttentionForward(x["out"].Ptr(), x["att"].Ptr(), x["qkv"].Ptr(), B, T, NH, HS, window)
				}},
			kcase{fmt.Sprintf("AttentionBackward/window %d", window),
				[]spec{{"dqkv", f32, []int{n, 3 * NH * HS}, 0}, {"dout", f32, []int{n, NH * HS}, 0}, {"qkv", f32, []int{n, 3 * NH * HS}, 0}, {"att", f32, []int{B, NH, T, T}, 0}},
				func(be NN, x map[string]*tensor.Tensor) error {
					return be.AttentionBackward(x["dqkv"], x["dout"], x["qkv"], x["att"], B, T, NH, HS, window)
				},
				func(c *csrc.Ctx, x map[string]*tensor.Tensor) error {
					return c.AttentionBackward(x["dqkv"].Ptr(), x["dout"].Ptr(), x["qkv"].Ptr(), x["att"].Ptr(), B, T, NH, HS, window)
				}},
		)
	}
	be := newCPU(t, 2)
	for i, k := range cases {
		t.Run(k.name, func(t *testing.T) {
			got, want := makeSet(t, uint64(i), k.specs), makeSet(t, uint64(i), k.specs)
			require.NoError(t, k.viaNN(be, got))
			require.NoError(t, k.direct(be.Ctx(), want))
			changed := false
			for _, s := range k.specs {
				g, _ := got[s.name].RawBytes()
				w, _ := want[s.name].RawBytes()
				assert.Equal(t, w, g, "%s differs from the direct C call's", s.name)
				fresh := makeSet(t, uint64(i), []spec{s})[s.name]
				f, _ := fresh.RawBytes()
				changed = changed || !bytes.Equal(g, f)
			}
			assert.True(t, changed, "the call changed nothing: the comparison proves nothing")
		})
	}
}

// A token or target outside [0, v) is the same *ArgError from every
// method that reads ids, and nothing is written.
func TestNNIDOutOfRange(t *testing.T) {
	be := newCPU(t, 1)
	const B, T, C, V = 1, 3, 4, 5
	bad := mustEmpty(t, tensor.Int32, B*T)
	ids, _ := bad.Int32s()
	copy(ids, []int32{0, V, 1})
	out := fill(t, tensor.Float32, make([]float32, B*T*max(C, V)))
	wte, wpe := fill(t, tensor.Float32, randVals(rand.New(rand.NewPCG(1, 1)), V*C)), mustEmpty(t, tensor.Float32, T*C)
	losses := mustEmpty(t, tensor.Float32, B*T)
	cases := []struct {
		name, arg string
		call      func() error
	}{
		{"EncoderForward", "tok", func() error { return be.EncoderForward(out, bad, wte, wpe, B, T, C, V) }},
		{"EncoderBackward", "tok", func() error { return be.EncoderBackward(wte, nil, out, bad, B, T, C, V) }},
		{"SoftmaxXentForward", "targets", func() error { return be.SoftmaxXentForward(out, losses, out, bad, B*T, V) }},
		{"SoftmaxXentBackward", "targets", func() error { return be.SoftmaxXentBackward(out, out, bad, losses, B*T, V) }},
		{"VocabXentExp", "targets", func() error { return be.VocabXentExp(out, losses, losses, losses, bad, B*T, 2, 3, V) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before, wb := read(t, out), read(t, wte)
			requireArgError(t, c.call(), c.name, c.arg, "outside [0, 5)")
			require.Equal(t, fmt.Sprint(before), fmt.Sprint(read(t, out)), "something was written to out")
			require.Equal(t, fmt.Sprint(wb), fmt.Sprint(read(t, wte)), "something was written to wte")
		})
	}
}

// The NN argument rules: each mistake is an *ArgError naming the method,
// the argument and what is allowed, before anything is computed.
func TestNNBadArguments(t *testing.T) {
	be := newCPU(t, 1)
	mk := func(dt tensor.DType, n int) *tensor.Tensor { return mustEmpty(t, dt, n) }
	const n, c = 4, 3
	x, small, mean := mk(tensor.Float32, n*c), mk(tensor.Float32, n*c-1), mk(tensor.Float32, n)
	w, b := mk(tensor.Float32, c), mk(tensor.Float32, c)
	hw, hb := mk(tensor.BFloat16, c), mk(tensor.Float16, c)
	tok, ftok := mk(tensor.Int32, n), mk(tensor.Float32, n)
	freed, _ := tensor.Empty(tensor.Float32, n*c)
	freed.Free()
	strided, _ := mk(tensor.Float32, 2*n*c).Reshape(n, 2*c)
	strided, _ = strided.Narrow(1, 0, c)
	onGPU, _ := tensor.FromStorage(tensor.WrapStorage(x.Ptr(), x.Bytes(), tensor.CUDA(0), nil), tensor.Float32, 0, n*c)
	att := mk(tensor.Float32, 2*2*2*2)
	qkv := mk(tensor.Float32, 2*2*3*4)
	cases := []struct {
		name, op, arg, msg string
		call               func() error
	}{
		{"ln negative n", "LayerNormForward", "n", "-1: want >= 0", func() error { return be.LayerNormForward(x, mean, mean, x, w, b, 1e-5, -1, c) }},
		{"ln zero channels", "LayerNormForward", "c", "0: want >= 1", func() error { return be.LayerNormForward(x, mean, mean, x, w, b, 1e-5, n, 0) }},
		{"ln NaN eps", "LayerNormForward", "eps", "NaN: want >= 0", func() error {
			return be.LayerNormForward(x, mean, mean, x, w, b, float32(math.NaN()), n, c)
		}},
		{"ln short out", "LayerNormForward", "out", "has 11 elements, need 12", func() error { return be.LayerNormForward(small, mean, mean, x, w, b, 1e-5, n, c) }},
		{"ln nil rstd", "LayerNormForward", "rstd", "is nil", func() error { return be.LayerNormForward(x, mean, nil, x, w, b, 1e-5, n, c) }},
		{"ln half input", "LayerNormForward", "in", "dtype float16: activations are float32", func() error {
			return be.LayerNormForward(x, mean, mean, mk(tensor.Float16, n*c), w, b, 1e-5, n, c)
		}},
		{"ln bias unlike weight", "LayerNormForward", "b", "dtype float16, want bfloat16 like w", func() error {
			return be.LayerNormForward(x, mean, mean, x, hw, hb, 1e-5, n, c)
		}},
		{"ln int weight", "LayerNormForward", "w", "dtype int32: allowed float32", func() error {
			return be.LayerNormForward(x, mean, mean, x, mk(tensor.Int32, c), b, 1e-5, n, c)
		}},
		{"ln freed input", "LayerNormForward", "in", "freed", func() error { return be.LayerNormForward(x, mean, mean, freed, w, b, 1e-5, n, c) }},
		{"ln strided input", "LayerNormForward", "in", "not contiguous", func() error { return be.LayerNormForward(x, mean, mean, strided, w, b, 1e-5, n, c) }},
		{"ln input on a GPU", "LayerNormForward", "in", "backend is on cpu", func() error { return be.LayerNormForward(x, mean, mean, onGPU, w, b, 1e-5, n, c) }},
		{"ln bwd grads unlike", "LayerNormBackward", "db", "dtype float16, want bfloat16 like dw", func() error {
			return be.LayerNormBackward(nil, hw, hb, x, x, w, mean, mean, n, c)
		}},
		{"ln bwd short db", "LayerNormBackward", "db", "has 2 elements, need 3", func() error {
			return be.LayerNormBackward(nil, nil, mk(tensor.Float32, c-1), x, x, w, mean, mean, n, c)
		}},
		{"ln bwd short mean", "LayerNormBackward", "mean", "has 3 elements, need 4", func() error {
			return be.LayerNormBackward(x, nil, nil, x, x, w, mk(tensor.Float32, n-1), mean, n, c)
		}},
		{"gelu short in", "GELUForward", "in", "has 11 elements, need 12", func() error { return be.GELUForward(x, small, n*c) }},
		{"gelu bwd nil din", "GELUBackward", "din", "is nil", func() error { return be.GELUBackward(nil, x, x, n*c) }},
		{"gelu bwd write nil din", "GELUBackwardWrite", "din", "is nil", func() error { return be.GELUBackwardWrite(nil, x, x, n*c) }},
		{"add short b", "Add", "b", "has 11 elements, need 12", func() error { return be.Add(x, x, small, n*c) }},
		{"add negative n", "Add", "n", "-2: want >= 0", func() error { return be.Add(x, x, x, -2) }},
		{"enc float tokens", "EncoderForward", "tok", "dtype float32: ids are int32", func() error { return be.EncoderForward(x, ftok, x, x, 1, n, c, 4) }},
		{"enc short wpe", "EncoderForward", "wpe", "has 3 elements, need 12", func() error { return be.EncoderForward(x, tok, x, w, 1, n, c, 4) }},
		{"enc wpe unlike wte", "EncoderForward", "wpe", "dtype float32, want bfloat16 like wte", func() error {
			return be.EncoderForward(x, tok, mk(tensor.BFloat16, n*c), x, 1, n, c, 4)
		}},
		{"enc sizes overflow", "EncoderForward", "sizes", "multiply past 2^62", func() error { return be.EncoderForward(x, tok, x, x, 1<<31, 1<<31, 1<<31, 4) }},
		{"enc bwd grads unlike", "EncoderBackward", "dwpe", "dtype float32, want float16 like dwte", func() error {
			return be.EncoderBackward(mk(tensor.Float16, n*c), x, x, tok, 1, n, c, 4)
		}},
		{"enc bwd short tok", "EncoderBackward", "tok", "has 4 elements, need 8", func() error { return be.EncoderBackward(nil, nil, mk(tensor.Float32, 2*n*c), tok, 2, n, c, 4) }},
		{"att zero heads", "AttentionForward", "nh", "0: want >= 1", func() error { return be.AttentionForward(x, att, qkv, 2, 2, 0, 4, 0) }},
		{"att zero head size", "AttentionBackward", "hs", "0: want >= 1", func() error { return be.AttentionBackward(qkv, x, qkv, att, 2, 2, 1, 0, 0) }},
		{"att short att", "AttentionForward", "att", "has 16 elements, need 32", func() error { return be.AttentionForward(qkv, att, qkv, 2, 2, 4, 1, 0) }},
		{"att overflow", "AttentionForward", "sizes", "need past 2^62", func() error { return be.AttentionForward(x, att, qkv, 1, 1<<21, 1<<21, 1, 0) }},
		{"att bwd short dout", "AttentionBackward", "dout", "has 12 elements, need 16", func() error { return be.AttentionBackward(qkv, x, qkv, att, 2, 2, 1, 4, 0) }},
		{"att bwd write short dout", "AttentionBackwardWrite", "dout", "has 12 elements, need 16", func() error {
			return be.AttentionBackwardWrite(qkv, x, qkv, att, 2, 2, 1, 4, 0)
		}},
		{"linear bwd write 1-D w", "LinearBackwardWrite", "w", "want 2 dimensions [out, in]", func() error { return be.LinearBackwardWrite(x, nil, nil, x, x, w) }},
		{"xent zero vocab", "SoftmaxXentForward", "v", "0: want >= 1", func() error { return be.SoftmaxXentForward(x, mean, x, tok, n, 0) }},
		{"xent short losses", "SoftmaxXentForward", "losses", "has 4 elements, need 6", func() error { return be.SoftmaxXentForward(x, mean, x, tok, 6, 2) }},
		{"xent bwd float targets", "SoftmaxXentBackward", "targets", "ids are int32", func() error { return be.SoftmaxXentBackward(x, x, ftok, mean, n, c) }},
		{"xent bwd half dlosses", "SoftmaxXentBackward", "dlosses", "activations are float32", func() error {
			return be.SoftmaxXentBackward(x, x, tok, mk(tensor.BFloat16, n), n, c)
		}},
		{"transpose overlap", "TransposeBlocks", "dst", "overlaps src", func() error {
			tail, _ := x.Slice(c, n*c-c)
			return be.TransposeBlocks(tail, x, n-1, 1, c)
		}},
		{"transpose short src", "TransposeBlocks", "src", "has 11 elements, need 12", func() error { return be.TransposeBlocks(x, small, n, c, 1) }},
		{"transpose negative w", "TransposeBlocks", "w", "-1: want >= 0", func() error { return be.TransposeBlocks(x, x, n, c, -1) }},
		{"vocab max zero slice", "VocabXentMax", "v", "0: want >= 1", func() error { return be.VocabXentMax(mean, x, n, 0) }},
		{"vocab max short maxes", "VocabXentMax", "maxes", "has 4 elements, need 6", func() error { return be.VocabXentMax(mean, x, 6, 2) }},
		{"vocab exp slice past vocab", "VocabXentExp", "lo", "[3, 6) must lie in the vocabulary [0, 5)", func() error {
			return be.VocabXentExp(x, mean, mean, mean, tok, n, c, 3, 5)
		}},
		{"vocab exp negative lo", "VocabXentExp", "lo", "-1: the slice", func() error { return be.VocabXentExp(x, mean, mean, mean, tok, n, c, -1, 5) }},
		{"vocab exp float targets", "VocabXentExp", "targets", "ids are int32", func() error { return be.VocabXentExp(x, mean, mean, mean, ftok, n, c, 0, c) }},
		{"vocab exp nil tlogits", "VocabXentExp", "tlogits", "is nil", func() error { return be.VocabXentExp(x, mean, nil, mean, tok, n, c, 0, c) }},
		{"vocab grad short sums", "VocabXentGrad", "sums", "has 3 elements, need 4", func() error {
			return be.VocabXentGrad(x, mk(tensor.Float32, n-1), tok, 1, n, c, 0)
		}},
		{"vocab grad negative lo", "VocabXentGrad", "lo", "-2: want >= 0", func() error { return be.VocabXentGrad(x, mean, tok, 1, n, c, -2) }},
		{"vocab clear short x", "VocabClearRows", "x", "has 11 elements, need 12", func() error { return be.VocabClearRows(small, tok, n, c, 0, 2) }},
		{"vocab clear half x", "VocabClearRows", "x", "activations are float32", func() error {
			return be.VocabClearRows(mk(tensor.BFloat16, n*c), tok, n, c, 0, 2)
		}},
	}
	for _, k := range cases {
		t.Run(k.name, func(t *testing.T) {
			requireArgError(t, k.call(), k.op, k.arg, k.msg)
		})
	}
}

// The Check functions are what another backend calls: on its own device
// they refuse host tensors with the same error the CPU gives for device
// tensors.
func TestNNChecksOnAnotherDevice(t *testing.T) {
	x := mustEmpty(t, tensor.Float32, 8)
	requireArgError(t, CheckGELUForward(tensor.CUDA(0), x, x, 8), "", "out", "is on cpu, backend is on cuda:0")
	d, err := CheckLayerNormBackward(tensor.CPU, nil, nil, nil, x, x, mustEmpty(t, tensor.BFloat16, 4), x, x, 2, 4)
	require.NoError(t, err)
	require.Equal(t, tensor.BFloat16, d.W, "weights' dtype")
	require.Equal(t, tensor.Float32, d.Grad, "want float32 (no) gradients")
}
