package main

import (
	"bytes"
	"encoding/json"
	"github.com/deepgo-ml/deepgo/checkpoint"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo/config"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeConfig writes js as a config file in a temporary folder.
func writeConfig(t *testing.T, js string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ds.json")
	require.NoError(t, os.WriteFile(p, []byte(js), 0o644))
	return p
}

// jsonLines are the lines of out that are JSON objects.
func jsonLines(out string) []string {
	var js []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "{") {
			js = append(js, l)
		}
	}
	return js
}

// Arguments left after the flags and negative counts are refused, naming
// the argument or flag, its value and what is allowed, before any training.
func TestTrainBadArgs(t *testing.T) {
	cfg := writeConfig(t, `{"train_micro_batch_size_per_gpu": 4}`)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"stray argument", []string{"--model", "tiny", "foo", "--steps", "2"}, `unexpected argument "foo" (all: ["foo" "--steps" "2"])`},
		{"negative steps", []string{"--model", "tiny", "--steps", "-1"}, "--steps -1: want >= 0"},
		{"negative ranks", []string{"--model", "tiny", "--steps", "1", "--ranks", "-2"}, "--ranks -2: want >= 0"},
		{"zero micro-batch", []string{"--model", "tiny", "--steps", "1", "--micro-batch", "0"}, "--micro-batch 0: want >= 1"},
		{"negative lr", []string{"--model", "tiny", "--steps", "1", "--lr", "-1"}, "--lr -1: want a finite number >= 0"},
		{"negative nan check", []string{"--model", "tiny", "--steps", "1", "--nan-check-every", "-1"}, "--nan-check-every -1: want >= 1"},
		{"negative eval interval", []string{"--model", "tiny", "--steps", "1", "--eval-interval", "-1"}, "--eval-interval -1: want >= 0 (optimizer steps between evaluations; 0: no evaluation)"},
		{"zero eval iters", []string{"--model", "tiny", "--steps", "1", "--eval-interval", "1", "--eval-iters", "0"}, "--eval-iters 0: want >= 1 (micro-batches per evaluation per data-parallel rank"},
		{"unknown backend in-process", []string{"--model", "tiny", "--steps", "1", "--ranks", "1", "--dist-backend", "foo"}, `--dist-backend "foo": want one of`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(append([]string{"train", "--config", cfg}, tc.args...), &out, &errb)
			assert.Equal(t, 2, code, "exit code")
			assert.Contains(t, errb.String(), tc.want)
			assert.NotContains(t, out.String(), "training GPT", "trained anyway")
		})
	}
}

// A valid --dist-backend on a run whose ranks are in-process trains, with
// a note that it has no effect there.
func TestTrainBackendInProcess(t *testing.T) {
	cfg := writeConfig(t, `{"train_micro_batch_size_per_gpu": 4}`)
	var out, errb bytes.Buffer
	code := run([]string{"train", "--config", cfg, "--model", "tiny", "--steps", "1", "--ranks", "1", "--dist-backend", "gloo"}, &out, &errb)
	require.Equal(t, 0, code, "%s", errb.String())
	assert.Contains(t, errb.String(), "--dist-backend gloo: no effect: the ranks run in this process")
}

// train itself refuses negative counts (a caller other than runTrain).
func TestTrainNegativeCounts(t *testing.T) {
	cfg := writeConfig(t, `{"train_micro_batch_size_per_gpu": 4}`)
	_, err := train(cfg, "", "tiny", 0, -1, trainerArgs{microBatch: 4, lr: 0.01}, io.Discard, io.Discard)
	require.ErrorContains(t, err, "--steps -1")
	_, err = train(cfg, "", "tiny", -2, 1, trainerArgs{microBatch: 4, lr: 0.01}, io.Discard, io.Discard)
	require.ErrorContains(t, err, "--ranks -2")
}

// checkpoint.load_path resumes from a save directory with a latest file
// or from one checkpoint's folder; a missing path, or a folder with
// neither, is an error naming checkpoint.load_path and what is allowed;
// save_dir as load_path before the first save starts fresh.
func TestTrainLoadPath(t *testing.T) {
	dir := t.TempDir()
	args := trainerArgs{microBatch: 4, lr: 0.01}
	src := filepath.Join(dir, "src")
	_, err := train(resumeConfig(t, src, 3), "", "tiny", 2, 10, args, io.Discard, io.Discard)
	require.NoError(t, err)
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.Mkdir(empty, 0o755))
	for _, tc := range []struct {
		name, load string
		want       string // in the output; "" when resuming is an error
		err        []string
	}{
		{"tag folder", filepath.Join(src, "global_step5"), "resumed at step 5 from", nil},
		{"tag folder, trailing slash", filepath.Join(src, "global_step5") + "/", "resumed at step 5 from", nil},
		{"save directory", src, "resumed at step 10 from", nil},
		{"save_dir before the first save", "SAVE", "training GPT", nil},
		{"missing", filepath.Join(dir, "nope", "global_step5"), "", []string{`checkpoint.load_path "` + filepath.Join(dir, "nope", "global_step5") + `"`, "no such file", "want a checkpoint save directory with a latest file"}},
		{"no checkpoint in it", empty, "", []string{`checkpoint.load_path "` + empty + `"`, "no latest file and no manifest.json", "DIR/global_step5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			save := filepath.Join(t.TempDir(), "save")
			load := tc.load
			if load == "SAVE" {
				load = save
			}
			js, err := json.Marshal(map[string]any{"train_micro_batch_size_per_gpu": 4, "steps_per_print": 5,
				"zero_optimization": map[string]any{"stage": 2}, "optimizer": map[string]any{"type": "AdamW", "params": map[string]any{"lr": 0.01}},
				"checkpoint": map[string]any{"save_dir": save, "load_path": load}})
			require.NoError(t, err)
			var out strings.Builder
			_, err = train(writeConfig(t, string(js)), "", "tiny", 2, 12, args, &out, io.Discard)
			if tc.err != nil {
				for _, w := range tc.err {
					require.ErrorContains(t, err, w)
				}
				assert.NotContains(t, out.String(), "step 12 loss", "trained anyway")
				return
			}
			require.NoError(t, err)
			assert.Contains(t, out.String(), tc.want)
		})
	}
}

// load_path naming an older checkpoint inside save_dir: while save_dir's
// latest file names a checkpoint, the run resumes from that one and says it
// set load_path aside (a restart must not rewind); once latest is removed
// (how a user rolls back), the run resumes from load_path's checkpoint and
// saves on over the later ones: latest follows the loaded tag (the save
// reaching the step latest named used to refuse that tag).
func TestTrainLoadPathInsideSaveDir(t *testing.T) {
	save := filepath.Join(t.TempDir(), "s")
	args := trainerArgs{microBatch: 4, lr: 0.01}
	_, err := train(resumeConfig(t, save, 3), "", "tiny", 2, 10, args, io.Discard, io.Discard)
	require.NoError(t, err)
	js, err := json.Marshal(map[string]any{"train_micro_batch_size_per_gpu": 4, "steps_per_print": 5,
		"zero_optimization": map[string]any{"stage": 2}, "optimizer": map[string]any{"type": "AdamW", "params": map[string]any{"lr": 0.01}},
		"checkpoint": map[string]any{"save_dir": save, "load_path": filepath.Join(save, "global_step5")}})
	require.NoError(t, err)
	cfg := writeConfig(t, string(js))
	var out strings.Builder
	_, err = train(cfg, "", "tiny", 2, 10, args, &out, io.Discard)
	require.NoError(t, err)
	assert.Contains(t, out.String(), "resuming from save_dir's latest (global_step10), not checkpoint.load_path "+filepath.Join(save, "global_step5"))
	assert.Contains(t, out.String(), "nothing to train: the checkpoint in "+save+" is at step 10")

	require.NoError(t, os.Remove(filepath.Join(save, "latest")))
	out.Reset()
	_, err = train(cfg, "", "tiny", 2, 12, args, &out, io.Discard)
	require.NoError(t, err)
	assert.Contains(t, out.String(), "resumed at step 5 from")
	assert.Contains(t, out.String(), "latest now names it")
	assert.NotContains(t, out.String(), "resuming from save_dir's latest")
	tag, err := checkpoint.ReadLatest(nil, save)
	require.NoError(t, err)
	assert.Equal(t, "global_step12", tag, "the run saved on past the loaded step, through step 10 that latest named")
}

// A checkpoint at or past --steps leaves nothing to train: train says so
// plainly, exits 0 and prints no result (no final loss, no JSON line).
func TestTrainNothingToTrain(t *testing.T) {
	save := filepath.Join(t.TempDir(), "b")
	cfg := resumeConfig(t, save, 2)
	_, err := train(cfg, "", "tiny", 2, 6, trainerArgs{microBatch: 4, lr: 0.01}, io.Discard, io.Discard)
	require.NoError(t, err)
	for _, steps := range []string{"4", "6"} {
		var out, errb bytes.Buffer
		code := run([]string{"train", "--config", cfg, "--model", "tiny", "--steps", steps}, &out, &errb)
		require.Zero(t, code, errb.String())
		assert.Contains(t, out.String(), "nothing to train: the checkpoint in "+save+" is at step 6, at or past --steps "+steps)
		assert.NotContains(t, out.String(), "final loss")
		assert.NotContains(t, out.String(), "resumed at step")
		assert.Empty(t, jsonLines(out.String()), "no JSON result")
	}
	tag, err := os.ReadFile(filepath.Join(save, "latest"))
	require.NoError(t, err)
	assert.Contains(t, string(tag), "global_step6", "latest after the runs with nothing to train")
}

// fp16 overflows are reported: a line per skipped step with the loss
// scale before and after, skipped_steps in the JSON line; the final loss
// says what it averages and final_loss_steps how many steps.
func TestTrainReportsSkippedSteps(t *testing.T) {
	cfg := writeConfig(t, `{"train_micro_batch_size_per_gpu": 4,
		"fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 32, "hysteresis": 1}}`)
	var out, errb bytes.Buffer
	code := run([]string{"train", "--config", cfg, "--model", "tiny", "--steps", "3"}, &out, &errb)
	require.Zero(t, code, errb.String())
	for _, want := range []string{
		"step 1: gradient overflow, step skipped, loss scale 4294967296 -> 2147483648\n",
		"step 2: gradient overflow, step skipped, loss scale 2147483648 -> 1073741824\n",
		"step 3: gradient overflow, step skipped, loss scale 1073741824 -> 536870912\n",
		"final loss (mean of the last 1 steps) ",
	} {
		assert.Contains(t, out.String(), want)
	}
	js := jsonLines(out.String())
	require.Len(t, js, 1, out.String())
	var res map[string]any
	require.NoError(t, json.Unmarshal([]byte(js[0]), &res))
	assert.Equal(t, 3.0, res["skipped_steps"], "skipped_steps")
	assert.Equal(t, 1.0, res["final_loss_steps"], "final_loss_steps")

	// without fp16 nothing is skipped, and the key says 0
	cfg = writeConfig(t, `{"train_micro_batch_size_per_gpu": 4, "steps_per_print": 100}`)
	out.Reset()
	code = run([]string{"train", "--config", cfg, "--model", "tiny", "--steps", "20"}, &out, &errb)
	require.Zero(t, code, errb.String())
	assert.NotContains(t, out.String(), "overflow")
	assert.Contains(t, out.String(), "final loss (mean of the last 2 steps) ")
	js = jsonLines(out.String())
	require.Len(t, js, 1, out.String())
	res = nil
	require.NoError(t, json.Unmarshal([]byte(js[0]), &res))
	assert.Equal(t, 0.0, res["skipped_steps"], "skipped_steps")
	assert.Equal(t, 2.0, res["final_loss_steps"], "final_loss_steps")
}

// The help documents the JSON line's keys and the nothing-to-train exit.
func TestTrainHelp(t *testing.T) {
	var out, errb bytes.Buffer
	assert.Zero(t, run([]string{"train", "-h"}, &out, &errb))
	for _, want := range []string{"final_loss_steps", "skipped_steps", "mean loss of the last final_loss_steps steps",
		"nothing to train", "no effect", "-steps", "eval_loss", "eval\nloss L (ppl P)", "-eval-interval", "-eval-iters"} {
		assert.Contains(t, errb.String(), want)
	}
}

// The pipeline banner counts the micro-batches of the resolved batch
// triad: train_batch_size 8 of micro-batches of 2 on 2 data-parallel ranks
// is 2 micro-batches per step, though the config does not say
// gradient_accumulation_steps.
func TestTrainPipelineBannerMicroBatches(t *testing.T) {
	cfg := writeConfig(t, `{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
		"pipeline_model_parallel_size": 2, "zero_optimization": {"stage": 1}}`)
	var out, errb bytes.Buffer
	code := run([]string{"train", "--config", cfg, "--model", "tiny", "--ranks", "2", "--steps", "1"}, &out, &errb)
	require.Zero(t, code, errb.String())
	assert.Contains(t, out.String(), "pipeline: 2 stages x 2 data-parallel ranks")
	assert.Contains(t, out.String(), ", 2 micro-batches per step")
}

// train prints, on rank 0, a note per key that loads but does nothing
// (the list deepgo config check prints), once per key, leaving out keys
// the engine's notes or the config's warnings name already and keys that
// do work (keep_n_most_recent).
func TestTrainNoEffectNotes(t *testing.T) {
	cfg := writeConfig(t, `{"train_micro_batch_size_per_gpu": 4, "steps_per_print": 100,
		"wandb": {"enabled": true, "project": "p"}, "eigenvalue": {"enabled": true}, "compile": {"deepcompile": false},
		"zero_allow_untested_optimizer": true, "zero_optimization": {"stage": 1, "allgather_bucket_size": 5e8},
		"checkpoint": {"keep_n_most_recent": 2}}`)
	var out, errb bytes.Buffer
	code := run([]string{"train", "--config", cfg, "--model", "tiny", "--steps", "1"}, &out, &errb)
	require.Zero(t, code, errb.String())
	for _, want := range []string{
		"note: not supported: wandb monitor (wandb.enabled): ", // the engine's note, which covers the key
		"note: eigenvalue: no effect: removed from DeepSpeed",
		"note: compile: no effect: recognised DeepSpeed section",
		"note: zero_allow_untested_optimizer: no effect:",
		"note: zero_optimization.allgather_bucket_size: no effect: the all-gather is not bucketed\n",
	} {
		assert.Equal(t, 1, strings.Count(out.String(), want), "%q once in\n%s", want, out.String())
	}
	assert.NotContains(t, out.String(), "wandb.enabled: no effect", "covered by wandb")
	assert.NotContains(t, out.String(), "wandb: no effect", "the engine's note names wandb already")
	assert.NotContains(t, out.String(), "keep_n_most_recent: no effect", "keep_n_most_recent rotates checkpoints")
	before, _, ok := strings.Cut(out.String(), "training GPT")
	require.True(t, ok)
	assert.Contains(t, before, "no effect", "the notes come before training starts")
}

// trainNoEffectNotes leaves out the keys a note already names (as a word
// of its own, or a sub-key of it) and keeps the others.
func TestTrainNoEffectNotesDedup(t *testing.T) {
	c, err := config.Parse([]byte(`{"wandb": {"enabled": true}, "zero_optimization": {"allgather_bucket_size": 5e8}, "eigenvalue": {"enabled": true}}`))
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		said []string
		want []string
	}{
		{"nothing said", nil, []string{"eigenvalue", "wandb", "zero_optimization.allgather_bucket_size"}},
		{"sub-key named", []string{"not supported: wandb monitor (wandb.enabled): nothing is sent"}, []string{"eigenvalue", "zero_optimization.allgather_bucket_size"}},
		{"key named", []string{"zero_optimization.allgather_bucket_size: ignored"}, []string{"eigenvalue", "wandb"}},
		{"other word", []string{"mywandb_x and eigenvalues"}, []string{"eigenvalue", "wandb", "zero_optimization.allgather_bucket_size"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var keys []string
			for _, n := range trainNoEffectNotes(c, tc.said) {
				k, _, ok := strings.Cut(n, ": no effect: ")
				require.True(t, ok, n)
				keys = append(keys, k)
			}
			assert.Equal(t, tc.want, keys)
		})
	}
}

// A config warning is printed once, whether or not the engine's notes
// carry it too.
func TestTrainWarningOnce(t *testing.T) {
	save := filepath.Join(t.TempDir(), "save")
	cfg := writeConfig(t, `{"train_micro_batch_size_per_gpu": 4, "steps_per_print": 100,
		"checkpoint": {"save_dir": "`+save+`", "keep_n_most_recent": 2, "num_checkpoints_to_keep": 10}}`)
	var out, errb bytes.Buffer
	code := run([]string{"train", "--config", cfg, "--model", "tiny", "--steps", "1"}, &out, &errb)
	require.Zero(t, code, errb.String())
	assert.Equal(t, 1, strings.Count(out.String(), "keep_n_most_recent (2) and num_checkpoints_to_keep (10) disagree"), out.String())
}

// A config that does not load is reported once, not by whichever rank's
// load failed first ("rank 63: config: ...").
func TestTrainConfigErrorOnce(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"train", "--config", filepath.Join(t.TempDir(), "missing.json"), "--model", "tiny", "--steps", "1"}, &out, &errb)
	assert.Equal(t, 1, code)
	assert.Contains(t, errb.String(), "deepgo train: config: open ")
	assert.NotContains(t, errb.String(), "rank ")
}

// --data too short for one window per data-parallel rank names the file,
// its size and the size it needs.
func TestTrainDataTooShort(t *testing.T) {
	cfg := writeConfig(t, `{"train_micro_batch_size_per_gpu": 4}`)
	data := filepath.Join(t.TempDir(), "tiny.txt")
	require.NoError(t, os.WriteFile(data, []byte("ab"), 0o644))
	_, err := train(cfg, data, "tiny", 2, 1, trainerArgs{microBatch: 4, lr: 0.01}, io.Discard, io.Discard)
	require.ErrorContains(t, err, "--data "+data+": 2 tokens make 0 windows of 16 (+1) tokens")
	require.ErrorContains(t, err, "(at least 33 tokens)")
}
