// Command bench-sp measures what the sequence_parallel section buys and
// prints one JSON object; -mode picks the measurement, and the flags after
// it belong to that mode.
//
// -mode window (sequence_parallel.attention_window_size) times the
// attention core (nn.Attention, forward and backward on the CPU backend)
// with full causal attention and with a sliding window of W keys at growing
// sequence lengths T, and reports the softmax weights it keeps (att,
// [B, heads, T, min(W, T)] floats) beside the time. The fitted exponents of
// time and memory in T show full attention growing as T² and the window as
// T·W (exponent 1 once T is a few windows long).
//
// -mode ulysses: a GPT trained with DeepSpeed-Ulysses sequence parallelism
// at SP 1, 2 and 4 (in-process ranks, one thread each) on sequences of -T
// tokens: each rank's peak activation memory (the GPT's activations and
// scratch, the all-to-all buffers included) and the median step time,
// both as ratios to SP 1, next to the user's document's claim (−45%
// memory, +18% time at 16K tokens). Ulysses keeps 1/sp of every
// activation on a rank, attention's [B, heads/sp, T, T] included, so the
// memory ratio should come out near 1/sp. The step time compares one rank
// of SP sp (on its own thread) with SP 1 on one thread: with more ranks
// than the machine's cores the ranks share them, and the ratio says so.
// -T defaults to the longest power of two at which SP 1 stays under
// -budget-mib of activation memory (attention's T² term dominates).
//
//	go run ./examples/bench-sp -mode window [-t 256,512,1024,2048,4096] [-window 256]
//	go run ./examples/bench-sp -mode ulysses [-T 0] [-budget-mib 1024] [-layers 2] [-heads 8] [-width 128] [-steps 3]
package main

import (
	"fmt"
	"os"
	"strings"
)

func main() {
	if err := dispatch(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bench-sp:", err)
		os.Exit(1)
	}
}

// dispatch reads -mode NAME (or -mode=NAME; default window) from the front
// of args and hands the rest to that mode.
func dispatch(args []string) error {
	mode := "window"
	if len(args) > 0 {
		switch a := strings.TrimLeft(args[0], "-"); {
		case a == "mode" && len(args) > 1:
			mode, args = args[1], args[2:]
		case strings.HasPrefix(a, "mode="):
			mode, args = strings.TrimPrefix(a, "mode="), args[1:]
		}
	}
	switch mode {
	case "window":
		return windowMain(args)
	case "ulysses":
		return ulyssesMain(args)
	}
	return fmt.Errorf("-mode %q: not supported: want window or ulysses", mode)
}
