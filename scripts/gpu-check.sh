#!/usr/bin/env bash
# gpu-check.sh — on a machine with an NVIDIA GPU: build the CUDA library and
# the gpucheck program (system CUDA or the wheels, see cuda-toolchain.sh), run
# gpucheck (every kernel against its CPU twin, with a table), then run the Go
# test binary build/cuda/cuda.test if one was built beforehand (on a CPU
# machine: go test -c -tags cuda -o build/cuda/cuda.test ./cuda) — the GPU
# machine may have no Go. Non-zero exit on any failure. About 2-4 minutes.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
t0=$SECONDS

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "gpu-check: nvidia-smi not found"

# Keep a carried-in Go test binary: build-cuda.sh would rebuild it only when
# Go is present (SKIP_GO when it is not).
if command -v go >/dev/null 2>&1; then
	scripts/build-cuda.sh
else
	SKIP_GO=1 scripts/build-cuda.sh
fi

echo "gpu-check: build/cuda/gpucheck"
timeout 300 build/cuda/gpucheck

if [[ -x build/cuda/cuda.test ]]; then
	echo "gpu-check: build/cuda/cuda.test"
	(cd cuda && timeout 240 ../build/cuda/cuda.test -test.v -test.timeout 230s) | grep -E '^(=== RUN|--- |PASS|FAIL|ok)|_test.go' 
	rc=${PIPESTATUS[0]}
	[[ $rc -eq 0 ]] || { echo "gpu-check: Go tests FAILED"; exit 1; }
else
	echo "gpu-check: no build/cuda/cuda.test (build it on a CPU machine with -tags cuda): Go tests not run"
fi
if [[ -x build/cuda/nccl.test ]]; then
	echo "gpu-check: build/cuda/nccl.test (one-rank communicator: NCCL refuses two ranks on one GPU)"
	(cd nccl && timeout 120 ../build/cuda/nccl.test -test.v -test.timeout 110s) | grep -E '^(=== RUN|--- |PASS|FAIL|ok)|_test.go'
	[[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "gpu-check: nccl tests FAILED"; exit 1; }
fi
echo "gpu-check: PASS in $((SECONDS - t0)) s"
