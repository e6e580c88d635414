package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTrainSaveLinesAndProgress: deepgo train says "saved checkpoint
// DIR/TAG" after each save (steps_per_print 2 of 3 steps: steps 2 and 3),
// and records the steps done and the save directory for the interrupted
// line.
func TestTrainSaveLinesAndProgress(t *testing.T) {
	save := filepath.Join(t.TempDir(), "ck")
	p := resumeConfig(t, save, 0)
	js, err := os.ReadFile(p)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, bytes.Replace(js, []byte(`"steps_per_print": 5`), []byte(`"steps_per_print": 2`), 1), 0o644))
	progress := &trainProgress{}
	var out bytes.Buffer
	_, err = train(p, "", "tiny", 1, 3, trainerArgs{microBatch: 4, lr: 0.01, progress: progress}, &out, io.Discard)
	require.NoError(t, err)
	for _, tag := range []string{"global_step2", "global_step3"} {
		assert.Regexp(t, "(?m)^saved checkpoint "+regexp.QuoteMeta(filepath.Join(save, tag))+"$", out.String())
		assert.DirExists(t, filepath.Join(save, tag))
	}
	assert.Equal(t, "deepgo train: interrupted at step 3 (last checkpoint: "+filepath.Join(save, "global_step3")+")", progress.interruptedLine())
}

// TestWatchInterrupt: on SIGINT deepgo train says where it stood and exits
// 130; other ranks of a launched job exit 130 without a word; a run that
// ends closes the channel and nothing happens.
func TestWatchInterrupt(t *testing.T) {
	saved := t.TempDir()
	saveSteps(t, saved, 4)
	for _, tc := range []struct {
		name   string
		p      *trainProgress
		say    bool
		signal bool
		want   string
		code   int
	}{
		{name: "checkpoint", p: &trainProgress{step: 7, saveDir: saved}, say: true, signal: true, code: 130,
			want: "deepgo train: interrupted at step 7 (last checkpoint: " + filepath.Join(saved, "global_step4") + ")\n"},
		{name: "save_dir without checkpoint", p: &trainProgress{step: 2, saveDir: t.TempDir()}, say: true, signal: true, code: 130,
			want: "deepgo train: interrupted at step 2 (last checkpoint: none)\n"},
		{name: "no save_dir", p: &trainProgress{}, say: true, signal: true, code: 130,
			want: "deepgo train: interrupted at step 0 (last checkpoint: none)\n"},
		{name: "not rank 0", p: &trainProgress{step: 7}, signal: true, code: 130},
		{name: "run ended", p: &trainProgress{step: 7}, say: true, code: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sig := make(chan os.Signal, 1)
			if tc.signal {
				sig <- os.Interrupt
			} else {
				close(sig)
			}
			var errb bytes.Buffer
			code := -1
			watchInterrupt(sig, tc.p, tc.say, &errb, func(c int) { code = c })
			assert.Equal(t, tc.code, code)
			assert.Equal(t, tc.want, errb.String())
		})
	}
}
