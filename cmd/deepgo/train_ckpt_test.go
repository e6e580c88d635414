package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo/checkpoint"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A run stopped at step 10 and started again with the same config resumes
// from the latest checkpoint under save_dir (engine state and each rank's
// sampler position) and ends exactly where an uninterrupted run ends.
func TestTrainResumesFromSaveDir(t *testing.T) {
	dir, args, whole := resumeRuns(t)
	b := resumeConfig(t, filepath.Join(dir, "b"), 2)
	_, err := train(b, "", "tiny", 2, 10, args, io.Discard, io.Discard)
	require.NoError(t, err)
	resumed, err := train(b, "", "tiny", 2, 20, args, io.Discard, io.Discard)
	require.NoError(t, err)
	require.Equal(t, whole.FinalLoss, resumed.FinalLoss, "final loss after resuming vs uninterrupted")
	// keep_n_most_recent: 2 leaves two tags and latest
	ents, _ := os.ReadDir(filepath.Join(dir, "b"))
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	assert.Len(t, names, 3, "save_dir: want two checkpoints and latest")
}

// One flipped bit in an optimizer-state file of the latest checkpoint:
// without --resume-fallback the run stops, naming the damage and the
// checkpoints that verify; with it the run resumes from the newest of them,
// says so, and ends exactly where an uninterrupted run ends.
func TestTrainResumeFallback(t *testing.T) {
	dir, args, whole := resumeRuns(t)
	saveDir := filepath.Join(dir, "b")
	b := resumeConfig(t, saveDir, 3)
	_, err := train(b, "", "tiny", 2, 10, args, io.Discard, io.Discard)
	require.NoError(t, err)
	// A load failure that is not damage is reported as it is.
	intact := &resumer{fallback: true}
	_, _, err = intact.fallbackTag(context.Background(), saveDir, errors.New("shapes differ"))
	require.Error(t, err, "a failure to load an intact checkpoint")
	require.True(t, strings.HasSuffix(err.Error(), "shapes differ"), "a failure to load an intact checkpoint became %v", err)
	optim, _ := filepath.Glob(filepath.Join(saveDir, "global_step10", "*rank_1*optim*"))
	require.Len(t, optim, 1, "optimizer-state files of rank 1")
	data, err := os.ReadFile(optim[0])
	require.NoError(t, err)
	data[len(data)-5] ^= 0x04
	require.NoError(t, os.WriteFile(optim[0], data, 0o644))

	_, err = train(b, "", "tiny", 2, 20, args, io.Discard, io.Discard)
	for _, want := range []string{"checksum mismatch", "global_step10 does not verify",
		"checkpoints that verify, newest first: global_step5 (step 5)", "--resume-fallback"} {
		require.ErrorContains(t, err, want, "resuming past a damaged checkpoint without --resume-fallback")
	}
	t.Logf("without --resume-fallback: %v", err)

	var out strings.Builder
	args.resumeFallback = true
	resumed, err := train(b, "", "tiny", 2, 20, args, &out, io.Discard)
	require.NoError(t, err)
	for _, want := range []string{"global_step10 does not verify", "resumed from global_step5 (step 5)",
		"latest now names global_step5", "resumed at step 5 from"} {
		assert.Contains(t, out.String(), want, "output does not say it")
	}
	t.Logf("with --resume-fallback:\n%s", out.String())
	assert.Equal(t, whole.FinalLoss, resumed.FinalLoss, "final loss after falling back vs uninterrupted")
	vs, err := checkpoint.VerifyAll(context.Background(), nil, saveDir)
	require.NoError(t, err)
	for _, v := range vs {
		assert.NoError(t, v.Err, "%s after the run", v.Tag)
	}
	tag, err := checkpoint.ReadLatest(nil, saveDir)
	assert.NoError(t, err, "latest after the run")
	assert.Equal(t, "global_step20", tag, "latest after the run")
	assert.Len(t, vs, 3, "checkpoints after the run")

}

// resumeConfig writes, next to save, the config of the resume tests: ZeRO-2,
// a checkpoint into save every 5 steps, keeping the keep newest.
func resumeConfig(t *testing.T, save string, keep int) string {
	t.Helper()
	p := save + ".json"
	js := fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 4, "steps_per_print": 5,
		"zero_optimization": {"stage": 2},
		"optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
		"checkpoint": {"save_dir": %q, "keep_n_most_recent": %d}}`, save, keep)
	require.NoError(t, os.WriteFile(p, []byte(js), 0o644))
	return p
}

// resumeRuns skips the resume tests under -short (they train several
// times); else it returns a folder for their runs, the runs' arguments and
// the uninterrupted 20-step run a resumed one must end like.
func resumeRuns(t *testing.T) (string, trainerArgs, *trainResult) {
	t.Helper()
	if testing.Short() {
		t.Skip("several training runs")
	}
	dir := t.TempDir()
	args := trainerArgs{microBatch: 4, lr: 0.01}
	whole, err := train(resumeConfig(t, filepath.Join(dir, "a"), 2), "", "tiny", 2, 20, args, io.Discard, io.Discard)
	require.NoError(t, err)
	return dir, args, whole
}

// resumeFrom's choice: save_dir's latest checkpoint whenever save_dir has
// one (checkpoint.load_path set aside, with a line saying why, unless it
// names save_dir itself); else checkpoint.load_path (a save directory or
// one checkpoint's folder, save_dir before its first save); else a fresh
// start.
func TestResumeFrom(t *testing.T) {
	root := t.TempDir()
	seed := filepath.Join(root, "seed") // another run's checkpoints: steps 10 and 20
	saveSteps(t, seed, 10, 20)
	saved := filepath.Join(root, "saved") // this run's: steps 30 to 60
	saveSteps(t, saved, 30, 40, 50, 60)
	unsaved := filepath.Join(root, "unsaved") // not created yet
	empty := filepath.Join(root, "empty")
	require.NoError(t, os.Mkdir(empty, 0o755))
	noLatest := filepath.Join(root, "nolatest") // checkpoints without a latest file
	saveSteps(t, noLatest, 5, 10)
	require.NoError(t, os.Remove(filepath.Join(noLatest, "latest")))
	for _, tc := range []struct {
		name     string
		save     string
		load     *string
		dir, tag string
		why      []string // in the line; nil: no line
		err      string
	}{
		{name: "neither"},
		{name: "save_dir not created yet", save: unsaved},
		{name: "save_dir empty", save: empty},
		{name: "save_dir with a checkpoint", save: saved, dir: saved},
		{name: "save_dir with checkpoints but no latest file", save: noLatest},
		{name: "load_path seeds an empty save_dir", save: unsaved, load: ptr(seed), dir: seed},
		{name: "load_path tag folder seeds an empty save_dir", save: empty, load: ptr(filepath.Join(seed, "global_step10")), dir: seed, tag: "global_step10"},
		{name: "save_dir's latest over load_path", save: saved, load: ptr(seed), dir: saved,
			why: []string{"resuming from save_dir's latest (global_step60), not checkpoint.load_path " + seed, "load_path only seeds a run whose save_dir has none"}},
		{name: "save_dir's latest over a load_path tag folder", save: saved, load: ptr(filepath.Join(seed, "global_step20")), dir: saved,
			why: []string{"save_dir's latest (global_step60), not checkpoint.load_path " + filepath.Join(seed, "global_step20")}},
		{name: "save_dir's latest over a tag inside save_dir", save: saved, load: ptr(filepath.Join(saved, "global_step30")), dir: saved,
			why: []string{"save_dir's latest (global_step60), not checkpoint.load_path " + filepath.Join(saved, "global_step30")}},
		{name: "load_path is save_dir", save: saved, load: ptr(saved + "/"), dir: saved},
		{name: "load_path is save_dir before the first save", save: unsaved, load: ptr(unsaved)},
		{name: "load_path is an empty save_dir", save: empty, load: ptr(empty)},
		{name: "load_path tag inside a save_dir without latest", save: noLatest, load: ptr(filepath.Join(noLatest, "global_step5")), dir: noLatest, tag: "global_step5"},
		{name: "load_path alone", load: ptr(seed), dir: seed},
		{name: "empty load_path", save: saved, load: ptr(""), dir: saved},
		{name: "load_path missing", save: empty, load: ptr(filepath.Join(root, "nope")), err: `checkpoint.load_path "` + filepath.Join(root, "nope") + `"`},
		{name: "load_path without a checkpoint", save: unsaved, load: ptr(empty), err: "no latest file and no manifest.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &config.Config{}
			cfg.Checkpoint.SaveDir, cfg.Checkpoint.LoadPath = tc.save, tc.load
			src, err := resumeFrom(cfg)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.dir, src.dir, "dir")
			assert.Equal(t, tc.tag, src.tag, "tag")
			if tc.why == nil {
				assert.Empty(t, src.why)
			}
			for _, w := range tc.why {
				assert.Contains(t, src.why, w)
			}
			assert.NotContains(t, src.why, "\n", "one line")
		})
	}
}

func ptr[T any](v T) *T { return &v }

// The user's three runs with checkpoint.load_path (another run's
// checkpoints) and save_dir: the first is seeded from load_path, the later
// ones resume from save_dir's latest and say why, so no checkpoint of this
// run is overwritten by a rewound one, and the run ends where an
// uninterrupted run from the seed ends.
func TestTrainResumeSaveDirOverLoadPath(t *testing.T) {
	if testing.Short() {
		t.Skip("several training runs")
	}
	dir := t.TempDir()
	args := trainerArgs{microBatch: 4, lr: 0.01}
	seed := filepath.Join(dir, "seed")
	_, err := train(resumeConfig(t, seed, 0), "", "tiny", 2, 5, args, io.Discard, io.Discard)
	require.NoError(t, err)
	cfg := func(save string) string {
		js, err := json.Marshal(map[string]any{"train_micro_batch_size_per_gpu": 4, "steps_per_print": 5,
			"zero_optimization": map[string]any{"stage": 2}, "optimizer": map[string]any{"type": "AdamW", "params": map[string]any{"lr": 0.01}},
			"checkpoint": map[string]any{"save_dir": save, "load_path": seed}})
		require.NoError(t, err)
		return writeConfig(t, string(js))
	}
	whole, err := train(cfg(filepath.Join(dir, "whole")), "", "tiny", 2, 20, args, io.Discard, io.Discard)
	require.NoError(t, err)

	save := filepath.Join(dir, "save")
	c := cfg(save)
	for _, run := range []struct {
		steps int
		want  []string
	}{
		{steps: 10, want: []string{"resumed at step 5 from " + seed}},
		{steps: 15, want: []string{"resuming from save_dir's latest (global_step10), not checkpoint.load_path " + seed, "resumed at step 10 from " + save}},
		{steps: 20, want: []string{"resuming from save_dir's latest (global_step15)", "resumed at step 15 from " + save}},
	} {
		var out strings.Builder
		res, err := train(c, "", "tiny", 2, run.steps, args, &out, io.Discard)
		require.NoError(t, err, "--steps %d", run.steps)
		for _, w := range run.want {
			assert.Contains(t, out.String(), w, "--steps %d", run.steps)
		}
		if run.steps == 10 {
			assert.NotContains(t, out.String(), "resuming from save_dir", "a seeded run says nothing of save_dir")
		}
		if run.steps == 20 {
			assert.Equal(t, whole.FinalLoss, res.FinalLoss, "final loss after two restarts vs uninterrupted")
		}
	}
	tag, err := checkpoint.ReadLatest(nil, save)
	require.NoError(t, err)
	assert.Equal(t, "global_step20", tag)
}

// A run resumed from an fp16 checkpoint with a bf16 config prints the
// Load's notes: the dynamic loss scaler it did not restore and the change
// of training precision.
func TestTrainResumePrintsLoadNotes(t *testing.T) {
	save := t.TempDir()
	cfg := func(prec string) string {
		return writeConfig(t, fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 4, "steps_per_print": 2,
			%q: {"enabled": true}, "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
			"checkpoint": {"save_dir": %q}}`, prec, save))
	}
	args := trainerArgs{microBatch: 4, lr: 0.01}
	_, err := train(cfg("fp16"), "", "tiny", 2, 2, args, io.Discard, io.Discard)
	require.NoError(t, err)
	var out strings.Builder
	_, err = train(cfg("bf16"), "", "tiny", 2, 4, args, &out, io.Discard)
	require.NoError(t, err)
	assert.Contains(t, out.String(), "note: "+filepath.Join(save, "global_step2")+": the checkpoint's dynamic loss scaler")
	assert.Contains(t, out.String(), "saved training in float16, loaded into an engine training in bfloat16")
}

// TestTrainDecoupledSaves: with checkpoint.writer.decoupled true deepgo
// train saves in the background (ZeRO-2 on 2 ranks; TP 2 × PP 2): it says
// so in a note and, once each checkpoint is committed, "saved checkpoint
// DIR/TAG (written in the background)"; a run stopped half way and resumed
// ends exactly where the uninterrupted run with synchronous saves ends,
// and the last checkpoint's data files are that run's byte for byte.
func TestTrainDecoupledSaves(t *testing.T) {
	if testing.Short() {
		t.Skip("several training runs")
	}
	for _, tc := range []struct {
		name, model string
		ranks       int
		steps       int // a multiple of the configs' save interval
		lr          float64
		config      func(t *testing.T, dir, save string) string
	}{
		{name: "zero2", model: "tiny", ranks: 2, steps: 10, lr: 0.01,
			config: func(t *testing.T, _, save string) string { return resumeConfig(t, save, 2) }},
		{name: "tp2-pp2", model: "small", ranks: 1, steps: 12, lr: 0.003,
			config: func(t *testing.T, dir, save string) string { return tpCheckpointConfig(t, dir, 2, 2, save, "") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			args := trainerArgs{microBatch: 4, lr: tc.lr}
			whole, err := train(tc.config(t, dir, filepath.Join(dir, "whole")), "", tc.model, tc.ranks, tc.steps, args, io.Discard, io.Discard)
			require.NoError(t, err)
			bg := filepath.Join(dir, "bg")
			cfg := decoupled(t, tc.config(t, dir, bg))
			var out strings.Builder
			_, err = train(cfg, "", tc.model, tc.ranks, tc.steps/2, args, &out, io.Discard)
			require.NoError(t, err)
			half := checkpoint.DefaultTag(int64(tc.steps / 2))
			assert.Contains(t, out.String(), "note: checkpoint.writer.decoupled: checkpoints are written in the background")
			assert.Contains(t, out.String(), "saved checkpoint "+filepath.Join(bg, half)+" (written in the background)\n")
			assert.NotContains(t, out.String(), "checkpoint.writer: no effect")
			resumed, err := train(cfg, "", tc.model, tc.ranks, tc.steps, args, io.Discard, io.Discard)
			require.NoError(t, err)
			require.Equal(t, whole.FinalLoss, resumed.FinalLoss, "final loss resumed from background saves vs uninterrupted with synchronous saves")
			last := checkpoint.DefaultTag(int64(tc.steps))
			files, _ := filepath.Glob(filepath.Join(dir, "whole", last, "*.safetensors"))
			require.NotEmpty(t, files)
			for _, f := range files {
				want, err := os.ReadFile(f)
				require.NoError(t, err)
				got, err := os.ReadFile(filepath.Join(bg, last, filepath.Base(f)))
				require.NoError(t, err, "the background save's %s", filepath.Base(f))
				assert.True(t, bytes.Equal(want, got), "%s/%s differs from the synchronous save's", last, filepath.Base(f))
			}
			t.Logf("%d data files of %s identical", len(files), last)
		})
	}
}

// decoupled rewrites the config at p with checkpoint.writer.decoupled
// true, into a file of its own, and returns that file.
func decoupled(t *testing.T, p string) string {
	t.Helper()
	js, err := os.ReadFile(p)
	require.NoError(t, err)
	js2 := bytes.Replace(js, []byte(`"checkpoint": {`), []byte(`"checkpoint": {"writer": {"decoupled": true}, `), 1)
	require.NotEqual(t, string(js), string(js2), "no checkpoint section in %s", p)
	out := strings.TrimSuffix(p, ".json") + "-decoupled.json"
	require.NoError(t, os.WriteFile(out, js2, 0o644))
	return out
}
