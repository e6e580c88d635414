package deepgo_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/checkpoint"
	"github.com/deepgo-ml/deepgo/checkpoint/safetensors"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/stretchr/testify/require"
)

// alterTensor adds delta to element i of tensor name in data file file of
// checkpoint tag of dir, then reseals the checkpoint so that every file
// verifies again: a change no checksum catches.
func alterTensor(t *testing.T, dir, tag, file, name string, i int64, delta float32) {
	t.Helper()
	path := filepath.Join(dir, tag, file)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	f, err := os.Open(path)
	require.NoError(t, err)
	h, err := safetensors.ReadHeader(f, int64(len(b)))
	f.Close()
	require.NoError(t, err)
	info, ok := h.Find(name)
	require.True(t, ok, "%s holds no tensor %q", path, name)
	require.Less(t, i, info.Numel(), "element of %q", name)
	at := h.DataOffset + info.Begin + 4*i
	v := math.Float32frombits(binary.LittleEndian.Uint32(b[at:]))
	binary.LittleEndian.PutUint32(b[at:], math.Float32bits(v+delta))
	require.NoError(t, os.WriteFile(path, b, 0o644))
	require.NoError(t, checkpoint.Reseal(nil, dir, tag))
	ck, err := checkpoint.Open(nil, dir, tag)
	require.NoError(t, err)
	defer ck.Close()
	require.NoError(t, ck.Verify(context.Background()), "the altered checkpoint verifies")
}

// TestCheckpointReplicaMismatch is issue 20's resume consistency check
// for data-parallel replicas. Under ZeRO stage 0 every rank holds every
// parameter, but a checkpoint stores each element once (rank r's chunk of
// every unit), so one rank's replica can only differ on disk when the
// ranks read different copies of the checkpoint: node-local disks, each
// holding a copy. Rank 1 resumes from a copy in which one element of one
// parameter was changed and the manifest resealed, so every file
// verifies; after restoring, the ranks compare their parameters' digests
// and every rank fails naming the parameter and rank 1. On the CPU and
// the simulated device.
func TestCheckpointReplicaMismatch(t *testing.T) {
	t.Parallel()
	for _, dev := range []string{"", "sim"} {
		t.Run(devName(dev), func(t *testing.T) {
			r := run{stage: 0, world: 2, gas: 1, steps: 2, dev: dev}
			dir := t.TempDir()
			_, _, err := (segment{r: r, save: dir, from: 0, to: 2}).train(t)
			require.NoError(t, err)
			local := t.TempDir() // rank 1's node-local copy
			require.NoError(t, os.CopyFS(local, os.DirFS(dir)))

			tag := checkpoint.DefaultTag(2)
			ck, err := checkpoint.Open(nil, local, tag)
			require.NoError(t, err)
			p := ck.Manifest.Params[len(ck.Manifest.Params)-1]
			g, ok := ck.Lookup(p.Source)
			require.True(t, ok)
			last := p.Offset + p.Numel() - 1 // the parameter's last element
			var piece checkpoint.Piece
			for _, pc := range g.Pieces {
				if last >= pc.Offset && last < pc.Offset+pc.Length {
					piece = pc
				}
			}
			require.NotEmpty(t, piece.File, "no piece of %s holds %s's last element", p.Source, p.Name)
			ck.Close()
			alterTensor(t, local, tag, piece.File, piece.Tensor, last-piece.Offset, 0.5)

			sizes := r.layers()
			err = worldFor(dev)(context.Background(), r.world, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
				cfg, err := config.Parse([]byte(r.config()))
				if err != nil {
					return err
				}
				e, err := initEngine(ctx, cfg, testmodel.NewMLP(1, sizes...), opts...)
				if err != nil {
					return err
				}
				defer e.Close()
				from := dir
				if c.Rank() == 1 {
					from = local
				}
				_, err = e.Load(ctx, from, deepgo.LoadOptions{})
				var me *checkpoint.ReplicaMismatchError
				switch {
				case !errors.As(err, &me):
					return fmt.Errorf("rank %d: Load returned %v, want a *checkpoint.ReplicaMismatchError", c.Rank(), err)
				case me.Tensor != p.Name || len(me.Ranks) != 1 || me.Ranks[0] != 1:
					return fmt.Errorf("rank %d: mismatch names %q on ranks %v, want %q on rank 1: %v", c.Rank(), me.Tensor, me.Ranks, p.Name, err)
				case !strings.Contains(err.Error(), fmt.Sprintf("%q", p.Name)) || !strings.Contains(err.Error(), "rank(s) 1"):
					return fmt.Errorf("rank %d: error does not name %q and rank 1: %v", c.Rank(), p.Name, err)
				}
				return nil
			})
			require.NoError(t, err)
		})
	}
}
