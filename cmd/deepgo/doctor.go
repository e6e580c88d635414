package main

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/doctor"
	"github.com/deepgo-ml/deepgo/rundir"
)

func init() {
	register(command{name: "doctor", help: "diagnose a run directory with the guide's §4.2 table (memory, communication, spikes, bubbles)", run: runDoctor})
}

const doctorUsage = `usage:
  deepgo doctor RUN_DIR [--config FILE]
      RUN_DIR is a monitor's output_path/job_name (csv_monitor or
      tensorboard files, deepgo_run.json where deepgo wrote it); --config
      overrides the config recorded there.
      Prints what each rule measured and every finding with the numbers
      that triggered it and what to change. Exit status 0 when the run is
      healthy, 3 when there are findings, 4 when nothing could be measured
      (no series the rules read), 1 or 2 on errors.
`

// doctorFindings is the exit status when the run has findings, so that a
// script can tell "sick" from "could not read".
const doctorFindings = 3

// doctorNothingMeasured is the exit status when the run has none of the
// series the rules read (and no finding): its health is unknown, not good.
const doctorNothingMeasured = 4

// runDoctor implements "deepgo doctor".
func runDoctor(args []string, stdout, stderr io.Writer) int {
	fs := newRunFlags("doctor", doctorUsage, stderr)
	cfgPath := fs.String("config", "", "DeepSpeed config file (default: the one in deepgo_run.json)")
	run, code := readRunArg(fs, args, stderr)
	if run == nil {
		return code
	}
	cfg, from, err := doctorConfig(run, *cfgPath)
	if err != nil {
		fmt.Fprintln(stderr, "deepgo doctor:", err)
		return 1
	}
	rep := doctor.Diagnose(doctor.Input{Run: run, Config: cfg})
	printDoctor(stdout, run, from, rep)
	if len(rep.Findings) > 0 {
		return doctorFindings
	}
	if rep.Measured == 0 {
		return doctorNothingMeasured
	}
	return 0
}

// doctorConfig is the --config file, else the config the run recorded, else
// none (the rules that need it say so).
func doctorConfig(run *rundir.Run, path string) (*config.Config, string, error) {
	world := 0
	if run.Info != nil {
		world = run.Info.World
	}
	opts := []config.Option{}
	if world > 0 {
		opts = append(opts, config.WithWorld(world))
	}
	switch {
	case path != "":
		cfg, err := config.Load(path, opts...)
		if err != nil {
			return nil, "", fmt.Errorf("--config %s: %w", path, err)
		}
		return cfg, path, nil
	case run.Info.HasConfig():
		cfg, err := config.Parse(run.Info.Config, opts...)
		if err != nil {
			return nil, "", fmt.Errorf("%s/deepgo_run.json: config: %w", run.Dir, err)
		}
		return cfg, "deepgo_run.json", nil
	}
	return nil, "none (pass --config)", nil
}

func printDoctor(w io.Writer, run *rundir.Run, cfgFrom string, rep doctor.Report) {
	fmt.Fprintf(w, "deepgo doctor: %s\n", run.Dir)
	if in := run.Info; in != nil {
		fmt.Fprintf(w, "run: %d steps, world %d, device %s, %d params; config: %s\n", in.Steps, in.World, in.Device, in.Params, cfgFrom)
	} else {
		fmt.Fprintf(w, "run: no deepgo_run.json; config: %s\n", cfgFrom)
	}
	fmt.Fprintln(w, "checked:")
	for _, c := range rep.Checked {
		fmt.Fprintf(w, "  %s\n", c)
	}
	if rep.Measured == 0 {
		why := "enable csv_monitor or tensorboard in the config (\"csv_monitor\": {\"enabled\": true}) and run again"
		if m, _ := filepath.Glob(filepath.Join(run.Dir, rundir.EventFilePrefix+"*")); len(m) > 0 {
			why = fmt.Sprintf("its %d tensorboard event file(s) hold none of them (empty, or cut short before the first step's scalars)", len(m))
		}
		fmt.Fprintf(w, "nothing measured: doctor reads csv_monitor and tensorboard files (<output_path>/<job_name>/*.csv, %s*) and %s has none of the series its rules read; %s\n",
			rundir.EventFilePrefix, run.Dir, why)
	}
	if len(rep.Findings) == 0 {
		if rep.Measured > 0 {
			fmt.Fprintln(w, "no findings: the run meets every target checked")
		}
		return
	}
	for i, f := range rep.Findings {
		fmt.Fprintf(w, "\nfinding %d [%s]: %s\n", i+1, f.Rule, f.Title)
		for _, e := range f.Evidence {
			fmt.Fprintf(w, "  measured: %s\n", e)
		}
		for _, a := range f.Advice {
			fmt.Fprintf(w, "  try: %s\n", a.Text)
		}
	}
}
