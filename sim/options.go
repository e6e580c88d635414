package sim

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

// DelayEnv names the environment variable that turns on the randomized
// delay mode for every simulated device of the process whose Options leave
// MaxDelay at 0: a Go duration such as "200us". CI reruns whole test tables
// with it set.
const DelayEnv = "DEEPGO_SIM_DELAY"

// SeedEnv names the environment variable that seeds the delays when
// Options.Seed is 0 (an integer).
const SeedEnv = "DEEPGO_SIM_SEED"

// Options configure a simulated device. The zero value is ready to use.
type Options struct {
	// MaxDelay makes every kernel and copy sleep a random time in
	// [0, MaxDelay) on its stream before it runs, so that work issued on
	// different streams, or read by the host without a wait, completes in
	// an order the host cannot predict. 0 means the value of
	// DEEPGO_SIM_DELAY (none when unset); < 0 means no delay even then.
	MaxDelay time.Duration
	// Seed seeds the delays (each stream draws from its own generator
	// seeded by Seed and the stream's number). 0 means DEEPGO_SIM_SEED,
	// else 1.
	Seed int64
	// Threads is the size of the C thread pool the kernels run on; 0 means
	// one per CPU.
	Threads int
}

// resolve applies the environment to o.
func (o Options) resolve() (Options, error) {
	switch {
	case o.MaxDelay < 0:
		o.MaxDelay = 0
	case o.MaxDelay == 0:
		if v := os.Getenv(DelayEnv); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return o, fmt.Errorf("%s=%q: want a non-negative Go duration such as \"200us\"", DelayEnv, v)
			}
			o.MaxDelay = d
		}
	}
	if o.Seed == 0 {
		o.Seed = 1
		if v := os.Getenv(SeedEnv); v != "" {
			s, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return o, fmt.Errorf("%s=%q: want an integer", SeedEnv, v)
			}
			o.Seed = s
		}
	}
	if o.Threads < 0 {
		return o, fmt.Errorf("Options.Threads = %d: want >= 0 (0: one per CPU)", o.Threads)
	}
	return o, nil
}
