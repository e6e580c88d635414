// Package benchutil holds what deepgo's benchmark binaries share: timing with
// interleaved roofs, the 1- vs 2-thread compute probe, and machine facts.
package benchutil

import (
	"math"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"
)

// Best runs f reps times and returns the shortest and the median duration.
func Best(reps int, f func() error) (best, median time.Duration, err error) {
	ds := make([]time.Duration, 0, reps)
	for i := 0; i < reps; i++ {
		t0 := time.Now()
		if err := f(); err != nil {
			return 0, 0, err
		}
		ds = append(ds, time.Since(t0))
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[0], ds[len(ds)/2], nil
}

// Interleaved times a kernel and its roof alternately, reps rounds, so that
// a drift in the machine's memory bandwidth hits both alike. It returns the
// best time of each.
func Interleaved(reps int, kernel, roof func() error) (k, r time.Duration, err error) {
	k, r, _, err = InterleavedPairs(reps, kernel, roof)
	return k, r, err
}

// InterleavedPairs is Interleaved that also returns, per round, the roof's
// time over the kernel's: the two ran back to back, so each is the
// kernel's speed relative to the roof at that moment, free of the drift
// between rounds that a ratio of the two best times mixes in (a roof's
// lucky round lowers that one alone).
func InterleavedPairs(reps int, kernel, roof func() error) (k, r time.Duration, pairs []float64, err error) {
	k, r = time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
	pairs = make([]float64, 0, reps)
	for i := 0; i < reps; i++ {
		var d [2]time.Duration
		for j, f := range []func() error{roof, kernel} {
			t0 := time.Now()
			if err := f(); err != nil {
				return 0, 0, nil, err
			}
			d[j] = time.Since(t0)
		}
		r, k = min(r, d[0]), min(k, d[1])
		pairs = append(pairs, d[0].Seconds()/d[1].Seconds())
	}
	return k, r, pairs, nil
}

// GBps is bytes per duration in GB/s (1e9 bytes).
func GBps(bytes int, d time.Duration) float64 { return float64(bytes) / d.Seconds() / 1e9 }

// ThreadProbe is the 1- vs 2-thread speedup of a compute-only loop: close to
// 2 when two threads get two cores, close to 1 when the machine gives two
// threads one core's worth of time.
type ThreadProbe struct {
	OneThreadSec  float64 `json:"one_thread_sec"`
	TwoThreadsSec float64 `json:"two_threads_sec"`
	Speedup       float64 `json:"speedup"`
}

func spin(iters int) float64 {
	x := 1.0
	for i := 0; i < iters; i++ {
		x = x*1.0000001 + 1e-9
	}
	return x
}

// ProbeThreads measures the same total compute on one and on two goroutines.
func ProbeThreads() ThreadProbe {
	const iters = 50_000_000
	var sink float64
	t0 := time.Now()
	sink += spin(iters)
	one := time.Since(t0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	t0 = time.Now()
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := spin(iters / 2)
			mu.Lock()
			sink += v
			mu.Unlock()
		}()
	}
	wg.Wait()
	two := time.Since(t0)
	_ = sink
	return ThreadProbe{OneThreadSec: one.Seconds(), TwoThreadsSec: two.Seconds(), Speedup: one.Seconds() / two.Seconds()}
}

// Machine describes where a benchmark ran.
type Machine struct {
	CPUs      int    `json:"cpus"`
	CPUModel  string `json:"cpu_model"`
	GoVersion string `json:"go"`
	GOARCH    string `json:"goarch"`
}

// ThisMachine reads the machine facts.
func ThisMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), GOARCH: runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "model name") {
				if i := strings.Index(line, ":"); i >= 0 {
					m.CPUModel = strings.TrimSpace(line[i+1:])
				}
				break
			}
		}
	}
	return m
}
