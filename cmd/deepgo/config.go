package main

import (
	"errors"
	"flag"
	"fmt"
	"github.com/deepgo-ml/deepgo"
	"io"
	"strings"

	"github.com/deepgo-ml/deepgo/config"
)

func init() {
	register(command{name: "config", help: "check a DeepSpeed config (check FILE) or explain a key (explain KEY)", run: runConfig})
}

const configUsage = `usage:
  deepgo config check FILE [--world N] [--strict] [--hidden H] [--json]
      resolve and validate FILE; prints every value (defaults marked), the
      keys set that have no effect in deepgo, every warning, or the errors;
      exits 1 on error
  deepgo config explain KEY
      what KEY does, what it accepts and its default
`

// runConfig implements "deepgo config check" and "deepgo config explain".
// It returns the process exit code: 0 ok, 1 invalid config, 2 usage error.
func runConfig(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, configUsage)
		return 2
	}
	switch args[0] {
	case "check":
		return configCheck(args[1:], stdout, stderr)
	case "explain":
		if len(args) == 2 && isHelp(args[1]) {
			fmt.Fprint(stdout, configUsage)
			return 0
		}
		if len(args) != 2 {
			fmt.Fprint(stderr, configUsage)
			return 2
		}
		s, err := config.Explain(args[1])
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		fmt.Fprint(stdout, s+explainNoEffect(s))
		return 0
	}
	if isHelp(args[0]) || args[0] == "help" {
		fmt.Fprint(stdout, configUsage)
		return 0
	}
	fmt.Fprintf(stderr, "deepgo config: unknown subcommand %q\n%s", args[0], configUsage)
	return 2
}

func configCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("config check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, configUsage); fs.PrintDefaults() }
	world := fs.Int("world", 0, "total number of ranks (resolves the batch triad)")
	strict := fs.Bool("strict", false, "unknown keys and unresolved \"auto\" are errors")
	hidden := fs.Int("hidden", 0, "model hidden size (resolves \"auto\" ZeRO bucket sizes as HF does)")
	asJSON := fs.Bool("json", false, "print the resolved config as JSON instead of a listing (stdout holds only the JSON; nothing for an invalid config)")
	files, err := parseInterspersed(fs, args)
	if err != nil {
		return flagExit(err)
	}
	if len(files) != 1 {
		fmt.Fprint(stderr, configUsage)
		return 2
	}
	cfg, err := config.Load(files[0], config.WithWorld(*world), config.WithStrict(*strict), config.WithModelHidden(*hidden))
	if cfg != nil {
		if *asJSON && err == nil { // an invalid config's values are partly defaults: no JSON
			b, jerr := cfg.JSON()
			if jerr != nil {
				fmt.Fprintln(stderr, jerr)
				return 1
			}
			stdout.Write(b)
		} else if !*asJSON {
			printSettings(stdout, cfg)
		}
		printNoEffect(stderr, cfg)
		if len(cfg.Warnings) > 0 {
			fmt.Fprintf(stderr, "%d warning(s):\n", len(cfg.Warnings))
			for _, w := range cfg.Warnings {
				fmt.Fprintf(stderr, "  warning: %s\n", w)
			}
		}
	}
	if err != nil {
		var es config.Errors
		if errors.As(err, &es) {
			fmt.Fprintf(stderr, "%d error(s):\n", len(es))
			for _, e := range es {
				fmt.Fprintf(stderr, "  error: %s\n", e)
			}
		} else {
			fmt.Fprintf(stderr, "error: %v\n", err)
		}
		fmt.Fprintf(stderr, "%s: invalid\n", files[0])
		return 1
	}
	// a config DeepSpeed loads may still ask for what deepgo cannot train:
	// said now, not when the job starts
	if err := deepgo.Unsupported(cfg); err != nil {
		for _, e := range unjoin(err) {
			fmt.Fprintf(stderr, "  error: %v\n", e)
		}
		fmt.Fprintf(stderr, "%s: loads, but deepgo cannot train it\n", files[0])
		return 1
	}
	status := stdout
	if *asJSON { // stdout holds the JSON alone, for json.load or jq
		status = stderr
	}
	if *world > 0 {
		b, _ := cfg.Resolve(*world, 0, 0, 0)
		fmt.Fprintf(status, "batch (world %d): train_batch_size=%d = micro %d × accumulation %d × data-parallel %d\n",
			*world, b.TrainBatchSize, b.MicroBatch, b.GradAccum, b.DataParallel)
	}
	fmt.Fprintf(status, "%s: ok\n", files[0])
	return 0
}

func printSettings(w io.Writer, cfg *config.Config) {
	ss, err := cfg.Settings()
	if err != nil {
		fmt.Fprintln(w, err)
		return
	}
	width := 0
	for _, s := range ss {
		width = max(width, len(s.Path))
	}
	for _, s := range ss {
		mark := ""
		switch {
		case s.Auto:
			mark = "  # from \"auto\""
		case s.Default:
			mark = "  # default"
		}
		fmt.Fprintf(w, "%-*s = %s%s\n", width, s.Path, s.Value, mark)
	}
	if len(cfg.Unresolved) > 0 {
		fmt.Fprintf(w, "unresolved \"auto\": %s\n", strings.Join(cfg.Unresolved, ", "))
	}
}

// unjoin lists the errors errors.Join put together (err itself otherwise).
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
