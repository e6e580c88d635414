package deepgo_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/deepgo-ml/deepgo/zero"
)

// TestOverflow: inf gradients on one rank make every rank skip the step;
// the loss scale follows DeepSpeed's ZeRO loss-scaler rules (optim's
// DynamicScaler, golden-tested), the parameters stay unchanged and the
// skipped steps are counted.
func TestOverflow(t *testing.T) {
	overflowAt := map[int]bool{3: true, 4: true, 5: true, 9: true}
	for _, stage := range []int{0, 1, 2, 3} {
		t.Run(fmt.Sprintf("stage%d", stage), func(t *testing.T) {
			var before, after [2]map[string][]float32
			var applied [2][]bool
			r := run{stage: stage, world: 2, gas: 1, precision: "fp16", steps: 12}
			r.hook = func(rank int, m *mlp, e *deepgo.Engine, step int) {
				if rank == 1 {
					m.layers[1].injectInf = func() bool { return overflowAt[step] }
				}
				if step == 4 || step == 5 {
					// snapshots around skipped step 4 (Parameters is a collective)
					p, err := e.Parameters(context.Background())
					if err != nil {
						t.Error(err)
					}
					if step == 4 {
						before[rank] = p
					} else {
						after[rank] = p
					}
				}
				if step > 0 {
					applied[rank] = append(applied[rank], e.WasStepApplied())
				}
			}
			res, err := train(t, r)
			if err != nil {
				t.Fatal(err)
			}
			if res.skipped != len(overflowAt) {
				t.Errorf("skipped %d steps, want %d", res.skipped, len(overflowAt))
			}
			for rank := range 2 {
				if d, where := relDiff(before[rank], after[rank]); d != 0 {
					t.Errorf("rank %d: parameters changed by a skipped step (%g at %s)", rank, d, where)
				}
				for s, a := range applied[rank] {
					if a == overflowAt[s] {
						t.Errorf("rank %d step %d: WasStepApplied %v with overflow %v", rank, s, a, overflowAt[s])
					}
				}
			}
			// golden rules: replay the overflow sequence on a fresh scaler
			mode := optim.ScalerModeZeRO
			if stage == 0 {
				mode = optim.ScalerModeFP16Optimizer
			}
			want, _ := optim.NewDynamicScaler(optim.DynamicScalerConfig{InitScale: 256, ScaleWindow: 1000, MinScale: 1, DelayedShift: 2, RaiseErrorAtMin: stage > 0, Mode: mode})
			for s := range r.steps {
				if err := want.Update(overflowAt[s]); err != nil {
					t.Fatal(err)
				}
				if res.scales[s] != want.Scale() {
					t.Errorf("step %d: loss scale %v, golden %v", s, res.scales[s], want.Scale())
				}
			}
			t.Logf("scales %v", res.scales)
		})
	}
}

// TestMemory: at world 4 with fp16 and Adam, each rank's model-state bytes
// for stages 1, 2, 3 are within 5% of the ZeRO paper's formulas (4Ψ+12Ψ/N,
// 2Ψ+14Ψ/N, 16Ψ/N); bucket and gathered buffers are reported next to them.
func TestMemory(t *testing.T) {
	memSizes := []int{64, 256, 256, 64}
	psi := int64(0)
	for i := 0; i+1 < len(memSizes); i++ {
		psi += int64(memSizes[i]*memSizes[i+1] + memSizes[i+1])
	}
	const world = 4
	var table strings.Builder
	fmt.Fprintf(&table, "\nΨ = %d parameters, N = %d, fp16 + Adam (bytes per rank)\n", psi, world)
	fmt.Fprintf(&table, "%-6s %12s %12s %8s %10s %10s %10s %10s %10s\n", "stage", "model states", "ZeRO formula", "ratio", "params", "grads", "master+opt", "buckets", "gathered")
	for _, stage := range []int{0, 1, 2, 3} {
		cfgJSON := fmt.Sprintf(`{"train_batch_size": 8, "fp16": {"enabled": true, "initial_scale_power": 8},
			"optimizer": {"type": "Adam", "params": {"lr": 0.001}},
			"zero_optimization": {"stage": %d, "reduce_bucket_size": 50000, "stage3_param_persistence_threshold": 0}}`, stage)
		data := newDataset(3, 64, memSizes[0], memSizes[len(memSizes)-1])
		var mem zero.Memory
		err := newWorld(context.Background(), world, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
			cfg, err := config.Parse([]byte(cfgJSON))
			if err != nil {
				return err
			}
			e, err := deepgo.Initialize(ctx, cfg, newMLP(5, memSizes...), opts...)
			if err != nil {
				return err
			}
			defer e.Close()
			for s := range 2 {
				if _, err := e.TrainBatch(ctx, data.rankBatch(s, 8, world, c.Rank(), 1)); err != nil {
					return err
				}
			}
			if c.Rank() == 0 {
				mem = e.Memory()
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		got := mem.ModelStates()
		want := zero.PaperModelStates(stage, psi, world)
		ratio := float64(got) / float64(want)
		fmt.Fprintf(&table, "%-6d %12d %12d %8.4f %10d %10d %10d %10d %10d\n", stage, got, want, ratio,
			mem.ParamBytes(), mem.Grads, mem.Master+mem.OptimizerState, mem.BucketsPeak, mem.GatheredPeak)
		if math.Abs(ratio-1) > 0.05 {
			t.Errorf("stage %d: model states %d bytes, formula %d (ratio %.4f)", stage, got, want, ratio)
		}
		if stage == 3 && (mem.GatheredPeak == 0 || mem.GatheredPeak > 2*int64(psi)) {
			t.Errorf("stage 3: gathered peak %d bytes: want 0 < peak <= 2Ψ", mem.GatheredPeak)
		}
		if mem.Peak < got {
			t.Errorf("stage %d: peak %d below model states %d", stage, mem.Peak, got)
		}
	}
	t.Log(table.String())
}

// TestStage3Knobs: prefetch, persistence, max-live and reuse distance are
// honoured and observable through Stage3Stats.
func TestStage3Knobs(t *testing.T) {
	// fc1 144, fc2 272, fc3 68 elements
	cases := []struct {
		name  string
		extra string
		check func(t *testing.T, s zero.CoordinatorStats)
	}{
		{"no prefetch", `, "stage3_prefetch_bucket_size": 0, "stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": 0`, func(t *testing.T, s zero.CoordinatorStats) {
			if s.Prefetches != 0 {
				t.Errorf("prefetches %d, want 0", s.Prefetches)
			}
		}},
		{"prefetch", `, "stage3_prefetch_bucket_size": 1000, "stage3_param_persistence_threshold": 0`, func(t *testing.T, s zero.CoordinatorStats) {
			if s.Prefetches == 0 {
				t.Errorf("no prefetches")
			}
		}},
		{"max live", `, "stage3_prefetch_bucket_size": 1000, "stage3_max_live_parameters": 300, "stage3_param_persistence_threshold": 0`, func(t *testing.T, s zero.CoordinatorStats) {
			if s.PeakLiveNumel > 300+272 {
				t.Errorf("peak live %d elements with max_live 300", s.PeakLiveNumel)
			}
		}},
		{"persistence", `, "stage3_param_persistence_threshold": 150`, func(t *testing.T, s zero.CoordinatorStats) {
			if s.PersistentModules != 2 || s.PersistentNumel != 144+68 {
				t.Errorf("persistent %d modules / %d elements, want 2 / 212", s.PersistentModules, s.PersistentNumel)
			}
		}},
		{"reuse distance", `, "stage3_prefetch_bucket_size": 0, "stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": 1000000`, func(t *testing.T, s zero.CoordinatorStats) {
			if s.ReuseHolds == 0 {
				t.Errorf("no releases held by the reuse distance")
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stats zero.CoordinatorStats
			r := run{stage: 3, world: 2, gas: 2, zeroExtra: c.extra, steps: 3}
			r.hook = func(rank int, m *mlp, e *deepgo.Engine, step int) {
				if rank == 0 {
					stats = e.Stage3Stats()
				}
			}
			if _, err := train(t, r); err != nil {
				t.Fatal(err)
			}
			t.Logf("%+v", stats)
			c.check(t, stats)
		})
	}
}

// fakeDevice is a CPU backend that claims to live on a GPU.
type fakeDevice struct{ *backend.CPU }

func (fakeDevice) Device() tensor.Device { return tensor.CUDA(0) }

// A backend on another device is refused with a clear error, not misused.
func TestInitializeRefusesDeviceBackend(t *testing.T) {
	cpu, err := backend.NewCPU(1)
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	cfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "SGD", "params": {"lr": 0.1}}}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = deepgo.Initialize(context.Background(), cfg, newMLP(1, 4, 3), deepgo.WithBackend(fakeDevice{cpu}))
	if err == nil || !strings.Contains(err.Error(), "not supported") || !strings.Contains(err.Error(), "cuda:0") {
		t.Fatalf("Initialize on a device backend: %v, want a not-supported error naming cuda:0", err)
	}
}
