package deepgo

// Under ZeRO stages 2-3 every rank must run the same module sequence, or the
// bucket reductions and stage-3 gathers pair up wrong and hang. The engine
// compares the sequences (two small all-gathers per forward) and names the
// first difference.

import (
	"context"
	"fmt"
	"hash/fnv"

	"github.com/deepgo-ml/deepgo/comm"
)

func nameHash(s string) int64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return int64(h.Sum64() >> 1)
}

// checkSequence verifies that every rank runs the same module sequence,
// and names the first module where they differ.
func (e *Engine) checkSequence(ctx context.Context, seq []int) error {
	e.forwards++
	n := e.c.Size()
	lens, err := comm.AllGatherInt64s(ctx, e.c, []int64{int64(len(seq))})
	if err != nil {
		if comm.Cancelled(err) {
			return fmt.Errorf("deepgo: forward %d: stopped: a rank's call was cancelled or past its deadline: %w", e.forwards, err)
		}
		// The first collective of a forward: a rank that skipped this step
		// (or died) shows up here, not as a module-order problem.
		return fmt.Errorf("deepgo: forward %d: not every data-parallel rank joined this step (a rank skipped it, stopped or failed): %w", e.forwards, err)
	}
	longest := 0
	for _, l := range lens {
		longest = max(longest, int(l))
	}
	mine := make([]int64, longest)
	for i, m := range seq {
		mine[i] = nameHash(e.mods[m].Name())
	}
	all, err := comm.AllGatherInt64s(ctx, e.c, mine)
	if err != nil {
		return fmt.Errorf("deepgo: forward %d: comparing the ranks' module sequences: %w", e.forwards, err)
	}
	name := func(h int64) string {
		if h == 0 {
			return "<end of sequence>"
		}
		if s, ok := e.hashes[h]; ok {
			return fmt.Sprintf("%q", s)
		}
		return fmt.Sprintf("an unknown module (hash %#x)", h)
	}
	for i := range longest {
		for r := 1; r < n; r++ {
			a, b := all[i], all[r*longest+i]
			if a != b {
				return &OrderError{Forward: e.forwards, Position: i, Rank: r, Want: name(a), Got: name(b)}
			}
		}
	}
	return nil
}

// OrderError reports ranks that run different module sequences, the
// divergence that makes DeepSpeed's ZeRO-3 hang. Every rank returns the
// same error.
type OrderError struct {
	Forward  int    // 1-based count of forwards on this engine
	Position int    // index in the module sequence
	Rank     int    // the first rank that differs from rank 0
	Want     string // rank 0's module at Position
	Got      string // rank Rank's module at Position
}

// Error names both modules and the ranks.
func (e *OrderError) Error() string {
	return fmt.Sprintf("deepgo: ranks run different module sequences (forward %d): at position %d rank 0 runs module %s but rank %d runs module %s; every data-parallel rank must run the same modules in the same order under ZeRO stage 2/3",
		e.Forward, e.Position, e.Want, e.Rank, e.Got)
}
