package deepgo_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Load of a folder that holds no checkpoint yet (a first run) fails with
// an error wrapping fs.ErrNotExist on every rank, what Trainer.Load
// promises a resuming trainer, which then trains from the start; both
// engines, on the CPU and on the simulated device.
func TestLoadWithoutCheckpoint(t *testing.T) {
	for _, dev := range []string{"", "sim"} {
		t.Run(devName(dev), func(t *testing.T) {
			dir := t.TempDir()
			err := worldFor(dev)(context.Background(), 2, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
				cfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}, "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}}`))
				if err != nil {
					return err
				}
				e, err := initEngine(ctx, cfg, testmodel.NewMLP(1, sizes...), opts...)
				if err != nil {
					return err
				}
				defer e.Close()
				if _, err := e.Load(ctx, dir, deepgo.LoadOptions{}); !errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("rank %d: Load of an empty folder: %v, want an error wrapping fs.ErrNotExist", c.Rank(), err)
				}
				return nil
			})
			require.NoError(t, err)
			p := &pipeCkptRun{pp: 2, dp: 1, dev: dev, load: t.TempDir(), from: 0, to: 1,
				wantLoadErr: func(rank int, err error) error {
					if !errors.Is(err, fs.ErrNotExist) {
						return fmt.Errorf("pipeline rank %d: Load of an empty folder: %v, want an error wrapping fs.ErrNotExist", rank, err)
					}
					return nil
				}}
			assert.NoError(t, p.run(t))
		})
	}
}
