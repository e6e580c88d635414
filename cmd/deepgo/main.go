// Command deepgo is deepgo's command line: training, config checks, memory
// estimates, checkpoint tools and a self-test of the native core.
//
//	deepgo train --config FILE [--data PATH]  train a GPT on in-process ranks (one rank per process under a launcher)
//	deepgo launch [flags] -- PROGRAM ARGS...  run a program as the processes of a job (DeepSpeed's launcher flags)
//	deepgo config check FILE                  resolve and validate a DeepSpeed config
//	deepgo config explain KEY                 what a config key does, and its default
//	deepgo estimate --params N --world W      ZeRO model-state memory, DeepSpeed's and ours
//	deepgo ckpt inspect DIR                   tags, steps, world, sizes; verify checksums
//	deepgo ckpt consolidate DIR OUT           full float32 weights as one safetensors file
//	deepgo plot RUN_DIR [--out DIR]           PNG charts of a monitored run
//	deepgo doctor RUN_DIR [--config C]        the guide's §4.2 diagnosis of a monitored run
//	deepgo selftest                           every kernel against a float64 Go reference
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// command is one subcommand: it gets its own arguments and returns the exit code.
type command struct {
	name string
	help string
	run  func(args []string, stdout, stderr io.Writer) int
}

// commands is filled by the files of this package, one per subcommand.
var commands []command

func register(c command) { commands = append(commands, c) }

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: deepgo <command> [arguments]")
	fmt.Fprintln(w, "commands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.help)
	}
}

// isHelp reports whether arg asks for a command's usage, as the flag
// package reads -h and -help (with one dash or two).
func isHelp(arg string) bool {
	switch arg {
	case "-h", "--h", "-help", "--help":
		return true
	}
	return false
}

// flagExit is a command's exit status after its flags failed to parse: 0
// when -h or --help asked for the usage (the flag set printed it), 2 for a
// usage error. Every command's -h exits 0, as deepgo -h does.
func flagExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "deepgo: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}
