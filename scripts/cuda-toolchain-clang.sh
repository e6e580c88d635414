#!/usr/bin/env bash
# cuda-toolchain-clang.sh — the CUDA 12.9 and 11.8 toolchains for
# build-cuda.sh (cuda-toolchain.sh hands DG_CUDA_VERSION=12.9|11.8 here).
#
#   DG_CUDA_VERSION=12.9 scripts/cuda-toolchain-clang.sh        install (if needed), report
#   DG_CUDA_VERSION=12.9 scripts/cuda-toolchain-clang.sh --env  NAME=value lines; installs nothing
#
# What these builds are: clang's CUDA front end (clang++-19, Debian
# bookworm's clang-19 package) compiles every .cu file against that CUDA
# version's own headers, assembles with that version's ptxas and links
# against its libcudart, cuBLAS and NCCL, all from NVIDIA's PyPI wheels.
# Why not nvcc: NVIDIA's 11.8 and 12.x nvcc wheels ship only ptxas and
# libdevice (no nvcc, no cicc); no registry we reach has a 12.x nvcc.
# Why clang 19 and not 14: clang 14 knows GPUs only up to sm_86, and CUDA
# 12's headers break its texture wrappers (__clang_cuda_texture_intrinsics.h:
# "no template named 'texture'": CUDA 12 removed texture references).
#
# Targets (DG_CUDA_ARCHS overrides): sm_70 sm_75 sm_80 sm_86 sm_89 sm_90
# machine code + compute_90 PTX, for both versions: every sm_70+ GPU clang 19
# knows except the Jetson-only sm_72/sm_87. clang 19 knows nothing past
# sm_90a, so 12.9's sm_100/sm_120 stay with the 13.0 nvcc build.
# Differences from the nvcc build, all known: clang 19 ignores
# __grid_constant__ (-Wunknown-attributes silenced), so kernels taking a
# table by value copy it to local memory: same results, slower launch.
# CUDA 11.8's runtime wheel has no libcudart_static.a: that build links
# libcudart.so.11.0 (build-cuda.sh).
#
# Tree: pip --target puts the wheels in $DIR/nvidia/<component>; clang's
# --cuda-path wants one CUDA install ($DIR/toolkit: bin/ptxas,
# nvvm/libdevice, include/ with cuda.h, whose CUDA_VERSION tells clang the
# version, lib64/), so that is assembled from links. clang's wrapper headers
# include curand's, hence the curand wheel. clang also runs bin/fatbinary to
# pack the cubins and PTX; no 11.8/12.x wheel has one, so toolkit/bin/fatbinary
# is a wrapper that runs the CUDA 13.0 fatbinary ($DG_FATBINARY, set by
# build-cuda.sh) with CUDA 13's --image3 syntax and no compression: the
# container is read by the driver, and an uncompressed one by any driver.
#
# Cache: ${DG_CUDA_CACHE:-~/.cache/deepgo}/cuda-<version>, outside the clone;
# deleted only when this script made it (the stamp, or the marker of an
# unfinished install), as cuda-toolchain.sh does with 13.0's.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/cuda-wheels.sh
. "$ROOT/scripts/cuda-wheels.sh"
V="${DG_CUDA_VERSION:-}"
CLANG="${DG_CLANG:-clang++-19}"
PYTHON="${DG_PYTHON:-python3}"

# Pinned: each line's last release of every wheel (CUDA 11.8 = curand
# 10.3.0, cuBLAS 11.11; 12.9 Update 1), NCCL the last cu11 build and, for
# 12.9, the same NCCL release as 13.0's.
case "$V" in
12.9)
	WHEELS=(
		nvidia-cuda-nvcc-cu12==12.9.86
		nvidia-cuda-runtime-cu12==12.9.79
		nvidia-cuda-cccl-cu12==12.9.27
		nvidia-curand-cu12==10.3.10.19
		nvidia-cublas-cu12==12.9.1.4
		nvidia-nccl-cu12==2.27.7
	)
	;;
11.8)
	WHEELS=(
		nvidia-cuda-nvcc-cu11==11.8.89
		nvidia-cuda-runtime-cu11==11.8.89
		nvidia-cuda-cccl-cu11==11.8.89.post1
		nvidia-curand-cu11==10.3.0.86
		nvidia-cublas-cu11==11.11.3.6
		nvidia-nccl-cu11==2.21.5
	)
	;;
*)
	echo "cuda-toolchain-clang: DG_CUDA_VERSION=\"$V\": want 12.9 or 11.8 (13.0 is cuda-toolchain.sh's nvcc)" >&2
	exit 2
	;;
esac
ARCHS="70 75 80 86 89 90"
DIR="${DG_CUDA_CACHE:-$HOME/.cache/deepgo}/cuda-$V"
NV="$DIR/nvidia"
TOP="$DIR/toolkit"
STAMP="$DIR/.deepgo-wheels"
PARTIAL="$DIR/.deepgo-wheels-installing"

installed() {
	[[ -f "$STAMP" && ! -e "$PARTIAL" && "$(cat "$STAMP")" == "$(printf '%s\n' "${WHEELS[@]}")" && -x "$TOP/bin/ptxas" ]]
}

# link_all SRC DST: a link in DST for each entry of SRC (pip's __init__.py
# and __pycache__ left out); the first component to provide a name wins
link_all() {
	local f b
	for f in "$1"/*; do
		b="$(basename "$f")"
		[[ -e "$f" && "$b" != __init__.py && "$b" != __pycache__ && ! -e "$2/$b" ]] && ln -s "$f" "$2/$b"
	done
	return 0
}

assemble() {
	rm -rf "$TOP"
	mkdir -p "$TOP/bin" "$TOP/nvvm" "$TOP/include" "$TOP/lib64"
	ln -s "$NV/cuda_nvcc/bin/ptxas" "$TOP/bin/ptxas"
	ln -s "$NV/cuda_nvcc/nvvm/libdevice" "$TOP/nvvm/libdevice"
	local c
	for c in cuda_runtime cuda_nvcc cublas curand cuda_cccl; do
		link_all "$NV/$c/include" "$TOP/include"
	done
	for c in cuda_runtime cublas; do
		link_all "$NV/$c/lib" "$TOP/lib64"
	done
	# linker names for the versioned sonames (wheels ship only those)
	local so
	for so in "$TOP"/lib64/libcudart.so.* "$TOP"/lib64/libcublas.so.* "$TOP"/lib64/libcublasLt.so.* "$NV"/nccl/lib/libnccl.so.*; do
		[[ -e "$so" && ! -e "${so%.so.*}.so" ]] && ln -s "$(basename "$so")" "${so%.so.*}.so"
	done
	cat >"$TOP/bin/fatbinary" <<'EOT'
#!/bin/sh
# clang's CUDA <= 12 fatbinary call, made with CUDA 13's fatbinary
# (cuda-toolchain-clang.sh): --image=profile=sm_NN|compute_NN,file=F
# becomes --image3=kind=elf|ptx,sm=NN,file=F; nothing compressed.
if [ -z "${DG_FATBINARY:-}" ]; then
	echo "fatbinary: DG_FATBINARY (CUDA 13.0's fatbinary) is not set: run scripts/build-cuda.sh" >&2
	exit 1
fi
for a in "$@"; do
	shift
	case "$a" in
	--image=profile=sm_*,file=*) s="${a#--image=profile=sm_}" && a="--image3=kind=elf,sm=${s%%,*},file=${a#*,file=}" ;;
	--image=profile=compute_*,file=*) s="${a#--image=profile=compute_}" && a="--image3=kind=ptx,sm=${s%%,*},file=${a#*,file=}" ;;
	--image=*) echo "fatbinary: unexpected image spec $a" >&2 && exit 1 ;;
	esac
	set -- "$@" "$a"
done
exec "$DG_FATBINARY" --compress=false "$@"
EOT
	chmod +x "$TOP/bin/fatbinary"
}

install_wheels() {
	if installed; then
		echo "cuda-toolchain-clang: CUDA $V wheels already in $DIR (pinned set unchanged), skipping install"
		return 0
	fi
	echo "cuda-toolchain-clang: installing CUDA $V into $DIR:"
	printf '  %s\n' "${WHEELS[@]}"
	local t0=$SECONDS
	prepare_dir "$DIR" "$STAMP" "$PARTIAL" cuda-toolchain-clang DG_CUDA_CACHE
	"$PYTHON" -m pip install --quiet --disable-pip-version-check --no-deps --no-input --root-user-action=ignore \
		--target "$DIR" "${WHEELS[@]}"
	assemble
	printf '%s\n' "${WHEELS[@]}" >"$STAMP"
	rm -f "$PARTIAL"
	echo "cuda-toolchain-clang: installed in $((SECONDS - t0)) s ($(du -sh "$DIR" | cut -f1))"
}

if [[ "${1:-}" == --env ]]; then
	cat <<EOT
DG_CUDA_VERSION=$V
DG_CUDA_FRONTEND=clang
DG_CUDA_SOURCE=wheels
DG_CLANG=$CLANG
DG_NVCC=
DG_CUDA_TOP=$TOP
DG_CUDA_INC=$TOP/include
DG_CUDA_LIB=$TOP/lib64
DG_NCCL_INC=$NV/nccl/include
DG_NCCL_LIB=$NV/nccl/lib
DG_CUDA_ARCHS_DEFAULT="$ARCHS"
EOT
	exit 0
fi
if ! command -v "$CLANG" >/dev/null 2>&1; then
	echo "cuda-toolchain-clang: no $CLANG on PATH: CUDA $V builds with clang's CUDA front end (make cuda-deps installs clang-19; DG_CLANG picks another)" >&2
	exit 1
fi
install_wheels
for f in "$TOP/bin/ptxas" "$TOP/nvvm/libdevice/libdevice.10.bc" "$TOP/include/cuda.h" "$TOP/include/cuda_runtime.h" "$TOP/include/curand_mtgp32_kernel.h" "$TOP/include/cublas_api.h" "$NV/nccl/include/nccl.h"; do
	if [[ ! -e "$f" ]]; then
		echo "cuda-toolchain-clang: missing $f" >&2
		exit 1
	fi
done
echo "cuda-toolchain-clang: CUDA $V: $CLANG --cuda-path=$TOP ($("$CLANG" --version | head -n 1); $("$TOP/bin/ptxas" --version | tail -n 1))"
