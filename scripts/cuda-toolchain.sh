#!/usr/bin/env bash
# cuda-toolchain.sh — make a CUDA 13.0 toolchain available to build-cuda.sh.
# DG_CUDA_VERSION=12.9|11.8 hands over to cuda-toolchain-clang.sh (clang's
# CUDA front end with that version's wheels); 13.0 (the default) is nvcc:
#
#   scripts/cuda-toolchain.sh          install (if needed) and report the toolchain
#   scripts/cuda-toolchain.sh --env    print NAME=value lines for the toolchain in
#                                      use (eval'd by build-cuda.sh); installs nothing
#
# Which toolchain:
#   - a system CUDA when one is found: $CUDA_HOME/bin/nvcc, else `nvcc` on PATH
#     (GPU machines carry their own, matching their driver, and cannot download);
#   - otherwise NVIDIA's PyPI wheels: those this script installed in
#     $DG_CUDA_DIR (default <repo>/.cuda, gitignored) when complete, else CUDA
#     13 wheels pip already installed where Python finds them (`import
#     nvidia`: site-packages, PYTHONPATH; an offline GPU machine has them
#     there), else a fresh `pip --target` install into $DG_CUDA_DIR.
#   DG_CUDA_TOOLKIT=wheels|system forces one. NCCL (not part of CUDA) comes
#   from the wheels in use, else from a pip-installed nvidia-nccl wheel, else
#   from the system CUDA's include folder (build-cuda.sh falls back further).
#
# $DG_CUDA_DIR is only ever deleted when this script made it (it holds the
# stamp below, or the marker of an install in progress); a non-empty folder
# without either is left alone and the script stops with an error.
#
# Why the wheels and not Debian's nvidia-cuda-toolkit: the wheels are NVIDIA's
# own CUDA 13.0 build (Debian bookworm's non-free package is CUDA 11.8, too old
# for our sm_90 + CUDA 13 runtime pairing), need no root, live inside the repo
# and are pinned exactly. Two gaps in the wheel layout are closed here, inside
# the folder: nvcc.profile looks for libraries in $TOP/lib64 (wheels ship lib/),
# and the wheels ship only versioned .so names (libcudart.so.13), which -lcudart
# cannot find; see fix_layout.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
case "${DG_CUDA_VERSION:-13.0}" in
13.0) ;;
12.9 | 11.8) exec bash "$ROOT/scripts/cuda-toolchain-clang.sh" "$@" ;;
*)
	echo "cuda-toolchain: DG_CUDA_VERSION=\"$DG_CUDA_VERSION\": want 13.0 (nvcc), 12.9 or 11.8 (clang front end)" >&2
	exit 2
	;;
esac
# shellcheck source=scripts/cuda-wheels.sh
. "$ROOT/scripts/cuda-wheels.sh"
DIR="${DG_CUDA_DIR:-$ROOT/.cuda}"

# Pinned: the last release of each wheel on the CUDA 13.0 line (Update 2),
# which is what the H200 machines' driver (580.x, CUDA 13.0) runs. cicc and
# libdevice moved out of nvidia-cuda-nvcc into nvidia-nvvm in CUDA 13, and the
# crt/ headers (crt/host_config.h) into nvidia-cuda-crt. NCCL 2.27.7 is the
# cu13 build torch's cu130 wheels pin.
WHEELS=(
	nvidia-cuda-nvcc==13.0.88
	nvidia-nvvm==13.0.88
	nvidia-cuda-crt==13.0.88
	nvidia-cuda-runtime==13.0.96
	nvidia-cuda-cccl==13.0.85
	nvidia-cublas==13.0.2.14
	nvidia-nccl-cu13==2.27.7
)
STAMP="$DIR/.deepgo-wheels"
PARTIAL="$DIR/.deepgo-wheels-installing" # this script's folder, install unfinished
PYTHON="${DG_PYTHON:-python3}"

system_nvcc() {
	if [[ -n "${CUDA_HOME:-}" && -x "$CUDA_HOME/bin/nvcc" ]]; then
		echo "$CUDA_HOME/bin/nvcc"
	elif command -v nvcc >/dev/null 2>&1; then
		command -v nvcc
	fi
}

# first existing directory among the arguments
first_dir() {
	for d in "$@"; do
		if [[ -d "$d" ]]; then
			echo "$d"
			return
		fi
	done
}

# site_nvidia prints the folders of Python's `nvidia` namespace package, one
# a line: where pip put NVIDIA's wheels (nothing when Python has none).
site_nvidia() {
	"$PYTHON" -c 'import nvidia, sys; sys.stdout.write("".join(p + "\n" for p in nvidia.__path__))' 2>/dev/null || true
}

# site_find REL prints the first folder of site_nvidia holding REL.
site_find() {
	local d
	while IFS= read -r d; do
		if [[ -n "$d" && -e "$d/$1" ]]; then
			echo "$d"
			return
		fi
	done < <(site_nvidia)
}

# installed reports whether $DIR holds this script's complete install of the
# pinned wheels.
installed() {
	[[ -f "$STAMP" && ! -e "$PARTIAL" && "$(cat "$STAMP")" == "$(printf '%s\n' "${WHEELS[@]}")" && -x "$DIR/nvidia/cu13/bin/nvcc" ]]
}

# resolve sets NVCC, TOP, INC, LIB, NCCL_INC, NCCL_LIB, SOURCE (or fails).
resolve() {
	local want="${DG_CUDA_TOOLKIT:-}" sys site
	sys="$(system_nvcc || true)"
	if [[ "$want" != wheels && -n "$sys" ]]; then
		SOURCE=system
		NVCC="$(readlink -f "$sys")"
		TOP="$(cd "$(dirname "$NVCC")/.." && pwd)"
		local tgt="$TOP/targets/x86_64-linux"
		INC="$(first_dir "$TOP/include" "$tgt/include")"
		LIB="$(first_dir "$TOP/lib64" "$tgt/lib" "$TOP/lib")"
		NCCL_INC="$(first_dir "$TOP/include")"
		NCCL_LIB="$LIB"
		if [[ ! -e "$NCCL_INC/nccl.h" ]] && site="$(site_find nccl/include/nccl.h)" && [[ -n "$site" ]]; then
			NCCL_INC="$site/nccl/include"
			NCCL_LIB="$site/nccl/lib"
		fi
		return 0
	fi
	if [[ "$want" == system ]]; then
		echo "cuda-toolchain: DG_CUDA_TOOLKIT=system but no nvcc found (CUDA_HOME, PATH)" >&2
		return 1
	fi
	local nv="$DIR/nvidia"
	SOURCE=wheels
	if ! installed && site="$(site_find cu13/bin/nvcc)" && [[ -n "$site" ]]; then
		SOURCE=site
		nv="$site"
	fi
	TOP="$nv/cu13"
	NVCC="$TOP/bin/nvcc"
	INC="$TOP/include"
	LIB="$TOP/lib"
	NCCL_INC="$nv/nccl/include"
	NCCL_LIB="$nv/nccl/lib"
	# the nvidia-nccl-cu13 wheel may sit in another folder of the namespace
	if [[ "$SOURCE" == site && ! -e "$NCCL_INC/nccl.h" ]] && site="$(site_find nccl/include/nccl.h)" && [[ -n "$site" ]]; then
		NCCL_INC="$site/nccl/include"
		NCCL_LIB="$site/nccl/lib"
	fi
}

print_env() {
	cat <<EOT
DG_CUDA_VERSION=13.0
DG_CUDA_FRONTEND=nvcc
DG_CUDA_SOURCE=$SOURCE
DG_CLANG=
DG_NVCC=$NVCC
DG_CUDA_TOP=$TOP
DG_CUDA_INC=$INC
DG_CUDA_LIB=$LIB
DG_NCCL_INC=$NCCL_INC
DG_NCCL_LIB=$NCCL_LIB
EOT
}

fix_layout() {
	# nvcc.profile: LIBRARIES = -L$(TOP)/lib64 (the toolkit's layout, not the wheels')
	[[ -e "$TOP/lib64" ]] || ln -s lib "$TOP/lib64"
	# linker names for the versioned sonames
	local pair
	for pair in "$TOP/lib:libcudart.so.13" "$TOP/lib:libcublas.so.13" "$TOP/lib:libcublasLt.so.13" \
		"$DIR/nvidia/nccl/lib:libnccl.so.2"; do
		local d="${pair%%:*}" so="${pair#*:}"
		[[ -e "$d/$so" && ! -e "$d/${so%.so.*}.so" ]] && ln -s "$so" "$d/${so%.so.*}.so"
	done
	return 0
}

install_wheels() {
	if installed; then
		echo "cuda-toolchain: wheels already in $DIR (pinned set unchanged), skipping install"
		fix_layout
		return 0
	fi
	echo "cuda-toolchain: installing into $DIR:"
	printf '  %s\n' "${WHEELS[@]}"
	local t0=$SECONDS
	prepare_dir "$DIR" "$STAMP" "$PARTIAL" cuda-toolchain DG_CUDA_DIR
	"$PYTHON" -m pip install --quiet --disable-pip-version-check --no-deps --no-input --root-user-action=ignore \
		--target "$DIR" "${WHEELS[@]}"
	fix_layout
	printf '%s\n' "${WHEELS[@]}" >"$STAMP"
	rm -f "$PARTIAL"
	echo "cuda-toolchain: installed in $((SECONDS - t0)) s ($(du -sh "$DIR" | cut -f1))"
}

check() {
	local f
	for f in "$NVCC" "$INC/cuda_runtime.h" "$INC/cuda_fp16.h" "$INC/crt/host_config.h" "$LIB/libcudart_static.a"; do
		if [[ ! -e "$f" ]]; then
			echo "cuda-toolchain: missing $f" >&2
			return 1
		fi
	done
}

resolve
if [[ "${1:-}" == --env ]]; then
	print_env
	exit 0
fi
case "$SOURCE" in
wheels) install_wheels ;;
site) echo "cuda-toolchain: using the CUDA wheels pip installed at $TOP (Python's nvidia package; nothing downloaded)" ;;
*) echo "cuda-toolchain: using the system CUDA at $TOP (nvcc on PATH or CUDA_HOME; DG_CUDA_TOOLKIT=wheels overrides)" ;;
esac
check
echo "cuda-toolchain: $SOURCE: $NVCC"
"$NVCC" --version | tail -n 2
