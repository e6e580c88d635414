package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// A run stopped at step 10 and started again with the same config resumes
// from the latest checkpoint under save_dir (engine state and each rank's
// sampler position) and ends exactly where an uninterrupted run ends.
func TestTrainResumesFromSaveDir(t *testing.T) {
	if testing.Short() {
		t.Skip("two training runs")
	}
	dir := t.TempDir()
	cfgFor := func(save string) string {
		p := filepath.Join(dir, filepath.Base(save)+".json")
		js := fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 4, "steps_per_print": 5,
			"zero_optimization": {"stage": 2},
			"optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
			"checkpoint": {"save_dir": %q, "keep_n_most_recent": 2}}`, save)
		if err := os.WriteFile(p, []byte(js), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	args := trainerArgs{microBatch: 4, lr: 0.01}
	whole, err := train(cfgFor(filepath.Join(dir, "a")), "", "tiny", 2, 20, args, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	b := cfgFor(filepath.Join(dir, "b"))
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
