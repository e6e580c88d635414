package deepgo_test

import (
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/zero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A model whose optimizer state does not fit a host-memory limit set for
// the test trains with NVMe offload stepping sub_group_size sub-groups:
// the host memory the state passes through (the store's swap buffers,
// their high-water mark) stays under the limit while the state itself is
// larger, Memory() counts the state on disk rather than in HostBytes, and
// training is bit-identical to no offload over 20 steps (stages 2 and 3,
// worlds 1 and 2; the sub-group size is odd so cuts fall inside units and
// off the kernels' vector width).
func TestOffloadNVMeSubGroupsBoundHostMemory(t *testing.T) {
	const limit = 256 << 10 // bytes of optimizer state the host may hold
	big := []int{64, 256, 256, 16}
	for _, stage := range []int{2, 3} {
		for _, world := range []int{1, 2} {
			t.Run(fmt.Sprintf("stage%d/world%d", stage, world), func(t *testing.T) {
				dir := t.TempDir()
				base := run{stage: stage, world: world, gas: 1, steps: 20, sizes: big}
				off := base
				off.zeroExtra = `, "stage3_param_persistence_threshold": 20, "sub_group_size": 4999` +
					`, "offload_optimizer": {"device": "nvme", "nvme_path": "` + dir + `", "buffer_count": 2, "pipeline_read": true, "pipeline_write": true}`
				var mu sync.Mutex
				mem := map[string]zero.Memory{}
				last := func(key string) func(int, *testmodel.MLP, *deepgo.Engine, int) {
					return func(rank int, _ *testmodel.MLP, e *deepgo.Engine, step int) {
						if rank == 0 && step == 19 {
							mu.Lock()
							mem[key] = e.Memory()
							mu.Unlock()
						}
					}
				}
				base.hook, off.hook = last("ref"), last("off")
				ref, err := train(t, base)
				require.NoError(t, err)
				got, err := train(t, off)
				require.NoError(t, err)
				require.Equal(t, ref.losses, got.losses, "losses")
				require.NoError(t, bitEqual(ref.params, got.params))

				r, o := mem["ref"], mem["off"]
				t.Logf("state %d B (in memory without offload: %d B); swap buffers %d B now, peak %d B; host bytes %d -> %d",
					o.OptimizerState, r.OptimizerState, o.SwapBuffers, o.SwapBuffersPeak, r.HostBytes, o.HostBytes)
				require.Greater(t, r.OptimizerState, int64(limit), "the test's state must not fit the limit")
				assert.Equal(t, r.OptimizerState, o.OptimizerState, "OptimizerState: the same state, wherever it lives")
				assert.Equal(t, o.OptimizerState, o.OptimizerStateOnDisk, "OptimizerStateOnDisk: all of it in swap files")
				assert.Positive(t, o.SwapBuffersPeak, "SwapBuffersPeak")
				assert.LessOrEqual(t, o.SwapBuffersPeak, int64(limit), "peak host memory of optimizer state")
				assert.Equal(t, r.HostBytes-r.OptimizerState+o.SwapBuffers, o.HostBytes, "HostBytes: the state replaced by the swap buffers")
				assert.Less(t, o.Peak, r.Peak, "Peak")
			})
		}
	}
}

// sub_group_size does not change the checkpoint: one stepped in
// sub-groups (in memory, and through NVMe) resumes in an engine stepping
// its shard whole, and the other way round, bit-identically to an
// uninterrupted run.
func TestSubGroupCheckpointResume(t *testing.T) {
	z3 := `, "stage3_param_persistence_threshold": 20, "stage3_prefetch_bucket_size": 300`
	whole := run{stage: 3, world: 2, gas: 1, steps: ckptSteps}
	sub := whole
	sub.zeroExtra = z3 + `, "sub_group_size": 37`
	nvme := whole
	nvme.zeroExtra = z3 + `, "sub_group_size": 29, "offload_optimizer": {"device": "nvme", "nvme_path": "` + t.TempDir() + `", "buffer_count": 2, "pipeline_read": true}`
	ref, err := train(t, whole)
	require.NoError(t, err)
	for _, c := range []struct {
		name          string
		saver, loader run
	}{{"sub->whole", sub, whole}, {"whole->sub", whole, sub}, {"nvme->whole", nvme, whole}, {"whole->nvme", whole, nvme}} {
		dir := t.TempDir()
		_, _, err := segment{r: c.saver, save: dir, from: 0, to: ckptAt}.train(t)
		require.NoError(t, err, c.name)
		got, _, err := segment{r: c.loader, load: dir, from: ckptAt, to: ckptSteps}.train(t)
		require.NoError(t, err, c.name)
		require.NoError(t, bitEqual(ref.params, got), c.name)
	}
	// the sub-grouped run itself matches the whole-shard one bit for bit
	got, err := train(t, sub)
	require.NoError(t, err)
	for name, want := range ref.params {
		for i := range want {
			require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got.params[name][i]), "%s[%d]", name, i)
		}
	}
}
