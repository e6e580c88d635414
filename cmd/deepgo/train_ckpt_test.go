package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo/checkpoint"
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
