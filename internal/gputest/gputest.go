// Package gputest decides what a GPU test does on a machine that cannot run
// it (no GPU, no NCCL, no C compiler for a fake driver): skip, as plain
// `go test` should, or, under scripts/gpu-check.sh, which sets
// DEEPGO_REQUIRE_GPU=1, fail, so that a GPU check cannot pass while testing
// nothing.
package gputest

import (
	"os"
	"testing"
)

// Env is the environment variable that turns such skips into failures.
const Env = "DEEPGO_REQUIRE_GPU"

// Required reports whether Env is set to 1.
func Required() bool { return os.Getenv(Env) == "1" }

// Unavailable ends t for a reason outside the code under test: a skip, or
// a failure when Required.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if Required() {
		t.Fatalf(format+" ("+Env+"=1: every GPU test must run)", args...)
		return
	}
	t.Skipf(format, args...)
}
