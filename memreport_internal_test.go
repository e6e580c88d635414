package deepgo

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeStats is a backend.MemoryStats of fixed numbers that records its
// resets.
type fakeStats struct {
	a, pa, r, pr int64
	resets       int
}

func (f *fakeStats) Allocated() int64     { return f.a }
func (f *fakeStats) PeakAllocated() int64 { return f.pa }
func (f *fakeStats) Reserved() int64      { return f.r }
func (f *fakeStats) PeakReserved() int64  { return f.pr }
func (f *fakeStats) ResetPeak()           { f.resets++ }

// TestMemoryUsageGolden: the report's lines are DeepSpeed 0.19.8's
// see_memory_usage f-strings (runtime/utils.py), byte for byte: the
// goldens were printed by Python from those f-strings with these numbers
// (round(x, 2) ties to even on the binary value, round(x) to an int, the
// backslash-newlines leaving 8 spaces, the trailing space), and the peaks
// are reset after each report.
func TestMemoryUsageGolden(t *testing.T) {
	const G = 1 << 30
	for _, tc := range []struct {
		s            fakeStats
		total, avail int64
		want         string
	}{
		{fakeStats{a: 3 * G / 2, pa: 9 * G / 4, r: 3 * G, pr: 7 * G / 2}, 16 * G, 16*G - 123456789,
			"MA 1.5 GB         Max_MA 2.25 GB         CA 3.0 GB         Max_CA 4 GB \nCPU Virtual Memory:  used = 0.11 GB, percent = 0.7%\n"},
		{fakeStats{a: 123456789, pa: 987654321, r: 123456789, pr: 5 * G / 2}, 134914404352, 100000000000,
			"MA 0.11 GB         Max_MA 0.92 GB         CA 0.11 GB         Max_CA 2 GB \nCPU Virtual Memory:  used = 32.52 GB, percent = 25.9%\n"},
		{fakeStats{}, 8 * G, 8 * G,
			"MA 0.0 GB         Max_MA 0.0 GB         CA 0.0 GB         Max_CA 0 GB \nCPU Virtual Memory:  used = 0.0 GB, percent = 0.0%\n"},
		{fakeStats{a: G / 8, pa: 144955147, r: 5*G + 7, pr: 9 * G / 2}, 7 * G, 3 * G,
			"MA 0.12 GB         Max_MA 0.14 GB         CA 5.0 GB         Max_CA 4 GB \nCPU Virtual Memory:  used = 4.0 GB, percent = 57.1%\n"},
	} {
		var b strings.Builder
		s := tc.s
		writeMemoryUsage(&b, "Engine before step", &s, func() (virtualMemory, error) { return virtualMemory{tc.total, tc.avail}, nil })
		assert.Equal(t, "Engine before step\n"+tc.want, b.String())
		assert.Equal(t, 1, s.resets, "the peaks are reset after the report")
	}
	var b strings.Builder
	writeMemoryUsage(&b, "m", &fakeStats{}, func() (virtualMemory, error) { return virtualMemory{}, errors.New("no /proc") })
	assert.Contains(t, b.String(), "CPU Virtual Memory:  unavailable: no /proc\n", "an unreadable host says so rather than printing zeros")
}

// TestParseMeminfo: psutil's virtual_memory on Linux: MemTotal and
// MemAvailable in kB, available past total replaced by MemFree.
func TestParseMeminfo(t *testing.T) {
	v, err := parseMeminfo([]byte("MemTotal:       16000000 kB\nMemFree:         1000000 kB\nMemAvailable:    4000000 kB\nBuffers: 5 kB\n"))
	require.NoError(t, err)
	assert.Equal(t, virtualMemory{total: 16000000 * 1024, available: 4000000 * 1024}, v)
	v, err = parseMeminfo([]byte("MemTotal: 100 kB\nMemFree: 30 kB\nMemAvailable: 200 kB\n"))
	require.NoError(t, err)
	assert.Equal(t, int64(30*1024), v.available, "an LXC's available past total is MemFree, as psutil takes it")
	_, err = parseMeminfo([]byte("MemTotal: 100 kB\n"))
	assert.ErrorContains(t, err, "MemAvailable")
	v, err = readMeminfo()
	require.NoError(t, err, "this machine's /proc/meminfo")
	assert.Positive(t, v.total)
}

func TestPyRound(t *testing.T) {
	for _, tc := range []struct {
		x    float64
		nd   int
		want string
	}{{0.125, 2, "0.12"}, {0.135, 2, "0.14"}, {2, 2, "2.0"}, {1.005, 2, "1.0"}, {12.35, 1, "12.3"}, {99.95, 1, "100.0"}, {0.1, 2, "0.1"}} {
		assert.Equal(t, tc.want, pyRound(tc.x, tc.nd), "round(%v, %d)", tc.x, tc.nd)
	}
}
