package deepgo_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Frozen-parameter sets of the test MLP (fc1, fc2, fc3): a weight with its
// bias trainable and a bias with its weight trainable (a module half
// frozen), and a whole module (no trainable parameter left in it: no ZeRO
// unit at stage 3).
const (
	freezeMixed  = `^(fc1\.weight|fc3\.bias)$`
	freezeModule = `^fc2\.`
)

// plainFrozen is plainTrainFrozen in fp32, cached.
func plainFrozen(t *testing.T, clip float64, freeze string) *result {
	return plainFrozenIn(t, clip, freeze, tensor.Float32)
}

// plainFrozenIn is plainTrainFrozen with the frozen values rounded to dt,
// cached.
func plainFrozenIn(t *testing.T, clip float64, freeze string, dt tensor.DType) *result {
	r := run{clip: clip}
	return cached(t, fmt.Sprintf("plain clip %g freeze %s %v", r.maxNorm(), freeze, dt), func() (*result, error) {
		return plainTrainFrozen(steps, r.maxNorm(), freeze, dt, nil)
	})
}

// frozenRun is train(r) that also checks every frozen parameter bit for
// bit against its value right after Initialize (the working dtype widened
// to float32): the engine never changes it.
func frozenRun(t *testing.T, r run) *result {
	t.Helper()
	re := regexp.MustCompile(r.freeze)
	var initial map[string][]float32
	hook := r.hook
	r.hook = func(rank int, m *testmodel.MLP, e *deepgo.Engine, step int) {
		if step == 0 {
			p, err := e.Parameters(context.Background())
			require.NoError(t, err)
			if rank == 0 {
				initial = p
			}
		}
		if hook != nil {
			hook(rank, m, e, step)
		}
	}
	got, err := train(t, r)
	require.NoError(t, err)
	n := 0
	for name, v := range got.params {
		if re.MatchString(name) {
			n++
			require.Equal(t, initial[name], v, "%s: frozen %s changed", r, name)
		}
	}
	require.NotZero(t, n, "no parameter matched %s", r.freeze)
	return got
}

// TestFrozenEquivalence: with parameters frozen, every ZeRO stage on 1, 2
// and 4 ranks (CPU offload of the optimizer at stages 1-3, of the
// parameters at stage 3) matches plainTrainFrozen, a loop with no engine
// whose clipping and AdamW (weight decay included) see only the trainable
// parameters, within plainLossTol and plainParamTol, with gradient_clipping
// lowClip and 0.01 (every step clipped: the norm is the trainable
// parameters' alone, or every update would differ by the ratio), and the
// frozen parameters keep their initial bits.
func TestFrozenEquivalence(t *testing.T) {
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-70s %12s %12s\n", "case", "loss/plain", "param/plain")
	for _, freeze := range []string{freezeMixed, freezeModule} {
		for _, clip := range []float64{lowClip, 0.01} {
			want := plainFrozen(t, clip, freeze)
			for _, stage := range []int{0, 1, 2, 3} {
				for _, world := range []int{1, 2, 4} {
					if world == 4 && clip != lowClip {
						continue
					}
					r := run{stage: stage, world: world, gas: 2, clip: clip, freeze: freeze}
					if world == 2 && stage > 0 {
						r.zeroExtra = `, "offload_optimizer": {"device": "cpu"}` + offloadParam(stage)
					}
					t.Run(r.String(), func(t *testing.T) {
						got := frozenRun(t, r)
						lp, pp := compareRuns(t, "vs plain", want, got, plainLossTol, plainParamTol)
						fmt.Fprintf(&table, "%-70s %12.2e %12.2e\n", r, lp, pp)
					})
				}
			}
		}
	}
	t.Log(table.String())
}

// TestFrozenOffload: with frozen parameters, NVMe offload of the optimizer
// state (stages 1-3) and of the stage-3 parameters (swap files under
// nvme_path), and CPU offload on the simulated device (where it moves the
// master weights and the step to the host), match plainTrainFrozen like
// TestFrozenEquivalence's runs.
func TestFrozenOffload(t *testing.T) {
	want := plainFrozen(t, lowClip, freezeMixed)
	for _, stage := range []int{1, 2, 3} {
		dir := t.TempDir()
		nvme := run{stage: stage, world: 2, gas: 2, clip: lowClip, freeze: freezeMixed,
			zeroExtra: `, "offload_optimizer": {"device": "nvme", "nvme_path": "` + dir + `", "buffer_count": 2}`}
		if stage == 3 {
			nvme.zeroExtra += `, "stage3_param_persistence_threshold": 20, "offload_param": {"device": "nvme", "nvme_path": "` + dir + `", "buffer_count": 2, "buffer_size": 1024, "max_in_cpu": 0}`
		}
		cpu := run{stage: stage, world: 2, gas: 2, clip: lowClip, freeze: freezeMixed, dev: "sim+delay",
			zeroExtra: `, "offload_optimizer": {"device": "cpu"}` + offloadParam(stage)}
		for i, r := range []run{nvme, cpu} {
			t.Run(r.String()+"/offload="+[]string{"nvme", "cpu"}[i], func(t *testing.T) {
				compareRuns(t, "vs plain", want, frozenRun(t, r), plainLossTol, plainParamTol)
			})
		}
	}
}

// offloadParam is an offload_param section for stage 3 ("" otherwise).
func offloadParam(stage int) string {
	if stage != 3 {
		return ""
	}
	return `, "offload_param": {"device": "cpu"}, "stage3_param_persistence_threshold": 20, "stage3_prefetch_bucket_size": 300`
}

// TestFrozenMatters: freezing changes the training (the plain loop with a
// frozen set differs from the one without by far more than the
// tolerances), so TestFrozenEquivalence could not pass by ignoring
// Frozen.
func TestFrozenMatters(t *testing.T) {
	all := plainReference(t, lowClip)
	for _, freeze := range []string{freezeMixed, freezeModule} {
		got := plainFrozen(t, lowClip, freeze)
		d, _ := relDiff(all.params, got.params)
		assert.Greater(t, d, 100*plainParamTol, "freeze %s", freeze)
	}
}

// TestFrozenNormMatters: at gradient_clipping 0.01 (every step clipped) a
// norm that also counted the frozen parameters' gradients would move the
// trained parameters far beyond plainParamTol, so TestFrozenEquivalence's
// clip 0.01 rows check that the engine's norm covers the trainable
// parameters alone.
func TestFrozenNormMatters(t *testing.T) {
	for _, freeze := range []string{freezeMixed, freezeModule} {
		want := plainFrozen(t, 0.01, freeze)
		wrong, err := plainTrainNorm(steps, 0.01, freeze, tensor.Float32, true, nil)
		require.NoError(t, err)
		d, where := relDiff(want.params, wrong.params)
		assert.Greater(t, d, 100*plainParamTol, "freeze %s: at %s", freeze, where)
		t.Logf("freeze %s: a norm with the frozen gradients moves the parameters by %.2e (at %s)", freeze, d, where)
	}
}

// TestFrozenMixedPrecision: fp16 and bf16 with frozen parameters (kept in
// the working dtype, never updated) track plainTrainFrozen, the loop's
// frozen values rounded to the format as the engine keeps them. Measured
// on the CPU: bf16 within TestMixedPrecision's 1e-2; fp16 up to 9.5e-4
// (fc2.bias; about 2 fp16 roundoffs, where freezing fc2.weight instead
// gives 3e-5: the trajectory decides), so fp16's tolerance here is 2e-3.
func TestFrozenMixedPrecision(t *testing.T) {
	tol := map[string]float64{"fp16": 2e-3, "bf16": 1e-2}
	dts := map[string]tensor.DType{"fp16": tensor.Float16, "bf16": tensor.BFloat16}
	for _, prec := range []string{"fp16", "bf16"} {
		want := plainFrozenIn(t, lowClip, freezeMixed, dts[prec])
		for _, stage := range []int{0, 1, 2, 3} {
			r := run{stage: stage, world: 2, gas: 1, precision: prec, clip: lowClip, freeze: freezeMixed}
			t.Run(r.String(), func(t *testing.T) {
				got := frozenRun(t, r)
				compareRuns(t, "vs plain", want, got, tol[prec], tol[prec])
			})
		}
	}
}

// TestFrozenRefusals: a model whose every parameter is frozen has nothing
// to train.
func TestFrozenRefusals(t *testing.T) {
	r := run{stage: 1, world: 1, gas: 1, freeze: `.`}
	_, err := train(t, r)
	require.ErrorContains(t, err, "every parameter is frozen")
	require.ErrorContains(t, err, "nothing to train")
}

// TestFrozenMemory: Memory counts the frozen parameters once, whole, in
// the working dtype (Frozen), and the ZeRO categories hold only the
// trainable ones.
func TestFrozenMemory(t *testing.T) {
	ctx := context.Background()
	for _, stage := range []int{1, 3} {
		cfg, err := config.Parse([]byte(fmt.Sprintf(`{"train_batch_size": 16, "bf16": {"enabled": true},
			"optimizer": {"type": "AdamW", "params": {"lr": 0.002}}, "zero_optimization": {"stage": %d}}`, stage)))
		require.NoError(t, err)
		plain := testmodel.NewMLP(1, sizes...)
		e0, err := initEngine(ctx, cfg, plain)
		require.NoError(t, err)
		m0 := e0.Memory()
		require.NoError(t, e0.Close())
		m := testmodel.NewMLP(1, sizes...)
		freezeMLP(m, freezeModule) // fc2: 16x16 + 16
		e, err := initEngine(ctx, cfg, m)
		require.NoError(t, err)
		got := e.Memory()
		require.NoError(t, e.Close())
		frozen := int64(16*16+16) * 2
		assert.Equal(t, frozen, got.Frozen, "stage %d", stage)
		assert.Zero(t, m0.Frozen)
		assert.Equal(t, m0.Master-frozen*2, got.Master, "stage %d: no fp32 master for the frozen", stage)
		assert.Less(t, got.Grads, m0.Grads, "stage %d: no gradient buffer for the frozen", stage)
		assert.Less(t, got.ParamBytes(), m0.ParamBytes(), "stage %d: the frozen are outside ZeRO's parameters", stage)
		assert.Equal(t, got.ParamBytes()+frozen+got.Grads+got.Master+got.OptimizerState+got.Secondary, got.ModelStates(), "stage %d", stage)
	}
}
