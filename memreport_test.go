package deepgo_test

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// memoryBreakdownLogs trains world ranks for nsteps optimizer steps of gas
// micro-steps on dev with cfgJSON and returns each rank's log.
func memoryBreakdownLogs(t *testing.T, dev, cfgJSON string, world, gas, nsteps int, manual bool) []string {
	t.Helper()
	data := testmodel.NewDataset(42, 64, sizes[0], sizes[len(sizes)-1])
	logs := make([]strings.Builder, world)
	err := worldFor(dev)(context.Background(), world, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
		cfg, err := config.Parse([]byte(cfgJSON))
		if err != nil {
			return err
		}
		e, err := initEngine(ctx, cfg, testmodel.NewMLP(1, sizes...), append(opts, deepgo.WithLog(&logs[c.Rank()]))...)
		if err != nil {
			return err
		}
		defer e.Close()
		for s := range nsteps {
			if _, err := trainStep(ctx, e, data.RankBatch(s, 4*gas*world, world, c.Rank(), gas), manual); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)
	out := make([]string, world)
	for r := range logs {
		out[r] = logs[r].String()
	}
	return out
}

// TestMemoryBreakdownLines: with memory_breakdown rank 0, and no other
// rank, prints DeepSpeed's see_memory_usage report at its engine's points
// (two at Initialize; before and after each micro-step's forward, backward
// and step, the step's after its wall_clock_breakdown lines), each the
// point's name, the MA/Max_MA/CA/Max_CA line and the CPU Virtual Memory
// line; without the key nobody prints one. On the CPU and on the
// simulated device, from TrainBatch and from a Forward, Backward, Step
// loop.
func TestMemoryBreakdownLines(t *testing.T) {
	ma := regexp.MustCompile(`^MA \d+\.\d+ GB {9}Max_MA \d+\.\d+ GB {9}CA \d+\.\d+ GB {9}Max_CA \d+ GB $`)
	vm := regexp.MustCompile(`^CPU Virtual Memory:  used = \d+\.\d+ GB, percent = \d+\.\d%$`)
	const world, gas, nsteps = 2, 2, 2
	cfg := `{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "zero_optimization": {"stage": 1},
		"optimizer": {"type": "AdamW", "params": {"lr": 0.01}}, "wall_clock_breakdown": true, "memory_breakdown": %v}`
	micro := []string{"Engine before forward", "Engine after forward", "Engine before backward", "Engine after backward", "Engine before step", "Engine after step"}
	for _, dev := range []string{"", "sim"} {
		for _, manual := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/manual=%v", devName(dev), manual), func(t *testing.T) {
				logs := memoryBreakdownLogs(t, dev, fmt.Sprintf(cfg, true), world, gas, nsteps, manual)
				want := []string{"DeepSpeed Engine: After args sanity test", "DeepSpeed Engine: Before configure distributed model"}
				for range nsteps * gas {
					want = append(want, micro...)
				}
				var got []string
				lines := strings.Split(strings.TrimSuffix(logs[0], "\n"), "\n")
				for i := 0; i < len(lines); i++ {
					if strings.HasPrefix(lines[i], "[Rank 0] ") { // timer and progress lines
						continue
					}
					got = append(got, lines[i])
					require.Less(t, i+2, len(lines), "%q ends the log", lines[i])
					assert.Regexp(t, ma, lines[i+1], "after %q", lines[i])
					assert.Regexp(t, vm, lines[i+2], "after %q", lines[i])
					i += 2
				}
				assert.Equal(t, want, got, "rank 0's reports in order:\n%s", logs[0])
				assert.Contains(t, logs[0], "| step: ", "the timer lines are printed too")
				last := strings.LastIndex(logs[0], "Engine after step")
				assert.Greater(t, last, strings.LastIndex(logs[0], "[Rank 0] time (ms) | fwd: "), "the step's report follows its global timer line")
				assert.NotContains(t, logs[0], "mem_allocated", "DeepSpeed 0.19.8's timers.log drops its memory suffix")
				assert.Empty(t, logs[1], "rank 1 prints nothing")

				off := memoryBreakdownLogs(t, dev, fmt.Sprintf(cfg, false), world, gas, 1, manual)
				assert.NotContains(t, off[0], "Engine before")
				assert.NotContains(t, off[0], "MA ")
				assert.Contains(t, off[0], "time (ms)")
			})
		}
	}
}

// TestMemoryBreakdownBitIdentical: printing the reports changes nothing
// the run computes: losses, loss scales and parameters are bit-identical
// with and without memory_breakdown, on the CPU and the simulated device,
// stage 1 and 3 (stage 3's gathers run between the reports), fp16 with an
// overflow.
func TestMemoryBreakdownBitIdentical(t *testing.T) {
	for _, dev := range []string{"", "sim+delay"} {
		for _, r := range []run{{stage: 1, world: 2, gas: 2, steps: 4}, {stage: 3, world: 2, gas: 1, precision: "fp16", steps: 4}} {
			r.dev = dev
			r.opts = []deepgo.Option{deepgo.WithLog(io.Discard)}
			t.Run(devName(dev)+"/"+r.String(), func(t *testing.T) {
				want, err := train(t, r)
				require.NoError(t, err)
				r.extra += `, "memory_breakdown": true`
				got, err := train(t, r)
				require.NoError(t, err)
				bitEqualRuns(t, want, got)
			})
		}
	}
}
