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
)

// A run stopped at step 10 and started again with the same config resumes
// from the latest checkpoint under save_dir (engine state and each rank's
// sampler position) and ends exactly where an uninterrupted run ends.
func TestTrainResumesFromSaveDir(t *testing.T) {
	dir, args, whole := resumeRuns(t)
	b := resumeConfig(t, filepath.Join(dir, "b"), 2)
	if _, err := train(b, "", "tiny", 2, 10, args, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	resumed, err := train(b, "", "tiny", 2, 20, args, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if resumed.FinalLoss != whole.FinalLoss {
		t.Fatalf("final loss after resuming %v, uninterrupted %v", resumed.FinalLoss, whole.FinalLoss)
	}
	// keep_n_most_recent: 2 leaves two tags and latest
	ents, _ := os.ReadDir(filepath.Join(dir, "b"))
	if len(ents) != 3 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("save_dir holds %v, want two checkpoints and latest", names)
	}
}

// One flipped bit in an optimizer-state file of the latest checkpoint:
// without --resume-fallback the run stops, naming the damage and the
// checkpoints that verify; with it the run resumes from the newest of them,
// says so, and ends exactly where an uninterrupted run ends.
func TestTrainResumeFallback(t *testing.T) {
	dir, args, whole := resumeRuns(t)
	saveDir := filepath.Join(dir, "b")
	b := resumeConfig(t, saveDir, 3)
	if _, err := train(b, "", "tiny", 2, 10, args, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	// A load failure that is not damage is reported as it is.
	intact := &resumer{fallback: true}
	if _, _, err := intact.fallbackTag(context.Background(), saveDir, errors.New("shapes differ")); err == nil ||
		!strings.HasSuffix(err.Error(), "shapes differ") {
		t.Fatalf("a failure to load an intact checkpoint became %v", err)
	}
	optim, _ := filepath.Glob(filepath.Join(saveDir, "global_step10", "*rank_1*optim*"))
	if len(optim) != 1 {
		t.Fatalf("optimizer-state files of rank 1: %v", optim)
	}
	data, err := os.ReadFile(optim[0])
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-5] ^= 0x04
	if err := os.WriteFile(optim[0], data, 0o644); err != nil {
		t.Fatal(err)
	}

	_, err = train(b, "", "tiny", 2, 20, args, io.Discard, io.Discard)
	for _, want := range []string{"checksum mismatch", "global_step10 does not verify",
		"checkpoints that verify, newest first: global_step5 (step 5)", "--resume-fallback"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("resuming past a damaged checkpoint without --resume-fallback: error %v, want it to say %q", err, want)
		}
	}
	t.Logf("without --resume-fallback: %v", err)

	var out strings.Builder
	args.resumeFallback = true
	resumed, err := train(b, "", "tiny", 2, 20, args, &out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"global_step10 does not verify", "resumed from global_step5 (step 5)",
		"latest now names global_step5", "resumed at step 5 from"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output does not say %q:\n%s", want, out.String())
		}
	}
	t.Logf("with --resume-fallback:\n%s", out.String())
	if resumed.FinalLoss != whole.FinalLoss {
		t.Errorf("final loss after falling back %v, uninterrupted %v", resumed.FinalLoss, whole.FinalLoss)
	}
	vs, err := checkpoint.VerifyAll(context.Background(), nil, saveDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		if v.Err != nil {
			t.Errorf("%s after the run: %v", v.Tag, v.Err)
		}
	}
	if tag, err := checkpoint.ReadLatest(nil, saveDir); err != nil || tag != "global_step20" || len(vs) != 3 {
		t.Errorf("after the run latest names %q (%v) of %+v, want global_step20 of 3", tag, err, vs)
	}
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
	if err := os.WriteFile(p, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
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
	if err != nil {
		t.Fatal(err)
	}
	return dir, args, whole
}
