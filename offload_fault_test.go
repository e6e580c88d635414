package deepgo_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/aio"
	"github.com/deepgo-ml/deepgo/checkpoint"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/offload"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// swapFault is what goes wrong with the optimizer's swap files after the
// checkpoint: armed on rank's store (its engine or its files) before the
// step that is to fail.
type swapFault struct {
	name string
	arm  func(t *testing.T, s *offload.NVMeStore) error
	// want is the cause the failing step's error wraps; nil: the step
	// succeeds (a fault the engine recovers from)
	want error
	// where is text the error must name (the file, the offset)
	where string
	// early arms the fault a step sooner (before the save's last step)
	early bool
}

// lastWrite is the index among a step's swap writes of the last one in
// nvmeRun's runs (18 sub-groups): pipeline_write carries it past the end of
// the step, so its failure surfaces at the next step or save.
const lastWrite = 17

// injected arms f on the store's I/O engine.
func injected(f aio.Fault) func(*testing.T, *offload.NVMeStore) error {
	return func(_ *testing.T, s *offload.NVMeStore) error { return s.Engine().InjectFault(f) }
}

// onFile changes the swap file of sub-group 2 under the running store.
func onFile(change func(path string) error) func(*testing.T, *offload.NVMeStore) error {
	return func(t *testing.T, s *offload.NVMeStore) error {
		path := filepath.Join(s.Dir(), "group2.swp")
		_, err := os.Stat(path)
		require.NoError(t, err, "the swap file to break")
		return change(path)
	}
}

// nvmeRun is the fault tests' training: stage 2 (or 3) with the optimizer
// state swapped through dir, in sub-groups of 4999 elements.
func nvmeRun(stage int, dev, dir string) run {
	return run{stage: stage, world: 1, gas: 1, steps: ckptSteps, dev: dev, sizes: []int{64, 256, 256, 16},
		zeroExtra: `, "stage3_param_persistence_threshold": 20, "sub_group_size": 4999` +
			`, "offload_optimizer": {"device": "nvme", "nvme_path": "` + dir + `", "buffer_count": 2, "pipeline_read": true, "pipeline_write": true}`}
}

// A full or failing disk under NVMe optimizer offload stops training with a
// clear error and loses nothing else. Each fault hits the step after a
// checkpoint (step ckptAt): ENOSPC on a swap write (one inside the step,
// and the step's last, which pipeline_write carries past its end so the
// next step reports it), EIO on a swap read, a read that comes back empty
// (the end of the file) and a swap file deleted or truncated under the
// run each make TrainBatch (of one of the next two steps) return an error that
// wraps the cause and names the swap file (and the offset for I/O errors),
// without hanging; a short read is resumed and changes nothing. Then the
// checkpoint still verifies, and fresh engines loading it train on to
// parameters bit-identical to an uninterrupted run's. CPU backend
// and the simulated device (where the step runs on the host).
func TestOffloadNVMeFaults(t *testing.T) {
	faults := []swapFault{
		{name: "enospc on write", arm: injected(aio.Fault{Kind: aio.FaultErrno, Errno: syscall.ENOSPC, Op: aio.FaultWrite, At: 2}),
			want: syscall.ENOSPC, where: "write "},
		{name: "eio on read", arm: injected(aio.Fault{Kind: aio.FaultErrno, Errno: syscall.EIO, Op: aio.FaultRead, At: 1}),
			want: syscall.EIO, where: "read "},
		{name: "read meets end of file", arm: injected(aio.Fault{Kind: aio.FaultEOF, Op: aio.FaultRead, At: 3}),
			want: io.ErrUnexpectedEOF, where: "read "},
		{name: "enospc on a write carried past the step", arm: injected(aio.Fault{Kind: aio.FaultErrno, Errno: syscall.ENOSPC, Op: aio.FaultWrite, At: lastWrite}),
			want: syscall.ENOSPC, where: "write "},
		{name: "short read resumed", arm: injected(aio.Fault{Kind: aio.FaultShort, Op: aio.FaultRead, At: 0})},
		{name: "swap file deleted", arm: onFile(os.Remove), want: fs.ErrNotExist, where: "swap file removed"},
		{name: "swap file truncated", arm: onFile(func(p string) error { return os.Truncate(p, 4096) }),
			want: io.ErrUnexpectedEOF, where: "read "},
	}
	for _, dev := range []string{"", "sim"} {
		ref, err := train(t, nvmeRun(2, dev, t.TempDir()))
		require.NoError(t, err)
		for _, f := range faults {
			t.Run(devName(dev)+"/"+f.name, func(t *testing.T) {
				ckdir := t.TempDir()
				r := nvmeRun(2, dev, t.TempDir())
				stepErr, resumed, err := faultThenResume(t, r, ckdir, f)
				require.NoError(t, err)
				if f.want == nil {
					require.NoError(t, stepErr, "the step after %s", f.name)
					assert.Positive(t, resumed, "short transfers the engine resumed")
				} else {
					require.Error(t, stepErr, "the step after %s", f.name)
					t.Logf("%s: %v", f.name, stepErr)
					require.ErrorIs(t, stepErr, f.want)
					assert.Contains(t, stepErr.Error(), ".swp", "the error names the swap file")
					assert.Contains(t, stepErr.Error(), f.where)
					var ae *aio.Error
					if errors.As(stepErr, &ae) {
						assert.Contains(t, stepErr.Error(), fmt.Sprintf("at offset %d", ae.Offset))
					}
				}

				verdicts, err := checkpoint.VerifyAll(context.Background(), nil, ckdir)
				require.NoError(t, err)
				require.Len(t, verdicts, 1, "checkpoints under %s", ckdir)
				require.NoError(t, verdicts[0].Err, "the checkpoint saved before the fault")
				got, _, err := segment{r: nvmeRun(2, dev, t.TempDir()), load: ckdir, from: ckptAt, to: ckptSteps}.train(t)
				require.NoError(t, err, "resuming from the checkpoint")
				require.NoError(t, bitEqual(ref.params, got), "resumed against uninterrupted")
			})
		}
	}
}

// faultThenResume trains r to ckptAt, saves to ckdir, arms f and runs the
// next two steps. It returns the first error of those, the short transfers the store's
// engine resumed, and err for anything else going wrong (a hang included:
// the run must end within a minute).
func faultThenResume(t *testing.T, r run, ckdir string, f swapFault) (stepErr error, resumed int64, err error) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		done <- worldFor(r.dev)(context.Background(), r.world, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
			return nvmeEngine(ctx, r, c, opts, func(e *deepgo.Engine, store *offload.NVMeStore, data *testmodel.Dataset) error {
				if err := trainAndSave(ctx, e, data, r, c.Rank(), ckdir); err != nil {
					return err
				}
				if err := f.arm(t, store); err != nil {
					return err
				}
				for s := ckptAt; s < ckptAt+2 && stepErr == nil; s++ {
					_, stepErr = e.TrainBatch(ctx, data.RankBatch(s, globalBatch, r.world, c.Rank(), r.gas))
				}
				resumed = store.Engine().Stats().Resumed
				return nil
			})
		})
	}()
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		err = fmt.Errorf("%s: the run did not end within a minute", f.name)
	}
	return stepErr, resumed, err
}

// A swap read that fails while a checkpoint is being saved fails the save
// with the cause: the state of that sub-group is not written as zeros. So
// does a write the last step carried past its end and that failed.
// The checkpoint before it still verifies, and the failed one is not taken
// for the latest.
func TestOffloadNVMeSaveFault(t *testing.T) {
	for _, f := range []swapFault{
		{name: "eio on read", arm: injected(aio.Fault{Kind: aio.FaultErrno, Errno: syscall.EIO, Op: aio.FaultRead, At: 2}), want: syscall.EIO},
		{name: "swap file truncated", arm: onFile(func(p string) error { return os.Truncate(p, 4096) }), want: io.ErrUnexpectedEOF},
		{name: "enospc on a write carried past the step", want: syscall.ENOSPC, early: true,
			arm: func(t *testing.T, s *offload.NVMeStore) error {
				// between steps ReadState waits for the I/O the last step
				// carried, so At counts from the next step's first write
				if _, err := s.ReadState("zero/sub0"); err != nil {
					return err
				}
				return injected(aio.Fault{Kind: aio.FaultErrno, Errno: syscall.ENOSPC, Op: aio.FaultWrite, At: lastWrite})(t, s)
			}},
	} {
		t.Run(f.name, func(t *testing.T) {
			r := nvmeRun(2, "", t.TempDir())
			ckdir := t.TempDir()
			var saveErr error
			err := worldFor(r.dev)(context.Background(), r.world, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
				return nvmeEngine(ctx, r, c, opts, func(e *deepgo.Engine, store *offload.NVMeStore, data *testmodel.Dataset) error {
					for s := range ckptAt {
						if s == ckptAt-1 && f.early {
							if err := f.arm(t, store); err != nil {
								return err
							}
						}
						if _, err := e.TrainBatch(ctx, data.RankBatch(s, globalBatch, r.world, c.Rank(), r.gas)); err != nil {
							return err
						}
						if s == 0 {
							if err := e.Save(ctx, ckdir, deepgo.SaveOptions{}); err != nil {
								return err
							}
						}
					}
					if !f.early {
						if err := f.arm(t, store); err != nil {
							return err
						}
					}
					saveErr = e.Save(ctx, ckdir, deepgo.SaveOptions{})
					return nil
				})
			})
			require.NoError(t, err)
			require.Error(t, saveErr, "Save with a failing swap read")
			t.Logf("%v", saveErr)
			require.ErrorIs(t, saveErr, f.want)
			assert.Contains(t, saveErr.Error(), ".swp")
			all, err := checkpoint.VerifyAll(context.Background(), nil, ckdir)
			require.NoError(t, err)
			var good []string
			for _, v := range all {
				if v.Err == nil {
					good = append(good, v.Tag)
				}
			}
			assert.Equal(t, []string{checkpoint.DefaultTag(1)}, good, "checkpoints that verify")
			latest, err := checkpoint.ReadLatest(nil, ckdir)
			require.NoError(t, err)
			assert.Equal(t, checkpoint.DefaultTag(1), latest, "latest")
		})
	}
}

// nvmeEngine builds rank c's engine for r with an NVMe store of the test's
// own (so faults can be armed on it) and calls fn; the engine, and with it
// the store, is closed after.
func nvmeEngine(ctx context.Context, r run, c comm.Comm, opts []deepgo.Option, fn func(e *deepgo.Engine, store *offload.NVMeStore, data *testmodel.Dataset) error) error {
	cfg, err := config.Parse([]byte(r.config()))
	if err != nil {
		return err
	}
	so, err := offload.NVMeOptionsFromConfig(cfg, c.Rank())
	if err != nil {
		return err
	}
	store, err := offload.NewNVMeStore(so)
	if err != nil {
		return err
	}
	sizes := r.layers()
	e, err := initEngine(ctx, cfg, testmodel.NewMLP(1, sizes...), append(opts, deepgo.WithStateStore(store))...)
	if err != nil {
		return errors.Join(err, store.Close())
	}
	defer e.Close()
	return fn(e, store, testmodel.NewDataset(42, 64, sizes[0], sizes[len(sizes)-1]))
}

// With two ranks and the disk failing under one of them, that rank's step
// error ends the run: the other rank returns too (the world is aborted, no
// hang), the error wraps ENOSPC, and both resume bit-identically from the
// checkpoint saved before.
func TestOffloadNVMeFaultOneRank(t *testing.T) {
	r := nvmeRun(2, "", t.TempDir()).withWorld(2)
	ref, err := train(t, nvmeRun(2, "", t.TempDir()).withWorld(2))
	require.NoError(t, err)
	ckdir := t.TempDir()
	start := time.Now()
	err = worldFor(r.dev)(context.Background(), r.world, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
		return nvmeEngine(ctx, r, c, opts, func(e *deepgo.Engine, store *offload.NVMeStore, data *testmodel.Dataset) error {
			if err := trainAndSave(ctx, e, data, r, c.Rank(), ckdir); err != nil {
				return err
			}
			if c.Rank() == 0 {
				if err := store.Engine().InjectFault(aio.Fault{Kind: aio.FaultErrno, Errno: syscall.ENOSPC, Op: aio.FaultWrite, At: 2}); err != nil {
					return err
				}
			}
			for s := ckptAt; s < ckptSteps; s++ {
				if _, err := e.TrainBatch(ctx, data.RankBatch(s, globalBatch, r.world, c.Rank(), r.gas)); err != nil {
					return err
				}
			}
			return nil
		})
	})
	t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
	require.ErrorIs(t, err, syscall.ENOSPC)
	assert.Less(t, time.Since(start), 20*time.Second, "the run ends well before the world's 30 s operation timeout")
	verdicts, err := checkpoint.VerifyAll(context.Background(), nil, ckdir)
	require.NoError(t, err)
	require.Len(t, verdicts, 1)
	require.NoError(t, verdicts[0].Err)
	got, _, err := segment{r: nvmeRun(2, "", t.TempDir()).withWorld(2), load: ckdir, from: ckptAt, to: ckptSteps}.train(t)
	require.NoError(t, err)
	require.NoError(t, bitEqual(ref.params, got))
}

// withWorld is r on n ranks.
func (r run) withWorld(n int) run {
	r.world = n
	return r
}

// trainAndSave trains rank's engine to step ckptAt and saves to ckdir.
func trainAndSave(ctx context.Context, e *deepgo.Engine, data *testmodel.Dataset, r run, rank int, ckdir string) error {
	for s := range ckptAt {
		if _, err := e.TrainBatch(ctx, data.RankBatch(s, globalBatch, r.world, rank, r.gas)); err != nil {
			return err
		}
	}
	return e.Save(ctx, ckdir, deepgo.SaveOptions{})
}
