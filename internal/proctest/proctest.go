// Package proctest helps tests of launchers check that processes are gone.
package proctest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Ended reports whether pid has ended: no such process, or a zombie that
// no one has reaped yet (its parent, a killed launcher, is gone).
func Ended(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && f[0] == "Z"
}

// Main is a TestMain for a test binary that is also the program its tests
// start: when the variable roleVar is set, the binary runs helper with its
// value and exits with what helper returns, else it runs the tests.
func Main(m interface{ Run() int }, roleVar string, helper func(role string) int) {
	if role := os.Getenv(roleVar); role != "" {
		os.Exit(helper(role))
	}
	os.Exit(m.Run())
}

// WritePid writes this process's pid to the file name in the directory the
// variable dirVar names, when it is set: how a test learns the pids of the
// processes a launcher started.
func WritePid(dirVar, name string) {
	if dir := os.Getenv(dirVar); dir != "" {
		_ = os.WriteFile(filepath.Join(dir, name), []byte(strconv.Itoa(os.Getpid())), 0o644)
	}
}
