package monitor

import (
	"bytes"
	"os"
	"strconv"
)

// rssBytes is the process's resident set size from /proc/self/statm
// (its second field, in pages); 0 where that file does not exist.
func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(string(f[1]), 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}

// HostMemoryBytes is the machine's RAM (MemTotal in /proc/meminfo), 0
// where it cannot be read: the capacity the memory target uses on the CPU.
func HostMemoryBytes() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("MemTotal:")); ok {
			f := bytes.Fields(rest)
			if len(f) == 0 {
				return 0
			}
			kb, err := strconv.ParseInt(string(f[0]), 10, 64)
			if err != nil {
				return 0
			}
			return kb * 1024
		}
	}
	return 0
}
