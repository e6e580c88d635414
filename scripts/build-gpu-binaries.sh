#!/usr/bin/env bash
# build-gpu-binaries.sh — the Go programs scripts/gpu-check.sh runs beyond
# build-cuda.sh's package tests, built with -tags cuda on any machine (no
# GPU needed) after scripts/build-cuda.sh made build/cuda:
#
#   build/cuda/deepgo.test   the root package's tests (TestDeviceEquivalenceCUDA, TestGPTOnCUDA)
#   build/cuda/bench-train   examples/bench-train (-device cuda)
#   build/cuda/bench-adam    examples/bench-adam (-device cuda)
#
# SKIP_GO=1 builds nothing (as for build-cuda.sh).
#
# No flag from cuda-toolchain.sh --env is needed: packages cuda and nccl
# find the archive, the CUDA runtime and the headers under build/cuda
# through their ${SRCDIR} cgo flags. One CGO flag is set here, as
# build-cuda.sh sets it for cuda.test: when build-cuda.sh linked a static
# OpenBLAS into build/cuda/blas, CGO_LDFLAGS puts that folder first and
# names the archive ahead of the runtimes it refers to, so the binaries need
# no OpenBLAS on the GPU machine.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="$ROOT/build/cuda"
t0=$SECONDS

if [[ ! -e "$OUT/libdeepgo_cuda.a" || ! -e "$OUT/include/nccl" ]]; then
	echo "build-gpu-binaries: no $OUT/libdeepgo_cuda.a or $OUT/include/nccl: run scripts/build-cuda.sh (make cuda) first" >&2
	exit 1
fi
if [[ -n "${SKIP_GO:-}" ]]; then
	echo "build-gpu-binaries: SKIP_GO set: nothing to build"
	exit 0
fi
if ! command -v go >/dev/null 2>&1; then
	echo "build-gpu-binaries: no Go toolchain on PATH (SKIP_GO=1 skips this step)" >&2
	exit 1
fi

if [[ -e "$OUT/blas/libopenblas.a" ]]; then
	# the runtimes the archive calls into (OpenMP, gfortran), linked only
	# when an object uses them
	undef="$(nm -A "$OUT/blas/libopenblas.a" 2>/dev/null | awk '$(NF-1) == "U" { print $NF }' | sort -u)"
	rt=""
	grep -qE '^(GOMP_|omp_)' <<<"$undef" && rt+=" -lgomp"
	grep -q '^_gfortran_' <<<"$undef" && rt+=" -lgfortran"
	export CGO_LDFLAGS="${CGO_LDFLAGS:--g -O2} -L$OUT/blas $OUT/blas/libopenblas.a${rt:+ -Wl,--as-needed$rt -Wl,--no-as-needed}"
	echo "build-gpu-binaries: CGO_LDFLAGS=$CGO_LDFLAGS"
fi

echo "build-gpu-binaries: go test -c -tags cuda -o $OUT/deepgo.test ."
go test -c -tags cuda -o "$OUT/deepgo.test" .
for b in bench-train bench-adam; do
	echo "build-gpu-binaries: go build -tags cuda -o $OUT/$b ./examples/$b"
	go build -tags cuda -o "$OUT/$b" "./examples/$b"
done
echo "build-gpu-binaries: done in $((SECONDS - t0)) s"
