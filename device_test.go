package deepgo_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/sim"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/deepgo-ml/deepgo/zero"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"
)

// simDelay is the randomized-delay mode's bound per kernel: long enough to
// reorder work across ranks and streams, short enough for the tables.
const simDelay = 50 * time.Microsecond

// worldFor returns the world factory of a run's device: newWorld (the CPU
// backend over comm/local) or n simulated devices, one per rank, over a
// comm that orders collectives after each rank's stream.
func worldFor(dev string) func(ctx context.Context, n int, fn func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error) error {
	if dev == "" {
		return newWorld
	}
	opts := sim.Options{Threads: 1, Seed: 7}
	switch dev {
	case "sim":
		opts.MaxDelay = -1 // no delays even when DEEPGO_SIM_DELAY is set
	case "sim+delay":
		opts.MaxDelay = simDelay
	default:
		panic("unknown test device " + dev)
	}
	return func(ctx context.Context, n int, fn func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error) error {
		w, err := sim.NewWorldTimeout(n, opts, 30*time.Second)
		if err != nil {
			return err
		}
		defer w.Close()
		var g errgroup.Group
		for r := range n {
			g.Go(func() error {
				c := w.Comm(r)
				return fn(ctx, c, []deepgo.Option{deepgo.WithComm(c)})
			})
		}
		return g.Wait()
	}
}

// bitEqualRuns requires got to be bit-for-bit want: every loss, loss scale
// and parameter element, and the skipped-step count.
func bitEqualRuns(t *testing.T, want, got *result) {
	t.Helper()
	require.Len(t, got.losses, len(want.losses), "losses")
	for i := range want.losses {
		require.Equal(t, math.Float64bits(want.losses[i]), math.Float64bits(got.losses[i]), "loss of step %d: want %v got %v", i, want.losses[i], got.losses[i])
	}
	require.Equal(t, want.scales, got.scales, "loss scales")
	require.Equal(t, want.skipped, got.skipped, "skipped steps")
	require.NoError(t, bitEqual(want.params, got.params), "parameters")
}

// TestDeviceEquivalence: the engine's table on the simulated device
// (memory Go may not read, kernels queued on a stream, collectives ordered
// after it), with and without randomized kernel delays, is bit-identical
// to the CPU backend: every ZeRO stage on 1, 2 and 4 ranks, gradient
// accumulation, fp16 with overflowing steps and bf16. A copy the engine
// forgot, or a read before the stream finished, fails it.
func TestDeviceEquivalence(t *testing.T) {
	overflowAt := map[int]bool{2: true, 3: true, 7: true}
	inject := func(rank int, m *testmodel.MLP, _ *deepgo.Engine, step int) {
		if rank == 1 {
			m.Layers[1].InjectInf = func() bool { return overflowAt[step] }
		}
	}
	var cases []run
	for _, stage := range []int{0, 1, 2, 3} {
		for _, world := range []int{1, 2, 4} {
			for _, gas := range []int{1, 4} {
				cases = append(cases, run{stage: stage, world: world, gas: gas, steps: 8})
			}
		}
		cases = append(cases,
			run{stage: stage, world: 2, gas: 2, precision: "fp16", steps: 10, hook: inject},
			run{stage: stage, world: 2, gas: 1, precision: "bf16", steps: 6})
	}
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-34s %8s %8s %10s\n", "case", "skipped", "steps", "last loss")
	for _, r := range cases {
		t.Run(r.String(), func(t *testing.T) {
			want, err := train(t, r)
			require.NoError(t, err)
			for _, dev := range []string{"sim", "sim+delay"} {
				r := r
				r.dev = dev
				var mem zero.Memory
				hook := r.hook
				r.hook = func(rank int, m *testmodel.MLP, e *deepgo.Engine, step int) {
					if hook != nil {
						hook(rank, m, e, step)
					}
					if rank == 0 && step == 1 {
						mem = e.Memory()
					}
				}
				got, err := train(t, r)
				require.NoError(t, err, dev)
				bitEqualRuns(t, want, got)
				// the engine's state lived on the device, nothing in host memory
				require.Equal(t, tensor.Sim(0), mem.Device, "%s: Memory().Device", dev)
				require.Positive(t, mem.DeviceBytes, "%s: device bytes", dev)
				require.GreaterOrEqual(t, mem.DeviceBytes, mem.ParamBytes()+mem.Grads+mem.OptimizerState, "%s: device bytes", dev)
				require.Zero(t, mem.HostBytes, "%s: host bytes of engine state", dev)
			}
			fmt.Fprintf(&table, "%-34s %8d %8d %10.6f\n", r, want.skipped, len(want.losses), want.losses[len(want.losses)-1])
		})
	}
	t.Log(table.String())
}
