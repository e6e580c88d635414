package deepgo_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/internal/qwzref"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/deepgo-ml/deepgo/zero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// qwzExpected is what rank 0's forward must compute with under qwZ, from
// the fp32 masters: each parameter rounded to the model dtype, laid out in
// its stage-3 unit, each rank's chunk quantized and dequantized as
// DeepSpeed's CUDAQuantizer does (qwzref), the parameter's slice of that.
// quantized false gives the plain gather's values (the model dtype).
func qwzExpected(t *testing.T, lay *zero.Layout, m *testmodel.MLP, dt tensor.DType, masters map[string][]float32, quantized []bool) map[string][]float32 {
	t.Helper()
	mods := m.Modules()
	out := map[string][]float32{}
	for u, unit := range lay.Units {
		flat := make([]float32, unit.Numel)
		for _, s := range unit.Slots {
			name := mods[s.Module].(*testmodel.Linear).Params()[s.Param].Name
			for i, v := range masters[name] {
				flat[s.Offset+i] = tensor.ToHalfPrecision(dt, v)
			}
		}
		if quantized[u] {
			c := unit.Chunk(lay.World)
			require.Zero(t, c%8, "unit %d chunk %d: qwZ pads chunks to a multiple of 8", u, c)
			g, err := zero.QuantGroups(c)
			require.NoError(t, err)
			for r := range lay.World {
				copy(flat[r*c:], qwzref.RoundTrip(dt, flat[r*c:(r+1)*c], g))
			}
		}
		for _, s := range unit.Slots {
			name := mods[s.Module].(*testmodel.Linear).Params()[s.Param].Name
			out[name] = flat[s.Offset : s.Offset+s.Numel]
		}
	}
	return out
}

// TestStage3QwZ: with zero_quantized_weights, every stage-3 forward of
// every micro-step computes with exactly the weights a reference gets by
// quantizing and dequantizing each rank's partition of the model-dtype
// weights as DeepSpeed does (fp16 and bf16, 2 and 4 ranks, gradient
// accumulation 2, on the CPU backend and the simulated device with and
// without delays), bit for bit. A persistent module is gathered quantized
// once and in the model dtype after each step, as DeepSpeed's post-step
// all_gather does. The weights must differ from the unquantized ones, so
// a gather that silently skipped quantization fails it, and the sim runs
// are bit-identical to the CPU's.
func TestStage3QwZ(t *testing.T) { stage3QwZTable(t, []string{"", "sim", "sim+delay"}) }

// stage3QwZTable is TestStage3QwZ on devs, the runs of later devices
// bit-identical to the first's.
func stage3QwZTable(t *testing.T, devs []string) {
	type qcase struct {
		prec    string
		world   int
		persist bool
	}
	var cases []qcase
	for _, prec := range []string{"fp16", "bf16"} {
		for _, world := range []int{2, 4} {
			cases = append(cases, qcase{prec, world, false})
		}
	}
	cases = append(cases, qcase{"bf16", 2, true})
	for _, c := range cases {
		name := fmt.Sprintf("%s/world%d", c.prec, c.world)
		if c.persist {
			name += "/persistent"
		}
		t.Run(name, func(t *testing.T) {
			dt := map[string]tensor.DType{"fp16": tensor.Float16, "bf16": tensor.BFloat16}[c.prec]
			zextra := `, "zero_quantized_weights": true, "stage3_param_persistence_threshold": 0, "stage3_prefetch_bucket_size": 300`
			if c.persist {
				zextra = `, "zero_quantized_weights": true, "stage3_param_persistence_threshold": 100, "stage3_prefetch_bucket_size": 300`
			}
			var want *result
			for _, dev := range devs {
				var (
					mu               sync.Mutex
					expect           map[string][]float32
					forwards, differ int
					mismatch         string // the first weight that differs from the reference
					stats            zero.QwZStats
					warm             []bool
				)
				r := run{stage: 3, world: c.world, gas: 2, precision: c.prec, zeroExtra: zextra, steps: 4, dev: dev}
				r.hook = func(rank int, m *testmodel.MLP, e *deepgo.Engine, step int) {
					masters, err := e.Parameters(context.Background())
					require.NoError(t, err)
					if rank != 0 {
						return
					}
					lay := e.ZeRO().Layout()
					if warm == nil {
						warm = make([]bool, len(lay.Units))
					}
					quantized := make([]bool, len(lay.Units))
					for u, unit := range lay.Units {
						persistent := len(unit.Modules) == 1 && unit.Used <= 100 && c.persist
						quantized[u] = !persistent || !warm[u]
						warm[u] = true
					}
					plain := qwzExpected(t, lay, m, dt, masters, make([]bool, len(lay.Units)))
					mu.Lock()
					expect = qwzExpected(t, lay, m, dt, masters, quantized)
					for n := range expect {
						for i := range expect[n] {
							if math.Float32bits(expect[n][i]) != math.Float32bits(plain[n][i]) {
								differ++
							}
						}
					}
					mu.Unlock()
					for _, l := range m.Layers {
						w, b := l.Params()[0].Name, l.Params()[1].Name
						l.OnForward = func(gw, gb []float32) {
							mu.Lock()
							defer mu.Unlock()
							forwards++
							for _, p := range []struct {
								name string
								got  []float32
							}{{w, gw}, {b, gb}} {
								for i, v := range p.got {
									if e := expect[p.name][i]; mismatch == "" && math.Float32bits(e) != math.Float32bits(v) {
										mismatch = fmt.Sprintf("step %d %s[%d]: want %v got %v", step, p.name, i, e, v)
									}
								}
							}
						}
					}
					stats = e.ZeRO().QwZ()
				}
				got, err := train(t, r)
				require.NoError(t, err, dev)
				require.Empty(t, mismatch, "%s: forward weights differ from the quantized reference", dev)
				assert.Equal(t, r.steps*r.gas*len(sizes[1:]), forwards, "%s: forwards checked", dev)
				assert.Positive(t, differ, "%s: quantization changed no weight: the check would pass without it", dev)
				assert.Positive(t, stats.Gathers, "%s: no quantized gather counted", dev)
				if want == nil {
					want = got
				} else {
					bitEqualRuns(t, want, got)
				}
			}
		})
	}
}

// qwzLossTol bounds qwZ's loss drift from plain ZeRO-3 on the test MLP.
// Symmetric int8 with one scale per group of at most ~8000 elements (here
// one group per chunk) moves each weight by at most half a step,
// absmax/254, about 0.4% of the group's largest weight; the layers' outputs
// move by a similar fraction, and over the 8 steps (AdamW at lr 0.002,
// which the quantization does not touch: masters and gradients are exact)
// the per-step loss moved by at most 1.4e-3 relative (measured on the
// CPU, bf16, 4 ranks); 1e-2 leaves a margin of 7 while a broken
// dequantization (wrong scale, rank order or group) moves the loss far
// more.
const qwzLossTol = 1e-2

// TestStage3QwZLoss: qwZ's losses stay within qwzLossTol of plain ZeRO-3's
// (bf16, 4 ranks) and are not identical to them.
func TestStage3QwZLoss(t *testing.T) {
	base := run{stage: 3, world: 4, gas: 2, precision: "bf16", steps: 8}
	q := base
	q.zeroExtra = `, "zero_quantized_weights": true, "stage3_param_persistence_threshold": 20, "stage3_prefetch_bucket_size": 300`
	want, err := train(t, base)
	require.NoError(t, err)
	got, err := train(t, q)
	require.NoError(t, err)
	d := lossDiff(want.losses, got.losses)
	t.Logf("qwZ vs ZeRO-3 bf16: worst relative loss difference %.3g over %d steps", d, len(want.losses))
	assert.Less(t, d, qwzLossTol)
	assert.Positive(t, d, "qwZ losses identical to ZeRO-3's: nothing was quantized")
}

// TestStage3QwZOffloadParam: qwZ quantizes the partitions offload_param
// pages in (from swap files on the CPU, copied up on the simulated device)
// exactly as resident ones: the runs are bit-identical to qwZ without it.
func TestStage3QwZOffloadParam(t *testing.T) {
	const z = `, "zero_quantized_weights": true, "stage3_param_persistence_threshold": 20, "stage3_prefetch_bucket_size": 300`
	base := run{stage: 3, world: 2, gas: 2, precision: "bf16", zeroExtra: z, steps: 4}
	want, err := train(t, base)
	require.NoError(t, err)
	for _, c := range []struct{ dev, off string }{
		{"", fmt.Sprintf(`, "offload_param": {"device": "nvme", "nvme_path": %q, "buffer_count": 2, "buffer_size": 1024, "max_in_cpu": 0}`, t.TempDir())},
		{"sim", `, "offload_param": {"device": "cpu"}`},
	} {
		r := base
		r.dev, r.zeroExtra = c.dev, z+c.off
		got, err := train(t, r)
		require.NoError(t, err, c.dev)
		bitEqualRuns(t, want, got)
	}
}

// TestStage3HPZQwZ: hpZ and qwZ together, as a ZeRO++ config sets them.
// Every gather goes quantized, the secondary ones over the hpZ group too
// (DeepSpeed quantizes whatever a quantized fetch gathers): as many
// quantized gathers as qwZ alone, some of them secondary; the losses stay
// within qwzLossTol of plain ZeRO-3, and the simulated device with delays
// is bit-identical to the CPU.
func TestStage3HPZQwZ(t *testing.T) {
	const z = `, "zero_quantized_weights": true, "stage3_param_persistence_threshold": 20, "stage3_prefetch_bucket_size": 300`
	plain := run{stage: 3, world: 4, gas: 2, precision: "bf16", steps: 6}
	qwzOnly := plain
	qwzOnly.zeroExtra = z
	both := withHPZ(qwzOnly, 2)
	want, err := train(t, plain)
	require.NoError(t, err)
	// qwzCount keeps rank 0's quantized-gather count, taken before each step
	qwzCount := func(n *int64) func(int, *testmodel.MLP, *deepgo.Engine, int) {
		return func(rank int, _ *testmodel.MLP, e *deepgo.Engine, _ int) {
			if rank == 0 {
				*n = e.ZeRO().QwZ().Gathers
			}
		}
	}
	var alone int64
	qwzOnly.hook = qwzCount(&alone)
	_, err = train(t, qwzOnly)
	require.NoError(t, err)
	var cpu *result
	for _, dev := range []string{"", "sim+delay"} {
		var use hpzUse
		var n int64
		r := both
		r.dev, r.hook = dev, use.hook(qwzCount(&n))
		got, err := train(t, r)
		require.NoError(t, err, devName(dev))
		if cpu == nil {
			cpu = got
			d := lossDiff(want.losses, got.losses)
			t.Logf("hpZ+qwZ vs ZeRO-3 bf16: worst relative loss difference %.3g over %d steps", d, len(want.losses))
			assert.Less(t, d, qwzLossTol)
		} else {
			bitEqualRuns(t, cpu, got)
		}
		assert.Positive(t, use.stats.SecondaryGathers, "%s: no gather from the secondary partitions", devName(dev))
		assert.Positive(t, n)
		assert.Equal(t, alone, n, "%s: every gather quantized, the secondary ones too", devName(dev))
	}
}
