package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/deepgo-ml/deepgo/checkpoint"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCkptInspectConsolidate(t *testing.T) {
	dir := t.TempDir()
	w, _ := tensor.FromFloat32([]float32{1, 2, 3, 4, 5, 6})
	defer w.Free()
	st := &checkpoint.State{Step: 3, Tensors: []checkpoint.Entry{{Name: "flat", Data: w, Shard: &checkpoint.Shard{Numel: 5}}},
		Params: []checkpoint.ParamRef{{Name: "w", Shape: []int{2, 2}, Source: "flat", Offset: 1}}}
	_, err := checkpoint.Save(context.Background(), checkpoint.Options{Dir: dir}, st)
	require.NoError(t, err)
	var out, errb bytes.Buffer
	code := run([]string{"ckpt", "inspect", dir}, &out, &errb)
	require.Zero(t, code, "inspect\n%s%s", out.String(), errb.String())
	require.Contains(t, out.String(), "global_step3", "inspect output")
	require.Contains(t, out.String(), "0 bad", "inspect output")
	dst := filepath.Join(t.TempDir(), "out.safetensors")
	code = run([]string{"ckpt", "consolidate", dir, dst}, &out, &errb)
	require.Zero(t, code, "consolidate\n%s", errb.String())
	fi, err := os.Stat(dst)
	require.NoError(t, err)
	require.NotZero(t, fi.Size(), "consolidated file is empty")
	files, _ := filepath.Glob(filepath.Join(dir, "global_step3", "*.safetensors"))
	b, _ := os.ReadFile(files[0])
	b[len(b)-1] ^= 1
	os.WriteFile(files[0], b, 0o644)
	out.Reset()
	code = run([]string{"ckpt", "inspect", dir}, &out, &errb)
	require.Equal(t, 1, code, "inspect of a damaged checkpoint\n%s", out.String())
	require.Contains(t, out.String(), "checksum mismatch", "inspect of a damaged checkpoint")

}

// saveSteps saves a small checkpoint at each step into dir.
func saveSteps(t *testing.T, dir string, steps ...int64) {
	t.Helper()
	for _, step := range steps {
		w, err := tensor.FromFloat32([]float32{1, 2, 3, 4, 5, 6})
		require.NoError(t, err)
		st := &checkpoint.State{Step: step, Tensors: []checkpoint.Entry{{Name: "flat", Data: w, Shard: &checkpoint.Shard{Numel: 5}}},
			Params: []checkpoint.ParamRef{{Name: "w", Shape: []int{2, 2}, Source: "flat", Offset: 1}}}
		_, err = checkpoint.Save(context.Background(), checkpoint.Options{Dir: dir}, st)
		w.Free()
		require.NoError(t, err)
	}
}

// flipLastByte flips a bit of the last byte of the first file matching glob.
func flipLastByte(t *testing.T, glob string) {
	t.Helper()
	files, _ := filepath.Glob(glob)
	require.NotEmpty(t, files, glob)
	b, err := os.ReadFile(files[0])
	require.NoError(t, err)
	b[len(b)-1] ^= 1
	require.NoError(t, os.WriteFile(files[0], b, 0o644))
}

// TestCkptInspectEveryTag: inspect verifies every checkpoint it lists, not
// only the latest, and marks the damaged ones (a bad data file, a bad
// manifest); it reads a DeepSpeed latest file and names a missing tag.
func TestCkptInspectEveryTag(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir string)
		code   int
		want   []*regexp.Regexp // on stdout+stderr
	}{
		{name: "intact", damage: func(*testing.T, string) {}, code: 0,
			want: []*regexp.Regexp{regexp.MustCompile(`(?m)^global_step1 .* ok\s*$`), regexp.MustCompile(`(?m)^global_step3 .* ok  <- latest`)}},
		{name: "older data file", damage: func(t *testing.T, dir string) {
			flipLastByte(t, filepath.Join(dir, "global_step1", "*.safetensors"))
		}, code: 1, want: []*regexp.Regexp{regexp.MustCompile(`(?m)^global_step1 .* DAMAGED: .*checksum mismatch`), regexp.MustCompile(`(?m)^global_step2 .* ok\s*$`),
			regexp.MustCompile(`1 checkpoint\(s\) damaged`)}},
		{name: "older manifest", damage: func(t *testing.T, dir string) {
			require.NoError(t, os.Truncate(filepath.Join(dir, "global_step2", "manifest.json"), 20))
		}, code: 1, want: []*regexp.Regexp{regexp.MustCompile(`(?m)^global_step2 +- .*DAMAGED: .*manifest.json`)}},
		{name: "latest data file", damage: func(t *testing.T, dir string) {
			flipLastByte(t, filepath.Join(dir, "global_step3", "*.safetensors"))
		}, code: 1, want: []*regexp.Regexp{regexp.MustCompile(`(?m)^global_step3 .* DAMAGED: 1 bad file\(s\), see below  <- latest`), regexp.MustCompile(`FAIL: .*checksum mismatch`)}},
		{name: "DeepSpeed latest", damage: func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "latest"), []byte("global_step3"), 0o644))
		}, code: 0, want: []*regexp.Regexp{regexp.MustCompile(`(?m)^global_step3 .* ok  <- latest`), regexp.MustCompile(`verifying global_step3:`)}},
		// a bare tag older than another checkpoint reads like a cut-short
		// deepgo latest file ("global_step1" of "global_step10..."): refused
		{name: "bare tag older than the newest", damage: func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "latest"), []byte("global_step2"), 0o644))
		}, code: 1, want: []*regexp.Regexp{regexp.MustCompile(`names "global_step2" without a checksum .* "global_step3" holds a later step`)}},
		{name: "latest names a missing tag", damage: func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "latest"), []byte("global_step10\n"), 0o644))
		}, code: 1, want: []*regexp.Regexp{regexp.MustCompile(`tag "global_step10" named by .*latest not found \(tags present: global_step1, global_step2, global_step3\)`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			saveSteps(t, dir, 1, 2, 3)
			tc.damage(t, dir)
			var out, errb bytes.Buffer
			code := run([]string{"ckpt", "inspect", dir}, &out, &errb)
			all := out.String() + errb.String()
			assert.Equal(t, tc.code, code, all)
			for _, w := range tc.want {
				assert.Regexp(t, w, all)
			}
		})
	}
}

// TestCkptArgs: -tag may follow DIR; a -tag that names no checkpoint fails
// at once naming the tags there; a wrong argument count or command says
// what was wanted.
func TestCkptArgs(t *testing.T) {
	dir := t.TempDir()
	saveSteps(t, dir, 2, 4)
	cases := []struct {
		args          []string
		code          int
		stdout, inErr string
	}{
		{[]string{"inspect", dir, "-tag", "global_step2"}, 0, "global_step2", ""},
		{[]string{"inspect", "-tag", "nope", dir}, 1, "", `-tag "nope": no checkpoint of that tag in ` + dir + " (it holds: global_step2, global_step4)"},
		{[]string{"inspect", dir, "extra"}, 2, "", `deepgo ckpt inspect: want DIR, got 2 argument(s)`},
		{[]string{"consolidate", dir}, 2, "", `deepgo ckpt consolidate: want DIR OUT.safetensors, got 1 argument(s)`},
		{[]string{"frob", dir}, 2, "", `unknown command "frob"`},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		code := run(append([]string{"ckpt"}, c.args...), &out, &errb)
		assert.Equal(t, c.code, code, "%v\n%s%s", c.args, out.String(), errb.String())
		assert.Contains(t, out.String(), c.stdout, "%v", c.args)
		assert.Contains(t, errb.String(), c.inErr, "%v", c.args)
	}
}

// TestCkptTagFolder: inspect and consolidate read one checkpoint's folder
// (DIR/global_step1) as -tag global_step1 DIR, as checkpoint.load_path
// does, instead of failing on its missing latest file.
func TestCkptTagFolder(t *testing.T) {
	dir := t.TempDir()
	saveSteps(t, dir, 1, 2)
	var out, errb bytes.Buffer
	code := run([]string{"ckpt", "inspect", filepath.Join(dir, "global_step1")}, &out, &errb)
	require.Zero(t, code, "inspect\n%s%s", out.String(), errb.String())
	require.Contains(t, out.String(), "verifying global_step1:")
	out.Reset()
	code = run([]string{"ckpt", "consolidate", filepath.Join(dir, "global_step1") + "/", filepath.Join(t.TempDir(), "m.safetensors")}, &out, &errb)
	require.Zero(t, code, "consolidate\n%s", errb.String())
	require.Contains(t, out.String(), "of global_step1 (step 1,")
}
