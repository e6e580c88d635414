#!/usr/bin/env bash
# build-cuda.sh — compile every cuda/*.cu into build/cuda/libdeepgo_cuda.a,
# then prove it links: the gpucheck program (CUDA kernels + the CPU core's C
# files, one binary) and, where Go is installed, `go vet` and a test binary
# of package cuda under -tags cuda. No GPU or driver is needed: only the CUDA
# runtime is linked, statically (libcudart_static.a, copied next to our
# archive), and it loads the driver (libcuda.so.1) when a program first calls
# CUDA. So the binaries run on any machine with an NVIDIA driver for CUDA
# 13.0 or newer and need no CUDA libraries there.
#
#   scripts/build-cuda.sh            everything above
#   SKIP_GO=1 scripts/build-cuda.sh  library and gpucheck only
#
# cuBLAS (the nn matmuls) is not linked: cuda/nn_matmul.cu dlopens
# libcublas.so.<CUBLAS_VER_MAJOR of the headers compiled against> on first
# use; lib/ below holds links to the toolchain's copy, found next to
# gpucheck and cuda.test. OpenBLAS (the CPU twins of the
# nn kernels, csrc/nn_*.c) is linked statically when the machine has
# libopenblas.a, so gpucheck and cuda.test built here run on a GPU machine
# without it; with only a shared OpenBLAS gpucheck links that, and with none
# at all gpucheck's CPU side uses cuda/gpucheck/blas (a naive sgemm).
#
# Outputs (build/cuda/): obj/*.o, libdeepgo_cuda.a, libcudart_static.a,
# gpucheck, cuda.test (the Go test binary, for scripts/gpu-check.sh),
# lib/ (links to libcublas, libcublasLt, libnccl), blas/libopenblas.a.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="$ROOT/build/cuda"
t0=$SECONDS

scripts/cuda-toolchain.sh
eval "$(scripts/cuda-toolchain.sh --env)"

# Machine code for every GPU from sm_70 (Volta) on that this nvcc can
# target (nvcc --list-gpu-code: CUDA 13 starts at sm_75 and adds sm_100 and
# up), plus PTX of the newest, for GPUs newer than the toolchain to JIT.
# DG_CUDA_ARCHS="80 90" narrows the list (a quicker local build).
mapfile -t ARCHS < <("$DG_NVCC" --list-gpu-code | sed -n 's/^sm_\([0-9][0-9]*\)$/\1/p' | sort -n -u | awk '$1 >= 70')
if [[ -n "${DG_CUDA_ARCHS:-}" ]]; then
	read -r -a ARCHS <<<"$DG_CUDA_ARCHS"
fi
if ((${#ARCHS[@]} == 0)); then
	echo "build-cuda: $DG_NVCC --list-gpu-code names no sm_70 or newer target" >&2
	exit 1
fi
GENCODE=()
for a in "${ARCHS[@]}"; do
	GENCODE+=(-gencode "arch=compute_$a,code=sm_$a")
done
GENCODE+=(-gencode "arch=compute_${ARCHS[-1]},code=compute_${ARCHS[-1]}")
echo "build-cuda: targets $(printf 'sm_%s ' "${ARCHS[@]}")+ compute_${ARCHS[-1]} PTX"

# -fmad=false: the CPU twins never fuse a*b+c, so neither may we. The host
# side derives the optimizer coefficients (dg_optim_math.h) in double: g++
# must not contract there either (C++ modes default to -ffp-contract=fast).
NVFLAGS=(
	"${GENCODE[@]}"
	-fmad=false -O3 -std=c++17
	-Xcompiler -fPIC -Xcompiler -Wall -Xcompiler -ffp-contract=off
	--Werror all-warnings
	-I"$ROOT/csrc/include" -I"$ROOT/cuda"
)
CUDART=("$OUT/libcudart_static.a" -ldl -lpthread -lrt)

mkdir -p "$OUT/obj" "$OUT/gpucheck-obj"
rm -f "$OUT"/obj/*.o "$OUT"/gpucheck-obj/*.o

# compile in parallel, one job per core; any failure fails the build
compile_all() { # dir-of-objects sources...
	local dst=$1 pids=() f
	shift
	for f in "$@"; do
		"$DG_NVCC" "${NVFLAGS[@]}" -c "$f" -o "$dst/$(basename "${f%.*}").o" &
		pids+=($!)
		if ((${#pids[@]} >= $(nproc))); then
			wait "${pids[0]}"
			pids=("${pids[@]:1}")
		fi
	done
	for f in "${pids[@]}"; do wait "$f"; done
}

echo "build-cuda: nvcc ($DG_CUDA_SOURCE) cuda/*.cu -> $OUT/libdeepgo_cuda.a"
compile_all "$OUT/obj" cuda/*.cu
rm -f "$OUT/libdeepgo_cuda.a"
ar rcs "$OUT/libdeepgo_cuda.a" "$OUT"/obj/*.o
cp -f "$DG_CUDA_LIB/libcudart_static.a" "$OUT/libcudart_static.a"

# cuBLAS for the nn matmuls, loaded at run time (see the header), under the
# soname nn_matmul.cu derives from the same header
CUBLAS_MAJOR="$(sed -n 's/^#define CUBLAS_VER_MAJOR \([0-9][0-9]*\).*/\1/p' "$DG_CUDA_INC/cublas_api.h")"
if [[ -z "$CUBLAS_MAJOR" ]]; then
	echo "build-cuda: no CUBLAS_VER_MAJOR in $DG_CUDA_INC/cublas_api.h" >&2
	exit 1
fi
mkdir -p "$OUT/lib"
rm -f "$OUT"/lib/libcublas*.so.*
for so in "libcublas.so.$CUBLAS_MAJOR" "libcublasLt.so.$CUBLAS_MAJOR"; do
	if [[ -e "$DG_CUDA_LIB/$so" ]]; then
		ln -sfn "$DG_CUDA_LIB/$so" "$OUT/lib/$so"
	else
		echo "build-cuda: warning: no $DG_CUDA_LIB/$so: the nn matmuls will look elsewhere (DEEPGO_CUBLAS_LIB)"
	fi
done

# OpenBLAS for the CPU twins: static archive, else shared, else the stand-in
BLAS_INC=() BLAS_LINK=() BLAS_RT=() BLAS_MODE=""
BLAS_A="$(gcc -print-file-name=libopenblas.a)"
have_cblas_h() { echo '#include <cblas.h>' | gcc -E -x c - >/dev/null 2>&1; }
# blas_runtimes ARCHIVE: the runtimes a static OpenBLAS may need, as link
# flags: libgomp for the OpenMP build, libgfortran for its LAPACK part, each
# only when the archive refers to it and gcc has it, and --as-needed, so
# they are recorded only when an object actually linked uses them.
blas_runtimes() {
	local undef libs=()
	undef="$(nm -A "$1" 2>/dev/null | awk '$(NF-1) == "U" { print $NF }' | sort -u)"
	if grep -qE '^(GOMP_|omp_)' <<<"$undef" && [[ "$(gcc -print-file-name=libgomp.so)" == /* ]]; then
		libs+=(-lgomp)
	fi
	if grep -q '^_gfortran_' <<<"$undef" && [[ "$(gcc -print-file-name=libgfortran.so)" == /* ]]; then
		libs+=(-lgfortran)
	fi
	if ((${#libs[@]} > 0)); then
		printf '%s\n' -Wl,--as-needed "${libs[@]}" -Wl,--no-as-needed
	fi
}
rm -rf "$OUT/blas"
if [[ "$BLAS_A" == /* && -e "$BLAS_A" ]] && have_cblas_h; then
	mkdir -p "$OUT/blas"
	ln -sfn "$(readlink -f "$BLAS_A")" "$OUT/blas/libopenblas.a"
	mapfile -t BLAS_RT < <(blas_runtimes "$OUT/blas/libopenblas.a")
	BLAS_LINK=("$OUT/blas/libopenblas.a" "${BLAS_RT[@]}")
	BLAS_MODE="static OpenBLAS ($(readlink -f "$BLAS_A")${BLAS_RT[*]:+; runtimes as needed: ${BLAS_RT[*]}})"
elif [[ "$(gcc -print-file-name=libopenblas.so)" == /* ]] && have_cblas_h; then
	BLAS_LINK=(-lopenblas) BLAS_MODE="shared OpenBLAS (gpucheck needs libopenblas.so.0 where it runs)"
else
	BLAS_INC=(-I cuda/gpucheck/blas) BLAS_MODE="no OpenBLAS here: naive sgemm stand-in (cuda/gpucheck/blas)"
	gcc -std=c11 -O2 -c cuda/gpucheck/blas/sgemm.c -o "$OUT/gpucheck-obj/blas_sgemm.o"
fi

echo "build-cuda: linking $OUT/gpucheck (cuda/gpucheck/*.cu + csrc/*.c; $BLAS_MODE)"
compile_all "$OUT/gpucheck-obj" cuda/gpucheck/*.cu
for f in csrc/*.c; do
	# the flags of csrc's cgo preamble (csrc/csrc.go): ISO C11 keeps GCC from
	# contracting a*b+c into an FMA
	gcc -std=c11 -O2 -pthread -I csrc/include "${BLAS_INC[@]}" -c "$f" -o "$OUT/gpucheck-obj/csrc_$(basename "${f%.c}").o"
done
g++ -o "$OUT/gpucheck" "$OUT"/gpucheck-obj/*.o "$OUT/libdeepgo_cuda.a" "${BLAS_LINK[@]}" "${CUDART[@]}" -lm -pthread

if [[ -z "${SKIP_GO:-}" ]] && command -v go >/dev/null 2>&1; then
	# package csrc links -lopenblas; with build/cuda/blas first on the
	# search path (it holds only libopenblas.a) the test binaries get the
	# static archive and need no OpenBLAS where they run. cmd/go puts these
	# flags before the package's -lopenblas, so the archive is named here
	# too, ahead of the runtimes it may need (blas_runtimes).
	if [[ -e "$OUT/blas/libopenblas.a" ]]; then
		export CGO_LDFLAGS="${CGO_LDFLAGS:--g -O2} -L$OUT/blas${BLAS_RT[*]:+ $OUT/blas/libopenblas.a ${BLAS_RT[*]}}"
	fi
	echo "build-cuda: go vet -tags cuda ./cuda; go test -c -tags cuda -o $OUT/cuda.test ./cuda"
	go vet -tags cuda ./cuda
	go test -c -tags cuda -o "$OUT/cuda.test" ./cuda
elif [[ -z "${SKIP_GO:-}" ]]; then
	echo "build-cuda: no Go toolchain here: skipping go vet and the Go test binary"
fi

# Package nccl (Go, tag cuda) is compiled against nccl.h but links no
# libnccl: it dlopens libnccl.so.2 at run time. Its cgo flags name these
# links into the toolchain in use (wheels or system), as libcudart_static.a
# is copied above; lib/libnccl.so.2 is its last-resort load path. A system
# toolkit without nccl.h (not part of CUDA) falls back to /usr/include.
mkdir -p "$OUT/include"
ln -sfn "$DG_CUDA_INC" "$OUT/include/cuda"
ln -sfn "$DG_NCCL_INC" "$OUT/include/nccl"
if [[ -e "$DG_NCCL_LIB/libnccl.so.2" ]]; then
	ln -sfn "$DG_NCCL_LIB/libnccl.so.2" "$OUT/lib/libnccl.so.2"
fi
if [[ -z "${SKIP_GO:-}" ]] && command -v go >/dev/null 2>&1; then
	if [[ -e "$DG_NCCL_INC/nccl.h" || -e /usr/include/nccl.h ]]; then
		echo "build-cuda: go vet -tags cuda ./nccl; go test -c -tags cuda -o $OUT/nccl.test ./nccl"
		go vet -tags cuda ./nccl
		go test -c -tags cuda -o "$OUT/nccl.test" ./nccl
	else
		echo "build-cuda: no nccl.h in $DG_NCCL_INC or /usr/include: skipping package nccl"
	fi
fi
echo "build-cuda: done in $((SECONDS - t0)) s"
