package monitor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/deepgo-ml/deepgo/rundir"
)

// pipeWord names a pipeline run's train_loss placement.
func pipeWord(after bool) string {
	if after {
		return " (a pipeline run: train_loss after the step)"
	}
	return ""
}

// RunInfoFile is deepgo's one file in a run directory (rundir.InfoFile).
const RunInfoFile = rundir.InfoFile

// RunInfo is deepgo_run.json: what a reader of the run directory needs
// besides the tags (rundir.Info, which reads it back).
type RunInfo = rundir.Info

// WriteRunInfo writes deepgo_run.json into every run directory (rank 0
// only; a no-op elsewhere or without an enabled monitor), replacing it
// whole so that a reader never sees half a file; Close writes the last
// one again with the steps observed since. The engines write one as
// Initialize ends (config, world, device, parameters, memory capacity); a
// trainer that knows more, such as its data's entropy floor, writes its
// own over it. Its train_batch_size and
// train_loss_after_step are the Monitor's (TrainBatchSize,
// WithTrainLossAfterStep): the axis the Train/Samples x values are on.
//
// A run directory whose deepgo_run.json records another train_batch_size
// or train_loss_after_step (a job resumed at another world size or batch,
// or a pipeline run into a data-parallel one's job_name) is an error, and
// deepgo_run.json is left as it was: this run's x values (global_samples =
// step × train_batch_size) would land among the earlier run's, and the
// series could no longer be read back on steps. (New has already opened
// the files, so a refused start may leave an empty tensorboard event file,
// which readers skip. A deepgo_run.json without train_batch_size, from a
// deepgo that wrote steps, is not checked.)
func (m *Monitor) WriteRunInfo(info RunInfo) error {
	m.infoMu.Lock()
	defer m.infoMu.Unlock()
	return m.writeRunInfo(info)
}

// rewriteRunInfo is Close's: the last deepgo_run.json written, with the
// last step observed when that is later than the steps it records.
func (m *Monitor) rewriteRunInfo() error {
	m.infoMu.Lock()
	defer m.infoMu.Unlock()
	if m.info == nil || int64(m.step) <= m.info.Steps {
		return nil
	}
	info := *m.info
	info.Steps = int64(m.step)
	return m.writeRunInfo(info)
}

// writeRunInfo is WriteRunInfo with infoMu held.
func (m *Monitor) writeRunInfo(info RunInfo) error {
	info.TrainBatchSize, info.TrainLossAfterStep = int64(m.batch), m.lossAfter
	for _, dir := range m.runDirs {
		old, err := rundir.ReadInfo(filepath.Join(dir, RunInfoFile))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return fmt.Errorf("monitor: %w", err)
		case old.TrainBatchSize != 0 && (old.TrainBatchSize != info.TrainBatchSize || old.TrainLossAfterStep != info.TrainLossAfterStep):
			return fmt.Errorf("monitor: run directory %s holds a run at train_batch_size %d%s; this run's is %d%s: its x values (global_samples = step × train_batch_size) would mix with the earlier ones; give this run another job_name (csv_monitor, tensorboard)",
				dir, old.TrainBatchSize, pipeWord(old.TrainLossAfterStep), info.TrainBatchSize, pipeWord(info.TrainLossAfterStep))
		}
	}
	if len(info.Config) == 0 {
		info.Config = json.RawMessage("null")
	}
	b, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return fmt.Errorf("monitor: %s: %w", RunInfoFile, err)
	}
	b = append(b, '\n')
	for _, dir := range m.runDirs {
		tmp := filepath.Join(dir, RunInfoFile+".tmp")
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			return fmt.Errorf("monitor: %w", err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, RunInfoFile)); err != nil {
			return fmt.Errorf("monitor: %w", err)
		}
	}
	if len(m.runDirs) > 0 {
		m.info = &info
	}
	return nil
}
