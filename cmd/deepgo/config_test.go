package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRunConfig(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(good, []byte("// hjson\ntrain_micro_batch_size_per_gpu: 4\nzero_optimization: {stage: 2, cpu_offload: true}\nzero_optimizaton: {}\n"), 0o644)
	os.WriteFile(bad, []byte(`{"fp16":{"enabled":true},"bf16":{"enabled":true},"zero_optimization":{"stage":3,"offload_param":{"device":"nvme"}}}`), 0o644)
	cases := []struct {
		args       []string
		rc         int
		out, errar string
	}{
		{[]string{"check", good, "--world", "8"}, 0, "train_batch_size=32 = micro 4 × accumulation 1 × data-parallel 8", `did you mean "zero_optimization"`},
		{[]string{"check", "--strict", good}, 1, "zero_optimization.stage", "strict mode"},
		{[]string{"check", bad}, 1, "fp16.enabled", "zero_optimization.offload_param.nvme_path: got <absent>"},
		{[]string{"check", filepath.Join(dir, "missing.json")}, 1, "", "no such file"},
		{[]string{"explain", "stage"}, 0, "zero_optimization.stage", ""},
		{[]string{"explain", "nosuchkey"}, 1, "", "unknown key"},
		// a key without effect says so under DeepSpeed's doc, found
		// through its section (wandb) or as a removed section
		{[]string{"explain", "sparse_gradients"}, 0, "deepgo: no effect (sparse_gradients): gradients are always dense", ""},
		{[]string{"explain", "wandb.project"}, 0, "deepgo: no effect (wandb): nothing is sent to W&B", ""},
		{[]string{"explain", "nebula"}, 0, "deepgo: removed from DeepSpeed", ""},
		{[]string{"check"}, 2, "", "usage"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		rc := runConfig(c.args, &out, &errb)
		assert.Equal(t, c.rc, rc, "%v: exit code\nstdout:\n%s\nstderr:\n%s", c.args, out.String(), errb.String())
		assert.Contains(t, out.String(), c.out, "%v: stdout", c.args)
		assert.Contains(t, errb.String(), c.errar, "%v: stderr", c.args)
	}
	var out, errb bytes.Buffer
	runConfig([]string{"check", good}, &out, &errb)
	assert.Contains(t, out.String(), "zero_optimization.reduce_bucket_size", "defaults not marked")
	assert.Contains(t, out.String(), "# default", "defaults not marked")

	// --json: stdout is the resolved config alone, for json.load or jq; the
	// verdict goes to stderr; an invalid config gets no JSON
	out.Reset()
	errb.Reset()
	require.Equal(t, 0, runConfig([]string{"check", "--json", "--world", "8", good}, &out, &errb), "%s", errb.String())
	var v map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &v), "stdout:\n%s", out.String())
	assert.Contains(t, v, "zero_optimization")
	assert.Contains(t, errb.String(), good+": ok")
	assert.Contains(t, errb.String(), "train_batch_size=32")
	out.Reset()
	errb.Reset()
	require.Equal(t, 1, runConfig([]string{"check", "--json", bad}, &out, &errb))
	assert.Empty(t, out.String())
	assert.Contains(t, errb.String(), bad+": invalid")
}

// TestConfigCheckOptimizer: `deepgo config check` reports optimizer and
// scheduler problems with the rules Initialize applies (optim's verdict
// table runs the full set); "auto" is an error only with --strict.
func TestConfigCheckOptimizer(t *testing.T) {
	dir := t.TempDir()
	write := func(name, doc string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(doc), 0o644))
		return p
	}
	onebit := write("onebit.json", `{"optimizer":{"type":"OneBitAdam"}}`)
	autoLR := write("auto.json", `{"optimizer":{"type":"AdamW","params":{"lr":"auto"}}}`)
	warmup := write("warmup.json", `{"optimizer":{"type":"Adam"},"scheduler":{"type":"WarmupLR","params":{"warmup_type":"cosine"}}}`)
	zpp := write("zpp.json", `{"zero_optimization":{"stage":3,"zero_quantized_nontrainable_weights":true}}`)
	loco := write("loco.json", `{"optimizer":{"type":"AdamW"},"zero_optimization":{"stage":3,"zeropp_loco_param":{"err_beta":0.8,"reset_T":1024}}}`)
	ntw2 := write("ntw2.json", `{"optimizer":{"type":"AdamW"},"zero_optimization":{"stage":2,"zero_quantized_nontrainable_weights":true}}`)
	qgz := write("qgz.json", `{"optimizer":{"type":"AdamW"},"zero_optimization":{"stage":3,"zero_quantized_gradients":true}}`)
	qwz := write("qwz.json", `{"optimizer":{"type":"AdamW"},"zero_optimization":{"stage":3,"zero_quantized_weights":true}}`)
	qwz1 := write("qwz1.json", `{"optimizer":{"type":"AdamW"},"zero_optimization":{"stage":1,"zero_quantized_weights":true}}`)
	spPP := write("sppp.json", `{"optimizer":{"type":"AdamW"},"sequence_parallel_size":2,"pipeline_model_parallel_size":2}`)
	spTP := write("sptp.json", `{"optimizer":{"type":"AdamW"},"sequence_parallel_size":2,"tensor_model_parallel_size":2}`)
	spMSP := write("spmsp.json", `{"optimizer":{"type":"AdamW"},"sequence_parallel_size":2,"tensor_model_parallel_size":2,"megatron_sequence_parallel":true}`)
	for _, c := range []struct {
		args        []string
		rc          int
		out, stderr string
	}{
		{[]string{"check", onebit}, 1, "", `optimizer.type: got "OneBitAdam"; allowed: a DeepSpeed optimizer deepgo implements`},
		{[]string{"check", autoLR}, 0, `unresolved "auto": optimizer.params.lr`, ""},
		{[]string{"check", "--strict", autoLR}, 1, "", `optimizer.params.lr: got "auto"`},
		{[]string{"check", warmup}, 0, ": ok", `warning: scheduler.params.warmup_type: "cosine": unknown warmup type, using "log"`},
		// loads (DeepSpeed's keys), but Initialize would refuse it
		{[]string{"check", zpp}, 1, "", "zero_quantized_nontrainable_weights (ZeRO++): not supported yet\n" + zpp + ": loads, but deepgo cannot train it"},
		// DeepSpeed 0.19.8 refuses LoCo; deepgo loads it, saying it does nothing
		{[]string{"check", loco}, 0, ": ok", "warning: zero_optimization.zeropp_loco_param: removed from DeepSpeed"},
		{[]string{"check", ntw2}, 0, ": ok", "warning: zero_optimization.zero_quantized_nontrainable_weights: no effect at ZeRO stage 2"},
		// qgZ loads, saying that the gradients are reduced unquantized
		{[]string{"check", qgz}, 0, ": ok", "warning: zero_optimization.zero_quantized_gradients: no effect: deepgo reduces gradients unquantized"},
		// qwZ trains at stage 3; below it the key is ignored, with a warning
		{[]string{"check", qwz}, 0, ": ok", ""},
		{[]string{"check", qwz1}, 0, ": ok", "warning: zero_optimization.zero_quantized_weights: ZeRO++ qwZ quantizes stage-3 parameter gathers only; ignored at stage 1"},
		// Ulysses trains with pipeline stages and with TP, not with
		// Megatron's sequence parallelism (Megatron-DeepSpeed refuses it)
		{[]string{"check", spPP}, 0, ": ok", ""},
		{[]string{"check", spTP}, 0, ": ok", ""},
		{[]string{"check", spMSP}, 1, "", "sequence_parallel_size 2 (Ulysses) with megatron_sequence_parallel (tensor_model_parallel_size 2): not supported"},
	} {
		var out, errb bytes.Buffer
		rc := runConfig(c.args, &out, &errb)
		assert.Equal(t, c.rc, rc, "%v: exit code\nstdout:\n%s\nstderr:\n%s", c.args, out.String(), errb.String())
		assert.Contains(t, out.String(), c.out, "%v: stdout", c.args)
		assert.Contains(t, errb.String(), c.stderr, "%v: stderr", c.args)

	}
}

// TestExplainEffectiveKeyQuiet: a key deepgo acts on gets no "no effect"
// line from explain.
func TestExplainEffectiveKeyQuiet(t *testing.T) {
	for _, k := range []string{"zero_optimization.stage", "fp16.loss_scale_window", "checkpoint.writer.decoupled"} {
		var out, errb bytes.Buffer
		require.Equal(t, 0, runConfig([]string{"explain", k}, &out, &errb), "%s", errb.String())
		assert.NotContains(t, out.String(), "deepgo:", k)
	}
}
