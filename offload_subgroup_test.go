package deepgo_test

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/offload"
	"github.com/deepgo-ml/deepgo/zero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// memLog records rank 0's Memory() before a run's last (20th) step.
type memLog struct {
	mu sync.Mutex
	m  map[string]zero.Memory
}

// last is a run hook recording under key.
func (l *memLog) last(key string) func(int, *testmodel.MLP, *deepgo.Engine, int) {
	return func(rank int, _ *testmodel.MLP, e *deepgo.Engine, step int) {
		if rank == 0 && step == 19 {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.m == nil {
				l.m = map[string]zero.Memory{}
			}
			l.m[key] = e.Memory()
		}
	}
}

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
				mem := &memLog{}
				base.hook, off.hook = mem.last("ref"), mem.last("off")
				ref, err := train(t, base)
				require.NoError(t, err)
				got, err := train(t, off)
				require.NoError(t, err)
				require.Equal(t, ref.losses, got.losses, "losses")
				require.NoError(t, bitEqual(ref.params, got.params))

				r, o := mem.m["ref"], mem.m["off"]
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
// sub-groups (in memory, through NVMe, and offloaded to the host from the
// simulated device) resumes in an engine stepping
// its shard whole, and the other way round, bit-identically to an
// uninterrupted run.
func TestSubGroupCheckpointResume(t *testing.T) {
	z3 := `, "stage3_param_persistence_threshold": 20, "stage3_prefetch_bucket_size": 300`
	whole := run{stage: 3, world: 2, gas: 1, steps: ckptSteps}
	sub := whole
	sub.zeroExtra = z3 + `, "sub_group_size": 37`
	nvme := whole
	nvme.zeroExtra = z3 + `, "sub_group_size": 29, "offload_optimizer": {"device": "nvme", "nvme_path": "` + t.TempDir() + `", "buffer_count": 2, "pipeline_read": true}`
	cpuOff := whole // CPU optimizer offload on the simulated device, in sub-groups
	cpuOff.dev = "sim"
	cpuOff.zeroExtra = z3 + `, "sub_group_size": 41, "offload_optimizer": {"device": "cpu"}`
	ref, err := train(t, whole)
	require.NoError(t, err)
	for _, c := range []struct {
		name          string
		saver, loader run
	}{{"sub->whole", sub, whole}, {"whole->sub", whole, sub}, {"nvme->whole", nvme, whole}, {"whole->nvme", whole, nvme},
		{"sim-cpu-offload->whole", cpuOff, whole}, {"whole->sim-cpu-offload", whole, cpuOff}} {
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

// Optimizer offload on the simulated device: with device "cpu"
// (DeepSpeed's ZeRO-Offload) the fp32 master weights and optimizer state
// live in host memory and the step runs on the host; with "nvme"
// (ZeRO-Infinity) the same, the state swapped through files. Both runs are
// bit-identical to no offload on the device and on the CPU over 20 steps
// (stages 2 and 3, worlds 1 and 2, fp32 and bf16; stage 3 still gathers
// its parameters on the device). Memory() shows the master weights and the
// state on the host (or on disk), not on the device.
func TestOffloadOnSimIsExact(t *testing.T) {
	z3 := `, "stage3_param_persistence_threshold": 20, "stage3_prefetch_bucket_size": 300`
	for _, stage := range []int{2, 3} {
		for _, world := range []int{1, 2} {
			for _, prec := range []string{"", "bf16"} {
				base := run{stage: stage, world: world, gas: 2, steps: 20, precision: prec, zeroExtra: z3}
				t.Run(base.String(), func(t *testing.T) {
					mem := &memLog{}
					cpu, dev := base, base
					dev.dev, dev.hook = "sim", mem.last("dev")
					want, err := train(t, cpu)
					require.NoError(t, err)
					onDev, err := train(t, dev)
					require.NoError(t, err)
					require.NoError(t, bitEqual(want.params, onDev.params), "sim without offload against the CPU")
					d := mem.m["dev"]
					for _, to := range []string{"cpu", "nvme"} {
						off := base
						off.dev, off.hook = "sim+delay", mem.last(to)
						off.zeroExtra += `, "offload_optimizer": {"device": "` + to + `", "pin_memory": true, "nvme_path": "` + t.TempDir() + `", "pipeline_read": true}`
						if stage == 3 || to == "nvme" {
							off.zeroExtra += `, "sub_group_size": 50` // downloads overlap the host steps of earlier sub-groups
						}
						got, err := train(t, off)
						require.NoError(t, err, to)
						require.NoError(t, bitEqual(want.params, got.params), "sim with %s offload against the CPU", to)
						require.Equal(t, onDev.losses, got.losses, "%s: losses", to)

						o := mem.m[to]
						t.Logf("%s: no offload: host %d device %d (state %d, master %d); offload: host %d device %d (state %d, on disk %d, master %d)",
							to, d.HostBytes, d.DeviceBytes, d.OptimizerState, d.Master, o.HostBytes, o.DeviceBytes, o.OptimizerState, o.OptimizerStateOnDisk, o.Master)
						require.Positive(t, o.OptimizerState, to)
						assert.Equal(t, d.OptimizerState, o.OptimizerState, "%s: OptimizerState", to)
						if to == "nvme" {
							assert.Equal(t, o.OptimizerState, o.OptimizerStateOnDisk, "nvme: OptimizerStateOnDisk")
						}
						assert.GreaterOrEqual(t, o.HostBytes, o.OptimizerState-o.OptimizerStateOnDisk+o.SwapBuffers+o.Master, "%s: HostBytes holds the state (or its swap buffers) and the master weights", to)
						assert.LessOrEqual(t, o.DeviceBytes, d.DeviceBytes-d.OptimizerState-d.Master, "%s: DeviceBytes without the state and the master weights", to)
						notes := strings.Join(got.engines[0].Notes(), "\n")
						assert.Contains(t, notes, "offload_optimizer.device="+to+": the ", to)
						assert.Contains(t, notes, "the step runs on the CPU", to)
					}
				})
			}
		}
	}
}

// estimateTol is how far a run's model-state bytes per rank may be from
// zero.PlannedPlacement of the same parameter count, relative to the
// estimate: the estimate lays the model out as one flat unit, the engine
// pads each of its units to the world size, a few elements each (measured:
// at most 0.015% with the odd layer sizes below, 0 with even ones).
const estimateTol = 1e-3

// What "deepgo estimate --offload none|cpu|nvme" prints per rank (zero.
// PlannedPlacement for fp16 + Adam over the model's parameter count) agrees
// with what training measures on the simulated device, within estimateTol:
// host bytes (Memory().HostBytes), device bytes (DeviceBytes less the
// buffers the estimate leaves out: gradient buckets, gathered stage-3
// modules, the activation arena) and disk bytes (OptimizerStateOnDisk),
// stages 2 and 3, two ranks.
func TestEstimateOffloadMatchesMemory(t *testing.T) {
	const subGroup, buffers = 4999, 2
	sizes := []int{63, 255, 255, 15} // odd: units pad to the world size
	numel := 0
	counted := testmodel.NewMLP(1, sizes...)
	for _, mod := range counted.Modules() {
		for _, p := range mod.Params() {
			numel += p.Data.Numel()
		}
	}
	counted.FreeUndonated()
	for _, stage := range []int{2, 3} {
		for _, off := range []string{"none", "cpu", "nvme"} {
			t.Run(fmt.Sprintf("stage%d/%s", stage, off), func(t *testing.T) {
				const world = 2
				r := run{stage: stage, world: world, gas: 1, steps: 3, precision: "fp16", dev: "sim", sizes: sizes,
					zeroExtra: `, "stage3_param_persistence_threshold": 0, "sub_group_size": 4999`}
				switch off {
				case "cpu":
					r.zeroExtra += `, "offload_optimizer": {"device": "cpu"}`
				case "nvme":
					r.zeroExtra += fmt.Sprintf(`, "offload_optimizer": {"device": "nvme", "nvme_path": %q, "buffer_count": %d}`, t.TempDir(), buffers)
				}
				var m zero.Memory // rank 0's, before the last step: the state exists
				r.hook = func(rank int, _ *testmodel.MLP, e *deepgo.Engine, step int) {
					if rank == 0 && step == r.steps-1 {
						m = e.Memory()
					}
				}
				_, err := train(t, r)
				require.NoError(t, err)
				got := zero.Placement{Host: m.HostBytes, Device: m.DeviceBytes - m.Buckets - m.Gathered - m.Arena, Disk: m.OptimizerStateOnDisk}

				lay, err := zero.PlanBuckets([]zero.ModuleSpec{{Name: "model", Params: []zero.ParamSpec{{Name: "flat", Shape: []int{numel}}}}}, world, 2, 0)
				require.NoError(t, err)
				want, err := zero.PlannedPlacement(lay, stage, 2, 2, 2, off, subGroup, offload.PlanOptions{Buffers: buffers})
				require.NoError(t, err)
				t.Logf("estimate %+v, measured %+v", want, got)
				for _, c := range []struct {
					name      string
					want, got int64
				}{{"host", want.Host, got.Host}, {"device", want.Device, got.Device}, {"disk", want.Disk, got.Disk}} {
					assert.LessOrEqual(t, math.Abs(float64(c.got-c.want)), estimateTol*float64(c.want),
						"%s bytes: measured %d, estimated %d", c.name, c.got, c.want)
				}
			})
		}
	}
}
