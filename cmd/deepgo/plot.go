package main

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/deepgo-ml/deepgo/runplot"
)

func init() {
	register(command{name: "plot", help: "PNG charts of a run directory: loss, lr, loss scale, time breakdown, memory", run: runPlot})
}

const plotUsage = `usage:
  deepgo plot RUN_DIR [--out DIR]
      RUN_DIR is a monitor's output_path/job_name (csv_monitor or
      tensorboard files, deepgo_run.json where deepgo wrote it); the PNGs
      go to --out (default RUN_DIR/plots).
      A chart whose tags the run lacks is skipped with a note.
`

// runPlot implements "deepgo plot".
func runPlot(args []string, stdout, stderr io.Writer) int {
	fs := newRunFlags("plot", plotUsage, stderr)
	out := fs.String("out", "", "output directory (default RUN_DIR/plots)")
	run, code := readRunArg(fs, args, stderr)
	if run == nil {
		return code
	}
	if *out == "" {
		*out = filepath.Join(run.Dir, "plots")
	}
	res, err := runplot.Write(run, *out)
	for _, s := range res.Skipped {
		fmt.Fprintln(stderr, "deepgo plot: note:", s)
	}
	if err != nil {
		fmt.Fprintln(stderr, "deepgo plot:", err)
		return 1
	}
	for _, p := range res.Written {
		fmt.Fprintln(stdout, "wrote", p)
	}
	return 0
}
