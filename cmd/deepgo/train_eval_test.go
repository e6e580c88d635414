package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo/config"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// evalLine is deepgo train's line per evaluation.
var evalLine = regexp.MustCompile(`(?m)^step (\d+) eval loss (\S+) \(ppl (\S+)\)$`)

// evalConfig writes the config of the evaluation tests, checkpointing
// into save only at the end of the run (steps_per_print 100): the
// data-parallel engine at ZeRO-2, or (pipe) 2 pipeline stages at ZeRO-1.
func evalConfig(t *testing.T, save string, pipe bool) string {
	t.Helper()
	layout := `"zero_optimization": {"stage": 2}`
	if pipe {
		layout = `"pipeline_model_parallel_size": 2, "zero_optimization": {"stage": 1}`
	}
	p := save + ".json"
	js := fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "steps_per_print": 100, %s,
		"optimizer": {"type": "AdamW", "params": {"lr": 0.01}}, "checkpoint": {"save_dir": %q}}`, layout, save)
	require.NoError(t, os.WriteFile(p, []byte(js), 0o644))
	return p
}

// Evaluating changes nothing in training: with --eval-interval 2 the five
// training losses and the final checkpoint (parameters, optimizer state,
// sampler positions) are bit-identical to a run without evaluation, on
// the CPU and the simulated device, for the data-parallel engine and a
// 2-stage pipeline. The run evaluates at steps 2 and 4 and after the last
// (5), reports the last evaluation as eval_loss, and csv_monitor writes
// each evaluation at its global_samples.
func TestTrainEvalChangesNothing(t *testing.T) {
	for _, dev := range []string{"cpu", "sim"} {
		for _, pipe := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/pipe=%v", dev, pipe), func(t *testing.T) {
				dir := t.TempDir()
				args := trainerArgs{microBatch: 2, lr: 0.01, device: dev}
				var plain, evald strings.Builder
				// both runs save into the same save_dir (the manifest holds
				// the config), the first one's checkpoint moved aside
				save := filepath.Join(dir, "ck")
				cfg := withCSVMonitor(t, evalConfig(t, save, pipe), filepath.Join(dir, "mon"))
				base, err := train(cfg, "", "tiny", 2, 5, args, &plain, io.Discard)
				require.NoError(t, err)
				require.NoError(t, os.Rename(save, filepath.Join(dir, "a")))
				_, err = os.Stat(filepath.Join(dir, "mon", "j", "Train_Samples_eval_loss.csv"))
				require.True(t, os.IsNotExist(err), "no eval_loss without --eval-interval: %v", err)
				require.NoError(t, os.RemoveAll(filepath.Join(dir, "mon")))
				args.evalInterval, args.evalIters = 2, 2
				res, err := train(cfg, "", "tiny", 2, 5, args, &evald, io.Discard)
				require.NoError(t, err)

				require.Len(t, base.Losses, 5, "training losses")
				assert.Equal(t, base.Losses, res.Losses, "training losses with evaluation vs without")
				assert.Equal(t, base.FinalLoss, res.FinalLoss, "final loss")
				sameFiles(t, filepath.Join(dir, "a", "global_step5"), filepath.Join(save, "global_step5"))

				assert.Empty(t, evalLine.FindAllString(plain.String(), -1), "eval lines without --eval-interval")
				assert.Nil(t, base.EvalLoss, "eval_loss without --eval-interval")
				lines := evalLine.FindAllStringSubmatch(evald.String(), -1)
				require.Len(t, lines, 3, "eval lines\n%s", evald.String())
				require.Len(t, res.EvalLosses, 3)
				for i, step := range []string{"2", "4", "5"} {
					assert.Equal(t, step, lines[i][1], "eval line %d's step", i)
					assert.Equal(t, fmt.Sprintf("%.4f", res.EvalLosses[i]), lines[i][2], "eval line %d's loss", i)
					assert.Equal(t, fmt.Sprintf("%.4g", math.Exp(res.EvalLosses[i])), lines[i][3], "eval line %d's ppl", i)
					// uniform over the tiny model's 16 tokens is ln 16 = 2.77
					assert.True(t, res.EvalLosses[i] > 0 && res.EvalLosses[i] < 3.5, "eval loss %v", res.EvalLosses[i])
				}
				require.NotNil(t, res.EvalLoss, "eval_loss")
				assert.Equal(t, res.EvalLosses[2], *res.EvalLoss, "eval_loss is the last evaluation's")
				assert.Less(t, res.EvalLosses[2], res.EvalLosses[0], "the held-out loss falls as training goes on")
				csv, err := os.ReadFile(filepath.Join(dir, "mon", "j", "Train_Samples_eval_loss.csv"))
				require.NoError(t, err)
				want := "step,eval_loss\r\n"
				for i, step := range []int{2, 4, 5} {
					want += fmt.Sprintf("%d,%s\r\n", step*8, config.PyFloatRepr(res.EvalLosses[i]))
				}
				assert.Equal(t, want, string(csv), "eval_loss at step × 8 samples")
			})
		}
	}
}

// withCSVMonitor adds csv_monitor into out (job "j") to the config file
// cfg and returns cfg.
func withCSVMonitor(t *testing.T, cfg, out string) string {
	t.Helper()
	b, err := os.ReadFile(cfg)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	m["csv_monitor"] = map[string]any{"enabled": true, "output_path": out, "job_name": "j"}
	b, err = json.Marshal(m)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(cfg, b, 0o644))
	return cfg
}

// sameFiles fails unless folders a and b hold the same files, byte for
// byte.
func sameFiles(t *testing.T, a, b string) {
	t.Helper()
	n := 0
	require.NoError(t, filepath.WalkDir(a, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(a, p)
		x, err := os.ReadFile(p)
		require.NoError(t, err)
		y, err := os.ReadFile(filepath.Join(b, rel))
		require.NoError(t, err, "%s in %s", rel, b)
		assert.True(t, bytes.Equal(x, y), "checkpoint file %s differs", rel)
		n++
		return nil
	}))
	require.NotZero(t, n, "no checkpoint files in %s", a)
}

// The JSON line has eval_loss, the last eval line's loss, with
// --eval-interval and not without; --eval-iters alone is noted as having
// no effect.
func TestTrainEvalJSON(t *testing.T) {
	cfg := writeConfig(t, `{"train_micro_batch_size_per_gpu": 4, "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}}`)
	for _, tc := range []struct {
		args  []string
		evals int
		note  string
	}{
		{[]string{"--eval-interval", "2"}, 2, ""},
		{nil, 0, ""},
		{[]string{"--eval-iters", "3"}, 0, "--eval-iters 3: no effect: evaluation is off (--eval-interval 0)"},
	} {
		var out, errb bytes.Buffer
		code := run(append([]string{"train", "--config", cfg, "--model", "tiny", "--ranks", "1", "--steps", "3"}, tc.args...), &out, &errb)
		require.Zero(t, code, errb.String())
		js := jsonLines(out.String())
		require.Len(t, js, 1, "JSON lines\n%s", out.String())
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(js[0]), &m))
		lines := evalLine.FindAllStringSubmatch(out.String(), -1)
		require.Len(t, lines, tc.evals, "%q: eval lines\n%s", tc.args, out.String())
		if tc.evals == 0 {
			assert.NotContains(t, m, "eval_loss", "%q", tc.args)
		} else if assert.Contains(t, m, "eval_loss", "%q", tc.args) {
			assert.Equal(t, lines[len(lines)-1][2], fmt.Sprintf("%.4f", m["eval_loss"]), "eval_loss vs the last eval line")
		}
		if tc.note != "" {
			assert.Contains(t, errb.String(), tc.note)
		}
	}
}

// A resumed run evaluates at the multiples of --eval-interval of the
// global step, as the uninterrupted run does, to the same losses.
func TestTrainEvalResumes(t *testing.T) {
	dir := t.TempDir()
	args := trainerArgs{microBatch: 2, lr: 0.01, evalInterval: 2, evalIters: 1}
	whole, err := train(evalConfig(t, filepath.Join(dir, "a"), false), "", "tiny", 2, 6, args, io.Discard, io.Discard)
	require.NoError(t, err)
	b := evalConfig(t, filepath.Join(dir, "b"), false)
	first, err := train(b, "", "tiny", 2, 3, args, io.Discard, io.Discard)
	require.NoError(t, err)
	var out strings.Builder
	resumed, err := train(b, "", "tiny", 2, 6, args, &out, io.Discard)
	require.NoError(t, err)
	require.Contains(t, out.String(), "resumed at step 3 from")
	require.Len(t, whole.EvalLosses, 3, "evaluations at 2, 4, 6")
	assert.Equal(t, whole.EvalLosses[:1], first.EvalLosses[:1], "step 2")
	require.Len(t, first.EvalLosses, 2, "evaluations at 2 and the last step, 3")
	var steps []string
	for _, l := range evalLine.FindAllStringSubmatch(out.String(), -1) {
		steps = append(steps, l[1])
	}
	assert.Equal(t, []string{"4", "6"}, steps, "the resumed run's eval lines")
	assert.Equal(t, whole.EvalLosses[1:], resumed.EvalLosses, "steps 4 and 6, resumed vs uninterrupted")
}

// With --data the last windows are held out, the split is noted, and too
// few windows for an evaluation on every data-parallel rank is an error
// naming --eval-iters and the counts.
func TestTrainEvalData(t *testing.T) {
	text := filepath.Join(t.TempDir(), "corpus.txt")
	// 1601 bytes: 100 windows of the tiny model's 16 (+1) tokens
	require.NoError(t, os.WriteFile(text, bytes.Repeat([]byte("the cat sat on a mat. "), 73)[:1601], 0o644))
	cfg := writeConfig(t, `{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}}`)
	var out, errb bytes.Buffer
	code := run([]string{"train", "--config", cfg, "--model", "tiny", "--ranks", "2", "--steps", "2", "--data", text, "--eval-interval", "1"}, &out, &errb)
	require.Zero(t, code, errb.String())
	// 5% of 100 is 5, less than the 8 one evaluation reads (2 x 2 x 2 ranks)
	assert.Contains(t, out.String(), "note: evaluation every 1 step and after the last: --data's 100 windows of 16 (+1) tokens split: the first 92 train, the last 8 (5%, at least --eval-iters 2 x micro-batch 2 x 2 data-parallel ranks) are held out")
	assert.Len(t, evalLine.FindAllString(out.String(), -1), 2, "eval lines\n%s", out.String())

	errb.Reset()
	code = run([]string{"train", "--config", cfg, "--model", "tiny", "--ranks", "2", "--steps", "2", "--data", text, "--eval-interval", "1", "--eval-iters", "25"}, &out, &errb)
	assert.Equal(t, 1, code)
	assert.Contains(t, errb.String(), "--data "+text+": --eval-iters 25 x micro-batch 2 x 2 data-parallel ranks: 100 windows in all: holding out 100 for evaluation (5%, at least the 100 one evaluation reads) leaves 0 to train on, and each of the 2 data-parallel ranks needs at least one")
}

// splitHeldOut holds out 5% of the windows, or one evaluation's worth
// when that is more, and refuses to leave a data-parallel rank without a
// window to train on.
func TestSplitHeldOut(t *testing.T) {
	for _, tc := range []struct {
		n, need, dn, train int
		err                string
	}{
		{1000, 8, 2, 950, ""},
		{1000, 60, 2, 940, ""},
		{101, 1, 1, 95, ""}, // 5% rounds up: 6 held
		{10, 8, 2, 2, ""},
		{10, 9, 2, 0, "10 windows in all: holding out 9 for evaluation (5%, at least the 9 one evaluation reads) leaves 1 to train on, and each of the 2 data-parallel ranks needs at least one"},
		{4, 8, 1, 0, "leaves 0 to train on"},
	} {
		got, err := splitHeldOut(tc.n, tc.need, tc.dn)
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err, "%+v", tc)
			continue
		}
		assert.NoError(t, err, "%+v", tc)
		assert.Equal(t, tc.train, got, "%+v", tc)
	}
}

// With the Interleaved pipeline schedule a given --eval-iters must be a
// multiple of the stages: refused before any rank starts.
func TestTrainEvalInterleaved(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"train", "--config", "../../configs/5.1-175b-cpu.json", "--model", "tiny", "--steps", "2", "--eval-interval", "1", "--eval-iters", "3"}, &out, &errb)
	assert.Equal(t, 1, code)
	assert.Contains(t, errb.String(), "--eval-iters 3: want a multiple of the 4 pipeline stages with the Interleaved schedule")
	assert.NotContains(t, out.String(), "training GPT", "trained anyway")
}

// A --data run saved without evaluation and resumed with it (which holds
// out windows, so the training sampler shuffles another count) is refused,
// naming both counts and the flags, rather than resuming in another order.
func TestTrainEvalResumeRefusesOtherSplit(t *testing.T) {
	text := filepath.Join(t.TempDir(), "corpus.txt")
	require.NoError(t, os.WriteFile(text, bytes.Repeat([]byte("the cat sat on a mat. "), 73)[:1601], 0o644))
	save := t.TempDir()
	cfg := writeConfig(t, fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "steps_per_print": 2,
		"checkpoint": {"save_dir": %q}, "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}}`, save))
	var out, errb bytes.Buffer
	code := run([]string{"train", "--config", cfg, "--model", "tiny", "--ranks", "2", "--steps", "2", "--data", text}, &out, &errb)
	require.Zero(t, code, errb.String())
	errb.Reset()
	code = run([]string{"train", "--config", cfg, "--model", "tiny", "--ranks", "2", "--steps", "4", "--data", text, "--eval-interval", "1"}, &out, &errb)
	assert.Equal(t, 1, code)
	assert.Contains(t, errb.String(), "the checkpoint trained on 100 token windows, this run has 92: resume with the same --data and the same --eval-interval/--eval-iters")
	errb.Reset()
	code = run([]string{"train", "--config", cfg, "--model", "tiny", "--ranks", "2", "--steps", "4", "--data", text}, &out, &errb)
	assert.Zero(t, code, "the same split resumes: %s", errb.String())
}
