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
#   DG_CUDA_VERSION=12.9|11.8 scripts/build-cuda.sh
#                                    the same with that CUDA version, into
#                                    build/cuda-<version>/ (make cuda runs
#                                    each of CUDA_VERSIONS)
#
# What each version's build is:
#   13.0  nvcc 13.0 (NVIDIA's wheels, or a system CUDA): machine code for
#         every sm_70+ target it lists (sm_75 sm_80 sm_86 sm_87 sm_88 sm_89
#         sm_90 sm_100 sm_103 sm_110 sm_120 sm_121) + PTX of the newest;
#         static libcudart. Output build/cuda/ (what package cuda and
#         gpu-check.sh use).
#   12.9  clang++-19's CUDA front end with CUDA 12.9's headers, ptxas,
#         libdevice (wheels; cuda-toolchain-clang.sh says why not nvcc):
#         sm_70 sm_75 sm_80 sm_86 sm_89 sm_90 + compute_90 PTX; static
#         libcudart 12.9, cuBLAS 12 and NCCL 2.27.7 (cu12). build/cuda-12.9/.
#   11.8  the same with CUDA 11.8's: same targets; libcudart.so.11.0 linked
#         shared (the 11.8 runtime wheel has no static one; the binaries
#         find it through build/cuda-11.8/lib, their rpath), cuBLAS 11,
#         NCCL 2.21.5 (cu11). build/cuda-11.8/.
#   The clang builds pack cubins and PTX with CUDA 13.0's fatbinary (no
#   11.8/12.x wheel ships one), so the 13.0 toolchain is installed first.
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
VERSION="${DG_CUDA_VERSION:-13.0}"
OUT="$ROOT/build/cuda"
[[ "$VERSION" == 13.0 ]] || OUT="$ROOT/build/cuda-$VERSION"
t0=$SECONDS

if [[ "$VERSION" != 13.0 ]]; then
	# the clang builds' fatbinary (see above)
	DG_CUDA_VERSION=13.0 scripts/cuda-toolchain.sh >/dev/null
	DG_FATBINARY="$(dirname "$(DG_CUDA_VERSION=13.0 scripts/cuda-toolchain.sh --env | sed -n 's/^DG_NVCC=//p')")/fatbinary"
	export DG_FATBINARY
fi
scripts/cuda-toolchain.sh
eval "$(scripts/cuda-toolchain.sh --env)"

# Machine code for every GPU from sm_70 (Volta) on that this nvcc can
# target (nvcc --list-gpu-code: CUDA 13 starts at sm_75 and adds sm_100 and
# up), plus PTX of the newest, for GPUs newer than the toolchain to JIT.
# DG_CUDA_ARCHS="80 90" narrows the list (a quicker local build).
if [[ "$DG_CUDA_FRONTEND" == nvcc ]]; then
	mapfile -t ARCHS < <("$DG_NVCC" --list-gpu-code | sed -n 's/^sm_\([0-9][0-9]*\)$/\1/p' | sort -n -u | awk '$1 >= 70')
else
	read -r -a ARCHS <<<"$DG_CUDA_ARCHS_DEFAULT"
fi
if [[ -n "${DG_CUDA_ARCHS:-}" ]]; then
	read -r -a ARCHS <<<"$DG_CUDA_ARCHS"
fi
if ((${#ARCHS[@]} == 0)); then
	echo "build-cuda: no sm_70 or newer target (DG_CUDA_ARCHS, or what $DG_CUDA_FRONTEND knows)" >&2
	exit 1
fi
GENCODE=() CLANG_ARCH=()
for a in "${ARCHS[@]}"; do
	GENCODE+=(-gencode "arch=compute_$a,code=sm_$a")
	CLANG_ARCH+=("--cuda-gpu-arch=sm_$a")
done
GENCODE+=(-gencode "arch=compute_${ARCHS[-1]},code=compute_${ARCHS[-1]}")
CLANG_ARCH+=(--no-cuda-include-ptx=all "--cuda-include-ptx=sm_${ARCHS[-1]}")
echo "build-cuda: CUDA $DG_CUDA_VERSION ($DG_CUDA_FRONTEND) targets $(printf 'sm_%s ' "${ARCHS[@]}")+ compute_${ARCHS[-1]} PTX"

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
# clang: the same contract. -ffp-contract=off holds for the device side
# too (clang's CUDA default is fast); division and sqrt are IEEE and
# denormals kept by default, as with nvcc. clang 19 ignores
# __grid_constant__ (see cuda-toolchain-clang.sh), and CUDA 12.9 is newer
# than the versions it knows.
CLANGFLAGS=(
	-x cuda --cuda-path="$DG_CUDA_TOP" "${CLANG_ARCH[@]}"
	-O3 -std=c++17 -fPIC -Wall -Werror -ffp-contract=off
	-Wno-unknown-cuda-version -Wno-unknown-attributes
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
		if [[ "$DG_CUDA_FRONTEND" == nvcc ]]; then
			"$DG_NVCC" "${NVFLAGS[@]}" -c "$f" -o "$dst/$(basename "${f%.*}").o" &
		else
			"$DG_CLANG" "${CLANGFLAGS[@]}" -c "$f" -o "$dst/$(basename "${f%.*}").o" &
		fi
		pids+=($!)
		if ((${#pids[@]} >= $(nproc))); then
			wait "${pids[0]}"
			pids=("${pids[@]:1}")
		fi
	done
	for f in "${pids[@]}"; do wait "$f"; done
}

echo "build-cuda: $DG_CUDA_FRONTEND ($DG_CUDA_SOURCE) cuda/*.cu -> $OUT/libdeepgo_cuda.a"
compile_all "$OUT/obj" cuda/*.cu
rm -f "$OUT/libdeepgo_cuda.a"
ar rcs "$OUT/libdeepgo_cuda.a" "$OUT"/obj/*.o
mkdir -p "$OUT/lib"
rm -f "$OUT/libcudart_static.a" "$OUT"/lib/libcudart.so.*
if [[ -e "$DG_CUDA_LIB/libcudart_static.a" ]]; then
	cp -f "$DG_CUDA_LIB/libcudart_static.a" "$OUT/libcudart_static.a"
else
	# CUDA 11.8's wheel: only libcudart.so.11.0. Package cuda's cgo flags
	# name -lcudart_static, so that name is a GNU ld linker script naming
	# the shared runtime; the binaries find it through their rpath.
	so="$(cd "$DG_CUDA_LIB" && ls libcudart.so.[0-9]* | head -n 1)"
	ln -sfn "$DG_CUDA_LIB/$so" "$OUT/lib/$so"
	echo "INPUT($OUT/lib/$so)" >"$OUT/libcudart_static.a"
	CUDART+=(-Wl,-rpath,"$OUT/lib")
fi

# cuBLAS for the nn matmuls, loaded at run time (see the header), under the
# soname nn_matmul.cu derives from the same header
CUBLAS_MAJOR="$(sed -n 's/^#define CUBLAS_VER_MAJOR \([0-9][0-9]*\).*/\1/p' "$DG_CUDA_INC/cublas_api.h")"
if [[ -z "$CUBLAS_MAJOR" ]]; then
	echo "build-cuda: no CUBLAS_VER_MAJOR in $DG_CUDA_INC/cublas_api.h" >&2
	exit 1
fi
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
# liburing for csrc's aio engine: its static archive, as package csrc's
# cgo links it, so gpucheck needs no liburing where it runs
URING_LINK=(-luring)
[[ "$(gcc -print-file-name=liburing.a)" == /* ]] && URING_LINK=(-l:liburing.a)
g++ -o "$OUT/gpucheck" "$OUT"/gpucheck-obj/*.o "$OUT/libdeepgo_cuda.a" "${BLAS_LINK[@]}" "${URING_LINK[@]}" "${CUDART[@]}" -lm -pthread

if [[ -z "${SKIP_GO:-}" ]] && command -v go >/dev/null 2>&1; then
	# package csrc links -lopenblas; with build/cuda/blas first on the
	# search path (it holds only libopenblas.a) the test binaries get the
	# static archive and need no OpenBLAS where they run. cmd/go puts these
	# flags before the package's -lopenblas, so the archive is named here
	# too, ahead of the runtimes it may need (blas_runtimes).
	if [[ -e "$OUT/blas/libopenblas.a" ]]; then
		export CGO_LDFLAGS="${CGO_LDFLAGS:--g -O2} -L$OUT/blas${BLAS_RT[*]:+ $OUT/blas/libopenblas.a ${BLAS_RT[*]}}"
	fi
	# the other versions: their archive, runtime and headers ahead of
	# build/cuda's, which the packages' cgo flags name (cmd/go puts these
	# environment flags first)
	if [[ "$VERSION" != 13.0 ]]; then
		export CGO_LDFLAGS="${CGO_LDFLAGS:--g -O2} -L$OUT -Wl,-rpath,$OUT/lib"
		export CGO_CFLAGS="${CGO_CFLAGS:--g -O2} -I$OUT/include/nccl -I$OUT/include/cuda"
		# NCCL 2.21.5 (the last cu11 build) declares ncclBfloat16 only when
		# cuda_bf16.h defined __CUDA_BF16_TYPES_EXIST__, which 11.8's does
		# for C++ alone; package nccl's cgo is C. The library takes
		# bfloat16 either way, and nothing else reads the macro in C.
		if grep -q 'if defined(__CUDA_BF16_TYPES_EXIST__)' "$DG_NCCL_INC/nccl.h"; then
			CGO_CFLAGS+=" -D__CUDA_BF16_TYPES_EXIST__"
		fi
	fi
	echo "build-cuda: go vet -tags cuda ./cuda; go test -c -tags cuda -o $OUT/cuda.test ./cuda (CUDA $VERSION)"
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
		# the engines' CUDA tables (TestModelParallelOnCUDA, ...): compiled
		# wherever the toolchain is, run only where a GPU is (make gpu-check)
		echo "build-cuda: go vet -tags cuda . ./nn ./cmd/deepgo (the engines' CUDA test tables)"
		go vet -tags cuda . ./nn ./cmd/deepgo
	else
		echo "build-cuda: no nccl.h in $DG_NCCL_INC or /usr/include: skipping package nccl"
	fi
fi
echo "build-cuda: CUDA $VERSION done in $((SECONDS - t0)) s"
