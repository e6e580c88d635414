package main

import (
	"bytes"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo/nn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTrainMoE: `deepgo train --model tiny --moe-experts 4 --moe-k 2`
// trains (from ln 16 = 2.77 to within 60% of the entropy floor, the aux
// loss of ~0.1 included),
// prints the MoE banner and each print step's l_aux and expert counts, and
// ends at the same loss on sim as on the cpu.
func TestTrainMoE(t *testing.T) {
	final := map[string]float64{}
	for _, dev := range []string{"cpu", "sim"} {
		var out, errb bytes.Buffer
		code := run([]string{"train", "--config", "../../configs/demo-zero2.json", "--model", "tiny", "--steps", "60",
			"--moe-experts", "4", "--moe-k", "2", "--device", dev}, &out, &errb)
		require.Zero(t, code, errb.String())
		s := out.String()
		assert.Contains(t, s, "mixture of experts: 4 experts, top-2, in 1 of 1 blocks")
		assert.Contains(t, s, "step 60 moe layer 0: l_aux ")
		assert.Contains(t, s, "exp_counts [")
		lines := strings.Split(strings.TrimSpace(s), "\n")
		var res trainResult
		require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &res))
		require.NotNil(t, res.EntropyFloor)
		assert.Less(t, res.FinalLoss, 1.6**res.EntropyFloor, "final loss %.4f vs floor %.4f\n%s", res.FinalLoss, *res.EntropyFloor, s)
		final[dev] = res.FinalLoss
	}
	assert.Equal(t, final["cpu"], final["sim"], "final loss: cpu vs sim")
}

// TestTrainMoEResidual: --moe-use-residual (PR-MoE) trains too.
func TestTrainMoEResidual(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"train", "--config", "../../configs/demo-zero2.json", "--model", "tiny", "--steps", "60",
		"--moe-experts", "2", "--moe-use-residual"}, &out, &errb)
	require.Zero(t, code, errb.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var res trainResult
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &res))
	require.NotNil(t, res.EntropyFloor)
	assert.Less(t, res.FinalLoss, 1.6**res.EntropyFloor, "final loss %.4f vs floor %.4f", res.FinalLoss, *res.EntropyFloor)
}

// TestTrainMoERefused: what MoE does not support is a usage error naming
// the flag, or an error naming the config's parallelism.
func TestTrainMoERefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--moe-experts", "4", "--moe-expert-parallel-size", "2"}, 2, "not supported: expert parallelism (ep_size 2 > 1)"},
		{[]string{"--moe-k", "2"}, 2, "--moe-* flags given without --moe-experts"},
		{[]string{"--moe-experts", "4", "--moe-k", "3"}, 2, "moe.k 3"},
		{[]string{"--moe-experts", "4", "--moe-expert-interval", "0"}, 2, "--moe-expert-interval 0"},
	} {
		var out, errb bytes.Buffer
		code := run(append([]string{"train", "--config", "../../configs/demo-zero2.json", "--model", "tiny", "--steps", "1"}, c.args...), &out, &errb)
		assert.Equal(t, c.code, code, "%v", c.args)
		assert.Contains(t, errb.String(), c.want, "%v", c.args)
	}
	cfg := writeConfig(t, `{"train_micro_batch_size_per_gpu": 8, "tensor_model_parallel_size": 2, "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}}`)
	var out, errb bytes.Buffer
	code := run([]string{"train", "--config", cfg, "--model", "tiny", "--steps", "1", "--moe-experts", "2"}, &out, &errb)
	assert.Equal(t, 1, code)
	assert.Contains(t, errb.String(), "--moe-experts 2 with tensor_model_parallel_size 2: not supported")
}

// TestTrainMoEResumes: an MoE run (k 2, ZeRO 2, 2 ranks) stopped at step
// 10 resumes from its checkpoint (the experts and gate saved by name like
// any parameter) and ends exactly where an uninterrupted run ends.
func TestTrainMoEResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("three training runs")
	}
	dir := t.TempDir()
	args := trainerArgs{microBatch: 4, lr: 0.01, moe: nn.MoEConfig{Experts: 4, K: 2, CapacityFactor: 1, EvalCapacityFactor: 1,
		MinCapacity: 4, DropTokens: true, LossCoeff: 0.1, EveryN: 1}}
	whole, err := train(resumeConfig(t, filepath.Join(dir, "a"), 2), "", "tiny", 2, 20, args, io.Discard, io.Discard)
	require.NoError(t, err)
	b := resumeConfig(t, filepath.Join(dir, "b"), 2)
	_, err = train(b, "", "tiny", 2, 10, args, io.Discard, io.Discard)
	require.NoError(t, err)
	resumed, err := train(b, "", "tiny", 2, 20, args, io.Discard, io.Discard)
	require.NoError(t, err)
	require.Equal(t, whole.FinalLoss, resumed.FinalLoss, "final loss after resuming vs uninterrupted")
}

// TestTrainMoEFreeze: --freeze matches the experts' names too (the model
// it counts is the one with MoE layers), and the frozen experts keep
// their values: after 1 and after 4 steps they are the same bits, while
// the trainable experts move.
func TestTrainMoEFreeze(t *testing.T) {
	dir := t.TempDir()
	export := func(steps string) map[string][]byte {
		out := filepath.Join(dir, "export"+steps)
		var o, errb bytes.Buffer
		code := run([]string{"train", "--config", "../../configs/demo-zero2.json", "--model", "tiny", "--steps", steps,
			"--moe-experts", "4", "--moe-k", "2", "--freeze", `deepspeed_experts\.[01]\.`, "--save-model", out}, &o, &errb)
		require.Zero(t, code, errb.String())
		assert.Contains(t, errb.String(), `8 parameters frozen`)
		_, vals := readTensors(t, filepath.Join(out, "model.safetensors"))
		return vals
	}
	one, four := export("1"), export("4")
	frozen := 0
	for name, v := range one {
		if strings.Contains(name, "deepspeed_experts.0.") || strings.Contains(name, "deepspeed_experts.1.") {
			frozen++
			assert.True(t, bytes.Equal(v, four[name]), "frozen %s moved", name)
		} else if strings.Contains(name, "deepspeed_experts.") {
			assert.False(t, bytes.Equal(v, four[name]), "trainable %s did not move", name)
		}
	}
	assert.Equal(t, 8, frozen)
}
