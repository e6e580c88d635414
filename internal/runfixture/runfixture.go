// Package runfixture writes crafted run directories in the csv_monitor
// layout (the contract package rundir reads) for tests of the tools that read
// them: a healthy run and runs that are near out of memory, bound by
// communication, or in an overflow storm. It writes the files the way
// DeepSpeed's csv_monitor does, by hand, so that the readers are tested
// against the format rather than against deepgo's own writer.
package runfixture

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/deepgo-ml/deepgo/rundir"
)

// Run is a run directory's content: the facts and one value per step for
// each tag (step i+1 has Values[tag][i]).
type Run struct {
	// Info becomes deepgo_run.json; nil writes none.
	Info *rundir.Info
	// Values are the series by tag.
	Values map[string][]float64
}

// Write writes run into dir (created) and returns dir. The step column of
// a Train/Samples tag holds DeepSpeed's global_samples (rundir.XAxis) for
// Info's train_batch_size, or TrainBatchSize when there is no Info (a run
// DeepSpeed wrote); with an Info whose train_batch_size is 0 every tag is
// at its step (the layout of a deepgo from before global_samples).
func Write(dir string, run Run) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if run.Info != nil {
		b, err := json.MarshalIndent(run.Info, "", "  ")
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, "deepgo_run.json"), b, 0o644); err != nil {
			return "", err
		}
	}
	batch := int64(TrainBatchSize)
	if run.Info != nil {
		batch = run.Info.TrainBatchSize
	}
	for tag, vals := range run.Values {
		var b strings.Builder
		// csv_monitor writes through Python's csv module: \r\n line ends
		fmt.Fprintf(&b, "step,%s\r\n", rundir.Header(tag))
		for i, v := range vals {
			x := int64(i + 1)
			if batch > 0 {
				x = rundir.XAxis{TrainBatchSize: batch}.X(tag, x)
			}
			fmt.Fprintf(&b, "%d,%s\r\n", x, strconv.FormatFloat(v, 'g', -1, 64))
		}
		if err := os.WriteFile(filepath.Join(dir, rundir.FileName(tag)), []byte(b.String()), 0o644); err != nil {
			return "", err
		}
	}
	return dir, nil
}
