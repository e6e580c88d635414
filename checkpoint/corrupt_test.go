package checkpoint

import (
	"context"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// loadAll does what a resume does before touching an engine: open the
// latest checkpoint, verify every file, read every tensor.
func loadAll(dir string) error {
	ck, err := Open(nil, dir, "")
	if err != nil {
		return err
	}
	defer ck.Close()
	if err := ck.Verify(context.Background()); err != nil {
		return err
	}
	for _, n := range ck.Names() {
		x, err := ck.ReadTensor(context.Background(), n)
		if err != nil {
			return err
		}
		x.Free()
	}
	return nil
}

// samplePositions picks up to k byte offsets of a file of size bytes:
// the first 24 (length prefix, start of header), the last 8, and random
// ones in between.
func samplePositions(rng *rand.Rand, size, k int) []int {
	if size <= k {
		out := make([]int, size)
		for i := range out {
			out[i] = i
		}
		return out
	}
	var out []int
	for i := 0; i < 24 && i < size; i++ {
		out = append(out, i)
	}
	for i := max(24, size-8); i < size; i++ {
		out = append(out, i)
	}
	for len(out) < k {
		out = append(out, 24+rng.IntN(size-32))
	}
	return out
}

func TestEveryBitFlipDetected(t *testing.T) {
	dir := t.TempDir()
	saveWorld(t, dir, 2, 4, Options{})
	require.NoError(t, loadAll(dir))
	tagDir := filepath.Join(dir, "global_step4")
	files := map[string]string{ // file type → path
		"latest":            filepath.Join(dir, "latest"),
		"manifest":          filepath.Join(tagDir, "manifest.json"),
		"model safetensors": filepath.Join(tagDir, fileName(1, "model")),
		"optim safetensors": filepath.Join(tagDir, fileName(0, "optim")),
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for kind, path := range files {
		orig, err := os.ReadFile(path)
		require.NoError(t, err)
		flips := 0
		for _, pos := range samplePositions(rng, len(orig), 48) {
			for bit := range 8 {
				b := append([]byte(nil), orig...)
				b[pos] ^= 1 << bit
				require.NoError(t, os.WriteFile(path, b, 0o644))
				err := loadAll(dir)
				require.Error(t, err, "%s: flip of bit %d at byte %d not detected", kind, bit, pos)
				require.ErrorContains(t, err, filepath.Base(path), "%s: flip at %d.%d: error does not name the file", kind, pos, bit)
				flips++
			}
		}
		require.NoError(t, os.WriteFile(path, orig, 0o644))
		t.Logf("%s (%d bytes): %d flips detected", kind, len(orig), flips)
	}
	require.NoError(t, loadAll(dir), "restored checkpoint")
}

func TestMissingAndTruncatedFiles(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(dir, tagDir string) error
		is     error
		want   string
	}{
		{"missing data file", func(_, td string) error { return os.Remove(filepath.Join(td, fileName(1, "optim"))) }, fs.ErrNotExist, fileName(1, "optim")},
		{"truncated data file", func(_, td string) error { return os.Truncate(filepath.Join(td, fileName(0, "model")), 100) }, ErrCorrupt, "truncated"},
		{"grown data file", func(_, td string) error {
			f, err := os.OpenFile(filepath.Join(td, fileName(0, "model")), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			f.Write([]byte{0})
			return f.Close()
		}, ErrCorrupt, "longer than recorded"},
		{"missing manifest", func(_, td string) error { return os.Remove(filepath.Join(td, manifestName)) }, fs.ErrNotExist, manifestName},
		{"truncated manifest", func(_, td string) error { return os.Truncate(filepath.Join(td, manifestName), 50) }, nil, manifestName},
		{"missing latest", func(d, _ string) error { return os.Remove(filepath.Join(d, latestName)) }, fs.ErrNotExist, latestName},
		{"latest names a missing tag", func(d, _ string) error {
			return os.WriteFile(filepath.Join(d, latestName), encodeLatest("global_step99"), 0o644)
		}, fs.ErrNotExist, "global_step99"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			saveWorld(t, dir, 2, 4, Options{})
			require.NoError(t, tc.damage(dir, filepath.Join(dir, "global_step4")))
			err := loadAll(dir)
			require.Error(t, err)
			if tc.is != nil {
				require.ErrorIs(t, err, tc.is)
			}
			require.ErrorContains(t, err, tc.want)
			t.Log(err)
		})
	}
}
