package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTrainLoadModuleOnly: a run saved with --freeze does not resume whole
// without it (no optimizer state for the thawed parameters: the error
// says what to do), and --load-module-only seeds a new save_dir from it
// with the parameters alone: step 1 is the first step, and at lr 0 the
// trained weights are the checkpoint's bit for bit; the pipeline engine
// refuses and seeds alike. A restart of the
// seeded run resumes from its own checkpoint. Without checkpoint.load_path,
// or with one inside save_dir, the flag is refused before training.
func TestTrainLoadModuleOnly(t *testing.T) {
	dir := t.TempDir()
	first, second := filepath.Join(dir, "first"), filepath.Join(dir, "second")
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		return p
	}
	base := `"train_micro_batch_size_per_gpu": 4, "steps_per_print": 100, "zero_optimization": {"stage": 2}`
	cfg1 := write("first.json", fmt.Sprintf(`{%s, "checkpoint": {"save_dir": %q}}`, base, first))
	cfg2 := write("second.json", fmt.Sprintf(`{%s, "checkpoint": {"save_dir": %q, "load_path": %q}}`, base, second, first))
	inside := write("inside.json", fmt.Sprintf(`{%s, "checkpoint": {"save_dir": %q, "load_path": %q}}`, base, first, filepath.Join(first, "global_step3")))

	train := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(append([]string{"train", "--model", "small", "--ranks", "2"}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}
	code, _, errs := train("--config", cfg1, "--steps", "3", "--freeze", "wte")
	require.Zero(t, code, errs)

	code, _, errs = train("--config", cfg1, "--steps", "5")
	assert.NotZero(t, code)
	assert.Contains(t, errs, `parameter "transformer.wte.weight" is trainable but was frozen when saved`)
	assert.Contains(t, errs, "--load-module-only")

	export := filepath.Join(dir, "export")
	code, out, errs := train("--config", cfg2, "--steps", "2", "--lr", "0", "--load-module-only", "--save-model", export)
	require.Zero(t, code, errs)
	assert.Contains(t, out, "--load-module-only: loaded the parameters of "+filepath.Join(first, "global_step3"))
	assert.Contains(t, out, "step 2 loss")
	want := filepath.Join(dir, "want.safetensors")
	var o, e bytes.Buffer
	require.Zero(t, run([]string{"ckpt", "consolidate", first, want}, &o, &e), e.String())
	_, wantT := readTensors(t, want)
	_, gotT := readTensors(t, filepath.Join(export, "model.safetensors"))
	require.Equal(t, len(wantT), len(gotT))
	for name, w := range wantT {
		assert.True(t, bytes.Equal(w, gotT[name]), "%s differs from the seeding checkpoint's", name)
	}

	// a restart finds the seeded run's own checkpoint and resumes it whole
	code, out, errs = train("--config", cfg2, "--steps", "3", "--load-module-only")
	require.Zero(t, code, errs)
	assert.Contains(t, out, "resumed at step 2 from "+second)
	assert.NotContains(t, out, "--load-module-only: loaded")

	// the pipeline engine (which has no frozen parameters) says the same
	pipe := func(name, save string) string {
		return write(name, fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "pipeline_model_parallel_size": 2,
			"steps_per_print": 100, "checkpoint": {"save_dir": %q, "load_path": %q}}`, filepath.Join(dir, save), first))
	}
	code, _, errs = train("--config", pipe("pipe1.json", "pipe1"), "--steps", "4")
	assert.NotZero(t, code)
	assert.Contains(t, errs, "pipeline engine: Load: ")
	assert.Contains(t, errs, `parameter "transformer.wte.weight" is trainable but was frozen when saved`)
	code, out, errs = train("--config", pipe("pipe2.json", "pipe2"), "--steps", "1", "--load-module-only")
	require.Zero(t, code, errs)
	assert.Contains(t, out, "--load-module-only: loaded the parameters of ")

	for _, c := range []struct{ cfg, want string }{
		{cfg1, "no checkpoint.load_path"},
		{inside, "is checkpoint.save_dir or inside it"},
	} {
		code, _, errs = train("--config", c.cfg, "--steps", "4", "--load-module-only")
		assert.NotZero(t, code)
		assert.Contains(t, errs, "--load-module-only: ")
		assert.Contains(t, errs, c.want)
	}
}
