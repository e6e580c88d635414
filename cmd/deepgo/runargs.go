package main

import "flag"

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
