package deepgo_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/deepgo-ml/deepgo/zero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMemory: at world 4 with fp16 and Adam, each rank's model-state bytes
// for stages 1, 2, 3 are within 5% of the ZeRO paper's formulas (4Ψ+12Ψ/N,
// 2Ψ+14Ψ/N, 16Ψ/N); bucket and gathered buffers are reported next to them.
// On the simulated device the same bytes are reported as device bytes, on
// the CPU as host bytes.
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
		for _, dev := range []string{"", "sim"} {
			cfgJSON := fmt.Sprintf(`{"train_batch_size": 8, "fp16": {"enabled": true, "initial_scale_power": 8},
			"optimizer": {"type": "Adam", "params": {"lr": 0.001}},
			"zero_optimization": {"stage": %d, "reduce_bucket_size": 50000, "stage3_param_persistence_threshold": 0}}`, stage)
			data := testmodel.NewDataset(3, 64, memSizes[0], memSizes[len(memSizes)-1])
			var mem zero.Memory
			err := worldFor(dev)(context.Background(), world, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
				cfg, err := config.Parse([]byte(cfgJSON))
				if err != nil {
					return err
				}
				e, err := initEngine(ctx, cfg, testmodel.NewMLP(5, memSizes...), opts...)
				if err != nil {
					return err
				}
				defer e.Close()
				for s := range 2 {
					if _, err := e.TrainBatch(ctx, data.RankBatch(s, 8, world, c.Rank(), 1)); err != nil {
						return err
					}
				}
				if c.Rank() == 0 {
					mem = e.Memory()
				}
				return nil
			})
			require.NoError(t, err)
			got := mem.ModelStates()
			want := zero.PaperModelStates(stage, psi, world)
			ratio := float64(got) / float64(want)
			// host and device bytes split the live total by where it lives
			live := mem.ParamBytes() + mem.Master + mem.Grads + mem.OptimizerState + mem.Buckets + mem.Gathered + mem.Arena
			assert.Equal(t, live, mem.HostBytes+mem.DeviceBytes, "stage %d %s: host + device bytes", stage, devName(dev))
			if dev == "" {
				assert.Equal(t, tensor.CPU, mem.Device)
				assert.Zero(t, mem.DeviceBytes, "stage %d: device bytes on the CPU backend", stage)
			} else {
				assert.Equal(t, tensor.Sim(0), mem.Device)
				assert.Zero(t, mem.HostBytes, "stage %d: host bytes on the simulated device", stage)
			}
			if dev != "" {
				continue // the same layout: one table row per stage
			}
			fmt.Fprintf(&table, "%-6d %12d %12d %8.4f %10d %10d %10d %10d %10d\n", stage, got, want, ratio,
				mem.ParamBytes(), mem.Grads, mem.Master+mem.OptimizerState, mem.BucketsPeak, mem.GatheredPeak)
			assert.InDelta(t, 1, ratio, 0.05, "stage %d: model states %d bytes, formula %d", stage, got, want)
			if stage == 3 {
				assert.Positive(t, mem.GatheredPeak, "stage 3: gathered peak: want 0 < peak <= 2Ψ")
				assert.LessOrEqual(t, mem.GatheredPeak, 2*int64(psi), "stage 3: gathered peak: want 0 < peak <= 2Ψ")
			}
			assert.GreaterOrEqual(t, mem.Peak, got, "stage %d: peak below model states", stage)
		}
	}
	t.Log(table.String())
}
