package deepgo_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/deepgo-ml/deepgo/zero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// z3Defaults are run.config's stage-3 members, which a zeroExtra replaces.
const z3Defaults = `, "stage3_param_persistence_threshold": 20, "stage3_prefetch_bucket_size": 300`

// withHPZ is r with zero_hpz_partition_size h added to its stage-3 members.
func withHPZ(r run, h int) run {
	z := r.zeroExtra
	if z == "" {
		z = z3Defaults
	}
	r.zeroExtra = z + fmt.Sprintf(`, "zero_hpz_partition_size": %d`, h)
	return r
}

// hpzUse is a run hook keeping rank 0's Stage3Stats and Memory.
type hpzUse struct {
	mu    sync.Mutex
	stats zero.CoordinatorStats
	mem   zero.Memory
}

func (u *hpzUse) hook(next func(int, *testmodel.MLP, *deepgo.Engine, int)) func(int, *testmodel.MLP, *deepgo.Engine, int) {
	return func(rank int, m *testmodel.MLP, e *deepgo.Engine, step int) {
		if next != nil {
			next(rank, m, e, step)
		}
		if rank == 0 {
			u.mu.Lock()
			u.stats, u.mem = e.Stage3Stats(), e.Memory()
			u.mu.Unlock()
		}
	}
}

// TestStage3HPZEquivalence: ZeRO++ hpZ (zero_hpz_partition_size 2, and 4
// = the world) on 4 ranks is bit-identical to plain stage 3 (losses, loss
// scales, skipped steps, parameters) with gradient accumulation, in fp32,
// fp16 with overflowing steps and bf16 (the stage-3 cases of the device
// table), on the CPU backend and the simulated device with and without
// delays; and fp32 on the CPU matches plainTrain as plain stage 3 does.
// Each hpZ run must have gathered from secondary partitions and hold them.
func TestStage3HPZEquivalence(t *testing.T) {
	for _, dev := range []string{"", "sim", "sim+delay"} {
		for _, base := range hpzCases(t) {
			base.dev = dev
			t.Run(base.String(), func(t *testing.T) {
				want, err := train(t, base)
				require.NoError(t, err)
				for _, h := range []int{2, 4} {
					var use hpzUse
					r := withHPZ(base, h)
					r.hook = use.hook(base.hook)
					got, err := train(t, r)
					require.NoError(t, err, "hpZ %d", h)
					bitEqualRuns(t, want, got)
					assert.Positive(t, use.stats.SecondaryGathers, "hpZ %d: gathers from secondary partitions", h)
					assert.Less(t, use.stats.SecondaryGathers, use.stats.Gathers, "hpZ %d: the first gather after a step is the world's", h)
					el := use.mem.Secondary / int64(modelDTypeSize(base.precision))
					assert.Equal(t, use.stats.SecondaryNumel, el, "hpZ %d: Memory().Secondary", h)
					assert.Equal(t, int64(72+272+144)/int64(h), el, "hpZ %d: secondary elements (units of 144, 272 and 68 padded to 72)", h)
				}
			})
		}
	}
	t.Run("plain", func(t *testing.T) {
		want := plainReference(t, 0)
		plain, err := train(t, run{stage: 3, world: 4, gas: 4})
		require.NoError(t, err)
		for _, h := range []int{2, 4} {
			got, err := train(t, withHPZ(run{stage: 3, world: 4, gas: 4}, h))
			require.NoError(t, err)
			bitEqualRuns(t, plain, got)
			compareRuns(t, fmt.Sprintf("hpZ %d vs plain", h), want, got, plainLossTol, plainParamTol)
		}
	})
}

// hpzCases are the stage-3 cases of the device table on 4 ranks with
// gradient accumulation: fp32, fp16 with overflowing steps, bf16, bf16
// master weights.
func hpzCases(t *testing.T) []run {
	var cases []run
	for _, r := range deviceCases([]int{4}, []int{4}) {
		if r.stage == 3 && r.freeze == "" { // the secondary sizes below are the unfrozen model's
			r.world, r.gas = 4, max(r.gas, 2)
			cases = append(cases, r)
		}
	}
	require.Len(t, cases, 4, "stage-3 device cases")
	return cases
}

// modelDTypeSize is the element size of a run's model dtype: fp32, or a
// 2-byte half.
func modelDTypeSize(precision string) int {
	if precision == "" {
		return tensor.Float32.Size()
	}
	return tensor.BFloat16.Size()
}

// gatherCount is a comm counting all-gathers per group name, the groups
// Split makes included.
type gatherCount struct {
	comm.Comm
	mu *sync.Mutex
	n  map[string]int
}

func (c *gatherCount) add() {
	c.mu.Lock()
	c.n[c.Name()]++
	c.mu.Unlock()
}

func (c *gatherCount) AllGather(ctx context.Context, dst, src *tensor.Tensor) error {
	c.add()
	return c.Comm.AllGather(ctx, dst, src)
}

func (c *gatherCount) AllGatherAsync(ctx context.Context, dst, src *tensor.Tensor) comm.Work {
	c.add()
	return c.Comm.AllGatherAsync(ctx, dst, src)
}

func (c *gatherCount) Split(ctx context.Context, color, key int, name string) (comm.Comm, error) {
	s, err := c.Comm.Split(ctx, color, key, name)
	if err != nil || s == nil {
		return s, err
	}
	return &gatherCount{Comm: s, mu: c.mu, n: c.n}, nil
}

// TestStage3HPZGathersOnSubgroup: with hpZ the stage-3 gathers after the
// first one of each module in a step run on the hpZ group and no longer
// on the world: counted at the comm, rank 0's world all-gathers drop by
// exactly the gathers the hpZ group serves, which Stage3Stats reports,
// and each module is gathered over the world once per step.
func TestStage3HPZGathersOnSubgroup(t *testing.T) {
	const steps, modules = 3, 3
	// no prefetch, persistence nor reuse: the gathers are the same in both runs
	z := `, "stage3_param_persistence_threshold": 0, "stage3_prefetch_bucket_size": 0, "stage3_max_reuse_distance": 0`
	count := func(h int) (map[string]int, zero.CoordinatorStats) {
		var mu sync.Mutex
		n := map[string]int{}
		var stats zero.CoordinatorStats
		r := withHPZ(run{stage: 3, world: 4, gas: 4, steps: steps, zeroExtra: z}, h)
		r.wrap = func(c comm.Comm) comm.Comm {
			if c.Rank() != 0 {
				return c
			}
			return &gatherCount{Comm: c, mu: &mu, n: n}
		}
		r.after = func(_ context.Context, rank int, e *deepgo.Engine) error {
			if rank == 0 {
				mu.Lock()
				defer mu.Unlock()
				stats = e.Stage3Stats()
				n = maps.Clone(n) // Parameters' gathers come after
			}
			return nil
		}
		_, err := train(t, r)
		require.NoError(t, err, "hpZ %d", h)
		mu.Lock()
		defer mu.Unlock()
		return n, stats
	}
	plain, plainStats := count(1)
	require.Len(t, plain, 1, "groups without hpZ: %v", plain)
	require.Zero(t, plainStats.SecondaryGathers)
	for _, h := range []int{2, 4} {
		got, stats := count(h)
		t.Logf("hpZ %d: all-gathers by group %v; stats %+v", h, got, stats)
		var world string
		for name := range plain {
			world = name
		}
		sub := 0
		for name, k := range got {
			if name != world {
				require.True(t, strings.Contains(name, "hpz"), "group %q", name)
				sub += k
			}
		}
		assert.Equal(t, stats.SecondaryGathers, sub, "hpZ %d: hpZ-group all-gathers", h)
		assert.Positive(t, sub, "hpZ %d: hpZ-group all-gathers", h)
		assert.Equal(t, plain[world]-sub, got[world], "hpZ %d: world all-gathers", h)
		assert.Equal(t, plainStats.Gathers, stats.Gathers, "hpZ %d: stage-3 gathers", h)
		assert.Equal(t, steps*modules, stats.Gathers-stats.SecondaryGathers, "hpZ %d: world gathers of modules: once per module and step", h)
	}
}

// TestStage3HPZCheckpoint: checkpoints hold primary partitions only, so a
// stage-3 checkpoint saved with hpZ resumes without it and the other way
// round, bit-identical to an uninterrupted run without hpZ.
func TestStage3HPZCheckpoint(t *testing.T) {
	plain := run{stage: 3, world: 4, gas: 2, steps: ckptSteps}
	ref, err := train(t, plain)
	require.NoError(t, err)
	for _, c := range []struct{ from, to int }{{2, 1}, {1, 2}, {2, 4}} {
		saver, loader := plain, plain
		if c.from > 1 {
			saver = withHPZ(plain, c.from)
		}
		if c.to > 1 {
			loader = withHPZ(plain, c.to)
		}
		name := fmt.Sprintf("hpZ %d -> %d", c.from, c.to)
		dir := t.TempDir()
		_, _, err := segment{r: saver, save: dir, from: 0, to: ckptAt}.train(t)
		require.NoError(t, err, name)
		got, _, err := segment{r: loader, load: dir, from: ckptAt, to: ckptSteps}.train(t)
		require.NoError(t, err, name)
		require.NoError(t, bitEqual(ref.params, got), name)
	}
	// a load into an engine whose secondaries are current (evaluations
	// after its last step filled and read them) must not gather from them
	dir := t.TempDir()
	_, _, err = segment{r: plain, save: dir, from: 0, to: ckptAt}.train(t)
	require.NoError(t, err)
	data := testmodel.NewDataset(42, 64, sizes[0], sizes[len(sizes)-1])
	prepare := func(ctx context.Context, rank int, e *deepgo.Engine) error {
		for st := range ckptSteps {
			if _, err := e.TrainBatch(ctx, data.RankBatch(st, globalBatch, plain.world, rank, plain.gas)); err != nil {
				return err
			}
		}
		before := e.Stage3Stats().SecondaryGathers
		for range 2 { // the first gathers over the world and fills the secondaries, the second reads them
			if _, err := e.EvalBatch(ctx, data.RankBatch(0, globalBatch, plain.world, rank, plain.gas)); err != nil {
				return err
			}
		}
		if e.Stage3Stats().SecondaryGathers == before {
			return fmt.Errorf("rank %d: the evaluation gathered nothing from secondary partitions", rank)
		}
		return nil
	}
	got, _, err := segment{r: withHPZ(plain, 2), load: dir, from: ckptAt, to: ckptSteps, prepare: prepare}.train(t)
	require.NoError(t, err, "load into a trained hpZ engine")
	require.NoError(t, bitEqual(ref.params, got), "load into a trained hpZ engine")
}

// TestStage3HPZRefusesOffloadParam: hpZ with offload_param is refused by
// Initialize, naming both keys.
func TestStage3HPZRefusesOffloadParam(t *testing.T) {
	r := run{stage: 3, world: 2, gas: 1, steps: 1, zeroExtra: z3Defaults + `, "offload_param": {"device": "cpu"}`}
	_, err := train(t, withHPZ(r, 2))
	require.Error(t, err)
	assert.ErrorContains(t, err, "zero_optimization.zero_hpz_partition_size 2 (ZeRO++ hpZ) with zero_optimization.offload_param.device \"cpu\": not supported")
}

// TestStage3HPZModelParallel: under tensor parallelism (TP 2 × DP 4, the
// GPT) hpZ groups consecutive data-parallel ranks of one tensor-parallel
// rank: the run is bit-identical to plain stage 3, on the CPU and on the
// simulated device with delays.
func TestStage3HPZModelParallel(t *testing.T) {
	const steps = 3
	// no module persistent and none held from forward to backward: the
	// backward gathers read the secondaries
	plain := parDevCase{tp: 2, dp: 4, stage: 3, zextra: `, "stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": 0`}
	hpz := plain
	hpz.zextra += `, "zero_hpz_partition_size": 2`
	for _, dev := range []string{"", "sim+delay"} {
		want, err := parDevRun(t, dev, plain, steps)
		require.NoError(t, err, "plain on %s", devName(dev))
		got, err := parDevRun(t, dev, hpz, steps)
		require.NoError(t, err, "hpZ on %s", devName(dev))
		bitEqualRuns(t, want, got)
	}
}

// TestZeroPPNotesAllPersistent: hpZ and qwZ on a model whose every module
// stays gathered (stage3_param_persistence_threshold above them all) say
// so in the engine's notes, which deepgo train prints; with modules
// gathered on demand they say nothing.
func TestZeroPPNotesAllPersistent(t *testing.T) {
	for _, c := range []struct {
		threshold int
		want      bool
	}{{100000, true}, {20, false}} {
		var notes []string
		r := run{stage: 3, world: 2, gas: 1, precision: "bf16", steps: 1,
			zeroExtra: fmt.Sprintf(`, "zero_hpz_partition_size": 2, "zero_quantized_weights": true, "stage3_param_persistence_threshold": %d`, c.threshold),
			after: func(_ context.Context, rank int, e *deepgo.Engine) error {
				if rank == 0 {
					notes = e.Notes()
				}
				return nil
			}}
		_, err := train(t, r)
		require.NoError(t, err)
		joined := strings.Join(notes, "\n")
		for _, key := range []string{"zero_hpz_partition_size: no effect: every module with parameters is persistent", "zero_quantized_weights: every module with parameters is persistent"} {
			if c.want {
				assert.Contains(t, joined, key, "threshold %d", c.threshold)
			} else {
				assert.NotContains(t, joined, key, "threshold %d", c.threshold)
			}
		}
	}
}
