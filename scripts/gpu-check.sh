#!/usr/bin/env bash
# gpu-check.sh — on a machine with an NVIDIA GPU: build the CUDA library and
# the gpucheck program (system CUDA or the wheels, see cuda-toolchain.sh), run
# gpucheck (every kernel against its CPU twin, with a table), then the Go
# test binaries build/cuda/{cuda,nccl}.test (built here when Go is present;
# else carried in from a CPU machine, which builds them with `make cuda`).
# About 2-4 minutes.
#
# It passes only when everything ran: a machine without a GPU fails ("no
# GPU"), a missing test binary fails, and the Go tests run with
# DEEPGO_REQUIRE_GPU=1 (internal/gputest), so a GPU test that would skip
# (no device, no NCCL, no cuBLAS) fails instead; any test still reported as
# skipped fails the check too. libnccl and cuBLAS are taken from the
# toolchain in use (system CUDA, pip-installed wheels or DG_CUDA_DIR) through
# DEEPGO_NCCL_LIB and DEEPGO_CUBLAS_LIB unless those are set already.
# Every failure is reported, with the tables, before the non-zero exit.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
t0=$SECONDS
failed=()

fail() {
	failed+=("$1")
	echo "gpu-check: FAILED: $1"
}

finish() {
	if ((${#failed[@]} > 0)); then
		echo "gpu-check: FAILED in $((SECONDS - t0)) s:"
		printf '  - %s\n' "${failed[@]}"
		exit 1
	fi
	echo "gpu-check: PASS in $((SECONDS - t0)) s"
	exit 0
}

# A machine without a GPU has no NVIDIA device node (/dev/dxg under WSL)
# and no nvidia-smi: stop before a build of minutes.
if ! compgen -G '/dev/nvidia[0-9]*' >/dev/null && [[ ! -e /dev/dxg ]] && ! command -v nvidia-smi >/dev/null 2>&1; then
	fail "no GPU on this machine (no /dev/nvidia* device, no nvidia-smi)"
	finish
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null ||
	echo "gpu-check: nvidia-smi not found"

# Keep a carried-in Go test binary: build-cuda.sh rebuilds it only when Go
# is present (SKIP_GO when it is not).
skip_go=()
command -v go >/dev/null 2>&1 || skip_go=(SKIP_GO=1)
if ! env "${skip_go[@]}" scripts/build-cuda.sh; then
	fail "scripts/build-cuda.sh"
	finish
fi

# Where the binaries load libnccl and cuBLAS from: the toolchain just built
# with, unless the caller chose (the binaries also look in build/cuda/lib
# next to themselves and on the loader's path).
eval "$(scripts/cuda-toolchain.sh --env)"
if [[ -z "${DEEPGO_NCCL_LIB:-}" && -e "$DG_NCCL_LIB/libnccl.so.2" ]]; then
	export DEEPGO_NCCL_LIB="$DG_NCCL_LIB/libnccl.so.2"
fi
if [[ -z "${DEEPGO_CUBLAS_LIB:-}" ]] && compgen -G "$DG_CUDA_LIB/libcublas.so.[0-9]*" >/dev/null; then
	export DEEPGO_CUBLAS_LIB="$DG_CUDA_LIB"
fi
echo "gpu-check: DEEPGO_NCCL_LIB=${DEEPGO_NCCL_LIB:-(unset)} DEEPGO_CUBLAS_LIB=${DEEPGO_CUBLAS_LIB:-(unset)}"

echo "gpu-check: build/cuda/gpucheck"
timeout 300 build/cuda/gpucheck 2>&1 | tee build/cuda/gpucheck.log
rc=${PIPESTATUS[0]}
if ((rc != 0)); then
	if grep -q "no GPU" build/cuda/gpucheck.log; then
		fail "no GPU: $(grep -m1 "no GPU" build/cuda/gpucheck.log)"
		finish # nothing below can run either
	fi
	fail "build/cuda/gpucheck exited $rc (see the table above and build/cuda/gpucheck.log)"
fi

# run_tests NAME DIR TIMEOUT: build/cuda/NAME.test in package folder DIR,
# every GPU test required; prints the run/pass/fail/skip lines
run_tests() {
	local name=$1 dir=$2 limit=$3 bin="$ROOT/build/cuda/$1.test" log="$ROOT/build/cuda/$1.log"
	if [[ ! -x "$bin" ]]; then
		fail "no build/cuda/$name.test: build it with Go (make cuda) and carry build/cuda here"
		return
	fi
	echo "gpu-check: build/cuda/$name.test"
	(cd "$dir" && DEEPGO_REQUIRE_GPU=1 timeout "$limit" "$bin" -test.v -test.timeout "$((limit - 10))s") >"$log" 2>&1
	local rc=$?
	grep -E '^(=== RUN|\s*--- |PASS|FAIL|ok)|_test.go' "$log"
	if ((rc != 0)); then
		fail "$name tests exited $rc (see above and build/cuda/$name.log)"
	fi
	local skips
	skips=$(grep -c -- '--- SKIP' "$log")
	if ((skips > 0)); then
		fail "$name tests: $skips skipped (a skip means untested here)"
	fi
}
run_tests cuda cuda 240
# one-rank communicators: NCCL refuses two ranks on one GPU
run_tests nccl nccl 120
finish
