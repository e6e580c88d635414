package monitor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/deepgo-ml/deepgo/rundir"
)

// RunInfoFile is deepgo's one file in a run directory (rundir.InfoFile).
const RunInfoFile = rundir.InfoFile

// RunInfo is deepgo_run.json: what a reader of the run directory needs
// besides the tags (rundir.Info, which reads it back).
type RunInfo = rundir.Info

// WriteRunInfo writes deepgo_run.json into every run directory (rank 0
// only; a no-op elsewhere or without an enabled monitor), replacing it
// whole so that a reader never sees half a file. Its train_batch_size and
// train_loss_after_step are the Monitor's (TrainBatchSize,
// WithTrainLossAfterStep): the axis the Train/Samples x values are on.
func (m *Monitor) WriteRunInfo(info RunInfo) error {
	info.TrainBatchSize, info.TrainLossAfterStep = int64(m.batch), m.lossAfter
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
	return nil
}
