package deepgo_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/zero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pin_memory on a device backend: CPU offload's gradient chunk and half
// weights (offload_optimizer) and the parameter partitions (offload_param)
// come from the device backend's HostEmpty, and Memory().Pinned counts
// them; with pin_memory false none do. Either way training is
// bit-identical to the CPU backend without offload (stage 3 with both
// offloads, stage 2 with the optimizer's, fp32 and bf16, under the
// simulated device's delays), and Notes say which.
func TestPinMemoryOnSim(t *testing.T) {
	const steps = 4
	z3 := `, "stage3_param_persistence_threshold": 20, "stage3_prefetch_bucket_size": 300`
	for _, stage := range []int{2, 3} {
		for _, prec := range []string{"", "bf16"} {
			base := run{stage: stage, world: 2, gas: 2, steps: steps, precision: prec, zeroExtra: z3}
			want, err := train(t, base)
			require.NoError(t, err)
			for _, pin := range []bool{true, false} {
				t.Run(fmt.Sprintf("%v/pin=%v", base, pin), func(t *testing.T) {
					var mu sync.Mutex
					var mem zero.Memory
					off := base
					off.dev = "sim+delay"
					off.hook = func(rank int, _ *testmodel.MLP, e *deepgo.Engine, step int) {
						if rank == 0 && step == steps-1 {
							mu.Lock()
							mem = e.Memory()
							mu.Unlock()
						}
					}
					off.zeroExtra += fmt.Sprintf(`, "offload_optimizer": {"device": "cpu", "pin_memory": %v}`, pin)
					if stage == 3 {
						off.zeroExtra += fmt.Sprintf(`, "offload_param": {"device": "cpu", "pin_memory": %v}`, pin)
					}
					got, err := train(t, off)
					require.NoError(t, err)
					bitEqualRuns(t, want, got)
					require.NoError(t, bitEqual(want.params, got.params))
					notes := strings.Join(got.engines[0].Notes(), "\n")
					if !pin {
						assert.Zero(t, mem.Pinned)
						assert.Contains(t, notes, "pin_memory false: the host buffers are the C allocator's")
						return
					}
					// the gradient chunk (fp32 accumulation), the half
					// weights under bf16, and stage 3's partitions
					assert.Positive(t, mem.Pinned)
					assert.LessOrEqual(t, mem.Pinned, mem.HostBytes)
					if stage == 3 {
						assert.Greater(t, mem.Pinned, mem.ParamStoreHost, "partitions and offload buffers")
					}
					assert.Contains(t, notes, "offload_optimizer.device=cpu: ")
					assert.Contains(t, notes, "pin_memory: the host buffers the copies use come from the sim:0 backend's HostEmpty")
					assert.NotContains(t, notes, "pin_memory false")
				})
			}
		}
	}
}
