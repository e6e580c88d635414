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
// whole so that a reader never sees half a file. Its train_batch_size is
// the Monitor's (TrainBatchSize), the one the Train/Samples x values count.
func (m *Monitor) WriteRunInfo(info RunInfo) error {
	info.TrainBatchSize = int64(m.batch)
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
