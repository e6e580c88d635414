package deepgo

// memory_breakdown: DeepSpeed's see_memory_usage (runtime/utils.py), which
// its engine calls with force=memory_breakdown at Initialize and around
// every forward, backward and step. On rank 0 it prints the point's name,
// the device's allocated and reserved memory and their peaks since the
// last report (torch's allocator counters: here the backend's
// backend.MemoryStats; on the CPU the host memory package tensor
// allocated), the host's used memory, and resets the peaks.
//
// DeepSpeed 0.19.8's timers' log takes memory_breakdown too but never
// uses it (its memory_usage suffix is not called), so the
// wall_clock_breakdown lines stay as they are.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/deepgo-ml/deepgo/backend"
)

// startMemoryBreakdown finds the backend's memory counters when the
// config asks for memory_breakdown and prints DeepSpeed's two reports of
// its engine's __init__ (before the model is partitioned).
func (e *Engine) startMemoryBreakdown() error {
	m, err := startMemoryReports(e.cfg.MemoryBreakdown, e.be, e.log, e.reportRank())
	e.mem = m
	return err
}

// startMemoryReports is both engines' startMemoryBreakdown: the counters
// (nil when off) and the two reports of DeepSpeed's __init__ on rank 0.
func startMemoryReports(on bool, be backend.Backend, w io.Writer, rank int) (backend.MemoryStats, error) {
	m, err := memoryBreakdown(on, be)
	if err != nil {
		return nil, err
	}
	seeMemory(w, m, rank, "DeepSpeed Engine: After args sanity test")
	seeMemory(w, m, rank, "DeepSpeed Engine: Before configure distributed model")
	return m, nil
}

// memoryBreakdown is be's memory counters when on, nil when off, and an
// error naming the key for a device backend without counters.
func memoryBreakdown(on bool, be backend.Backend) (backend.MemoryStats, error) {
	if !on {
		return nil, nil
	}
	s, ok := backend.StatsOf(be)
	if !ok {
		return nil, fmt.Errorf("deepgo.Initialize: memory_breakdown: true: %w: backend %s on %v reports no memory counters (backend.MemoryStats); set it false", backend.ErrUnsupported, be.Name(), be.Device())
	}
	return s, nil
}

// seeMemory prints DeepSpeed's report named msg on the reporting rank
// when memory_breakdown is on.
func (e *Engine) seeMemory(msg string) { seeMemory(e.log, e.mem, e.reportRank(), msg) }

// seeMemory prints the report named msg to w on rank 0 when m is not nil
// (memory_breakdown on).
func seeMemory(w io.Writer, m backend.MemoryStats, rank int, msg string) {
	if m == nil || rank != 0 {
		return
	}
	writeMemoryUsage(w, msg, m, readMeminfo)
}

// virtualMemory is psutil.virtual_memory's total and available bytes.
type virtualMemory struct{ total, available int64 }

// writeMemoryUsage writes see_memory_usage's three lines for msg and
// resets s's peaks, as DeepSpeed does after each report.
func writeMemoryUsage(w io.Writer, msg string, s backend.MemoryStats, vm func() (virtualMemory, error)) {
	const gib = 1 << 30
	gb := func(n int64) float64 { return float64(n) / gib }
	// The f-string's backslash-newlines keep the next line's 8 spaces.
	fmt.Fprintf(w, "%s\nMA %s GB         Max_MA %s GB         CA %s GB         Max_CA %d GB \n", msg,
		pyRound(gb(s.Allocated()), 2), pyRound(gb(s.PeakAllocated()), 2), pyRound(gb(s.Reserved()), 2),
		int64(math.RoundToEven(gb(s.PeakReserved()))))
	if v, err := vm(); err != nil {
		fmt.Fprintf(w, "CPU Virtual Memory:  unavailable: %v\n", err)
	} else {
		used := v.total - v.available
		fmt.Fprintf(w, "CPU Virtual Memory:  used = %s GB, percent = %s%%\n", pyRound(gb(used), 2),
			pyRound(float64(used)/float64(max(v.total, 1))*100, 1))
	}
	s.ResetPeak()
}

// pyRound is Python's str(round(x, nd)): x rounded to nd decimals (the
// exact binary value, ties to even), written as the shortest repr of the
// float that is, with ".0" on a whole number.
func pyRound(x float64, nd int) string {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'f', nd, 64), 64)
	r := strconv.FormatFloat(v, 'f', -1, 64)
	if !strings.ContainsAny(r, ".NI") {
		r += ".0"
	}
	return r
}

// readMeminfo reads the host's memory as psutil does on Linux:
// MemTotal and MemAvailable of /proc/meminfo.
func readMeminfo() (virtualMemory, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return virtualMemory{}, err
	}
	return parseMeminfo(b)
}

// parseMeminfo is readMeminfo's parser; available is clamped to
// [0, MemFree] past total as psutil clamps it.
func parseMeminfo(b []byte) (virtualMemory, error) {
	kb := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 {
			if n, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				kb[strings.TrimSuffix(f[0], ":")] = n * 1024
			}
		}
	}
	total, ok1 := kb["MemTotal"]
	avail, ok2 := kb["MemAvailable"]
	if !ok1 || !ok2 {
		return virtualMemory{}, fmt.Errorf("/proc/meminfo has no MemTotal or MemAvailable")
	}
	if avail < 0 {
		avail = 0
	} else if avail > total {
		avail = kb["MemFree"]
	}
	return virtualMemory{total: total, available: avail}, nil
}
