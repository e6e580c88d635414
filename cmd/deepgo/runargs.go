package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/deepgo-ml/deepgo/rundir"
)

// newRunFlags is the flag set of a command over one run directory.
func newRunFlags(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	return fs
}

// readRunArg parses fs's flags and the one RUN_DIR argument and reads the
// run. On failure it has said why and returns nil with the exit status:
// 2 for usage (0 for -h), 1 for a run that cannot be read.
func readRunArg(fs *flag.FlagSet, args []string, stderr io.Writer) (*rundir.Run, int) {
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return nil, flagExit(err)
	}
	if len(pos) != 1 {
		fs.Usage()
		return nil, 2
	}
	run, err := rundir.Read(pos[0])
	if err != nil {
		fmt.Fprintf(stderr, "deepgo %s: %v\n", fs.Name(), err)
		return nil, 1
	}
	for _, n := range run.Notes {
		fmt.Fprintf(stderr, "deepgo %s: note: %s\n", fs.Name(), n)
	}
	return run, 0
}

// parseInterspersed parses fs's flags wherever they stand among args
// ("deepgo doctor RUN --config C" as well as "deepgo doctor --config C RUN")
// and returns the positional arguments; the flag package alone stops at the
// first of them.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
