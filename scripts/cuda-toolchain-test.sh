#!/usr/bin/env bash
# cuda-toolchain-test.sh — checks scripts/cuda-toolchain.sh's choices on fake
# wheel trees, in a second and without network (CI runs it; .ci/run):
#   1. a non-empty DG_CUDA_DIR the script did not make survives untouched,
#      and the script fails saying why;
#   2. CUDA 13 wheels pip installed where Python finds them (a temporary
#      site-packages on PYTHONPATH) are used, nothing is downloaded, and NCCL's
#      headers come from the NCCL wheel, also when it sits in another folder
#      of the nvidia namespace;
#   3. a folder the script did make (an interrupted install's marker) is
#      cleared before installing again;
#   4. the version matrix: DG_CUDA_VERSION=12.9|11.8 selects the clang front
#      end and its own cache folder, anything else fails naming the value;
#      that cache obeys rule 1; a (fake) pip install assembles the
#      --cuda-path tree, whose fatbinary wrapper rewrites clang's
#      --image=profile= arguments into CUDA 13's --image3= ones.
# Python runs with -S (no site-packages, so no pip and no machine-wide
# NVIDIA wheels) and PIP_NO_INDEX=1: any attempt to download fails.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TC="$ROOT/scripts/cuda-toolchain.sh"
T="$(mktemp -d)"
trap 'rm -rf "$T"' EXIT
fails=0

fail() {
	echo "cuda-toolchain-test: FAIL: $*" >&2
	fails=$((fails + 1))
}

# fake_wheels DIR [cu13] [nccl]: the files cuda-toolchain.sh checks, laid out
# as the wheels lay them out under DIR/nvidia
fake_wheels() {
	local nv="$1/nvidia" part
	shift
	for part in "$@"; do
		case "$part" in
		cu13)
			mkdir -p "$nv/cu13/bin" "$nv/cu13/include/crt" "$nv/cu13/lib"
			printf '#!/bin/sh\necho "Cuda compilation tools, fake"\necho "Build fake"\n' >"$nv/cu13/bin/nvcc"
			chmod +x "$nv/cu13/bin/nvcc"
			touch "$nv/cu13/include/cuda_runtime.h" "$nv/cu13/include/cuda_fp16.h" \
				"$nv/cu13/include/crt/host_config.h" "$nv/cu13/lib/libcudart_static.a"
			;;
		nccl)
			mkdir -p "$nv/nccl/include" "$nv/nccl/lib"
			touch "$nv/nccl/include/nccl.h" "$nv/nccl/lib/libnccl.so.2"
			;;
		esac
	done
}

mkdir -p "$T/bin" "$T/empty-site"
printf '#!/bin/sh\nexec python3 -S "$@"\n' >"$T/bin/python"
chmod +x "$T/bin/python"
# run DG_CUDA_DIR PYTHONPATH [args]: the toolchain script, wheels forced
run() {
	local dir="$1" pp="$2"
	shift 2
	DG_CUDA_DIR="$dir" PYTHONPATH="$pp" DG_PYTHON="$T/bin/python" DG_CUDA_TOOLKIT=wheels PIP_NO_INDEX=1 \
		bash "$TC" "$@"
}

# 1. someone else's folder
mkdir -p "$T/mine/sub"
echo keep >"$T/mine/keep.txt"
echo keep >"$T/mine/sub/also.txt"
if run "$T/mine" "$T/empty-site" >"$T/out1" 2>&1; then
	fail "DG_CUDA_DIR at a foreign non-empty folder: exit 0"
fi
grep -q "not made by this script" "$T/out1" || fail "no explanation for the foreign folder: $(cat "$T/out1")"
[[ -f "$T/mine/keep.txt" && -f "$T/mine/sub/also.txt" ]] || fail "a foreign DG_CUDA_DIR was deleted"
[[ "$(ls -A "$T/mine")" == "$(printf 'keep.txt\nsub')" ]] || fail "a foreign DG_CUDA_DIR was changed: $(ls -A "$T/mine")"

# 2. pip-installed wheels, one folder, then NCCL in a second one
fake_wheels "$T/site" cu13 nccl
if ! run "$T/absent" "$T/site" >"$T/out2" 2>&1; then
	fail "wheels in site-packages not used: $(cat "$T/out2")"
fi
grep -q "pip installed" "$T/out2" || fail "site-packages wheels not reported: $(cat "$T/out2")"
env2="$(run "$T/absent" "$T/site" --env)"
grep -qx "DG_NVCC=$T/site/nvidia/cu13/bin/nvcc" <<<"$env2" || fail "nvcc not from site-packages: $env2"
grep -qx "DG_NCCL_INC=$T/site/nvidia/nccl/include" <<<"$env2" || fail "nccl.h not from the NCCL wheel: $env2"
[[ ! -e "$T/absent" ]] || fail "DG_CUDA_DIR was created although the wheels were installed"
fake_wheels "$T/site-a" cu13
fake_wheels "$T/site-b" nccl
env3="$(run "$T/absent" "$T/site-a:$T/site-b" --env)"
grep -qx "DG_NVCC=$T/site-a/nvidia/cu13/bin/nvcc" <<<"$env3" || fail "split namespace: nvcc: $env3"
grep -qx "DG_NCCL_INC=$T/site-b/nvidia/nccl/include" <<<"$env3" || fail "split namespace: nccl.h: $env3"
grep -qx "DG_NCCL_LIB=$T/site-b/nvidia/nccl/lib" <<<"$env3" || fail "split namespace: libnccl: $env3"

# 3. the script's own unfinished folder: cleared, then the install (which
# cannot download here) fails
mkdir -p "$T/partial/nvidia"
: >"$T/partial/.deepgo-wheels-installing"
echo junk >"$T/partial/nvidia/junk"
if run "$T/partial" "$T/empty-site" >"$T/out3" 2>&1; then
	fail "an install without pip or network succeeded: $(cat "$T/out3")"
fi
[[ ! -e "$T/partial/nvidia/junk" ]] || fail "the script's own unfinished folder was not cleared"
[[ -e "$T/partial/.deepgo-wheels-installing" ]] || fail "the unfinished folder lost its marker"

# 4. versions
if out="$(DG_CUDA_VERSION=12.4 bash "$TC" --env 2>&1)"; then
	fail "DG_CUDA_VERSION=12.4 accepted: $out"
fi
grep -q '"12.4".*13.0.*12.9.*11.8' <<<"$out" || fail "bad version not explained: $out"
for v in 12.9 11.8; do
	env4="$(DG_CUDA_VERSION=$v DG_CUDA_CACHE="$T/cache" bash "$TC" --env)"
	grep -qx "DG_CUDA_FRONTEND=clang" <<<"$env4" || fail "$v: not the clang front end: $env4"
	grep -qx "DG_CUDA_TOP=$T/cache/cuda-$v/toolkit" <<<"$env4" || fail "$v: tree not in its cache folder: $env4"
	grep -qx 'DG_CUDA_ARCHS_DEFAULT="70 75 80 86 89 90"' <<<"$env4" || fail "$v: targets: $env4"
done
grep -qx "DG_CUDA_FRONTEND=nvcc" <<<"$(run "$T/absent" "$T/site" --env)" || fail "13.0 is not nvcc"
mkdir -p "$T/cache/cuda-11.8"
echo keep >"$T/cache/cuda-11.8/keep.txt"
if out="$(DG_CUDA_VERSION=11.8 DG_CUDA_CACHE="$T/cache" DG_CLANG=true DG_PYTHON="$T/bin/python" PIP_NO_INDEX=1 bash "$TC" 2>&1)"; then
	fail "11.8 over a foreign cache folder: exit 0"
fi
grep -q "not made by this script" <<<"$out" || fail "11.8 foreign folder not explained: $out"
[[ "$(ls -A "$T/cache/cuda-11.8")" == keep.txt ]] || fail "11.8: a foreign cache folder was changed"
# a fake pip: lays out what the wheels' --target install would
cat >"$T/bin/fakepip" <<'EOT'
#!/bin/sh
while [ "$1" != --target ]; do shift; done
nv="$2/nvidia"
mkdir -p "$nv/cuda_nvcc/bin" "$nv/cuda_nvcc/nvvm/libdevice" "$nv/cuda_runtime/include" "$nv/cuda_runtime/lib" \
	"$nv/curand/include" "$nv/cublas/include" "$nv/cublas/lib" "$nv/cuda_cccl/include" "$nv/nccl/include" "$nv/nccl/lib"
printf '#!/bin/sh\necho "Build fake"\n' >"$nv/cuda_nvcc/bin/ptxas" && chmod +x "$nv/cuda_nvcc/bin/ptxas"
touch "$nv/cuda_nvcc/nvvm/libdevice/libdevice.10.bc" "$nv/cuda_runtime/include/cuda.h" "$nv/cuda_runtime/include/cuda_runtime.h" \
	"$nv/cuda_runtime/include/__init__.py" "$nv/cuda_runtime/lib/libcudart.so.12" "$nv/curand/include/curand_mtgp32_kernel.h" \
	"$nv/cublas/include/cublas_api.h" "$nv/cublas/lib/libcublas.so.12" "$nv/nccl/include/nccl.h" "$nv/nccl/lib/libnccl.so.2"
EOT
chmod +x "$T/bin/fakepip"
printf '#!/bin/sh\nshift 2\nexec "%s" "$@"\n' "$T/bin/fakepip" >"$T/bin/pypip"
chmod +x "$T/bin/pypip"
if ! out="$(DG_CUDA_VERSION=12.9 DG_CUDA_CACHE="$T/cache" DG_CLANG=true DG_PYTHON="$T/bin/pypip" bash "$TC" 2>&1)"; then
	fail "12.9 install on a fake pip: $out"
fi
tk="$T/cache/cuda-12.9/toolkit"
for f in bin/ptxas nvvm/libdevice/libdevice.10.bc include/cuda.h include/curand_mtgp32_kernel.h lib64/libcudart.so lib64/libcublas.so.12; do
	[[ -e "$tk/$f" ]] || fail "12.9 tree lacks $f"
done
[[ ! -e "$tk/include/__init__.py" ]] || fail "12.9 tree holds pip's __init__.py"
printf '#!/bin/sh\nprintf "%%s\\n" "$@"\n' >"$T/bin/echoargs"
chmod +x "$T/bin/echoargs"
got="$(DG_FATBINARY="$T/bin/echoargs" "$tk/bin/fatbinary" -64 --create o.fatbin --image=profile=sm_90,file=a.cubin --image=profile=compute_90,file=a.s)"
want="$(printf '%s\n' --compress=false -64 --create o.fatbin --image3=kind=elf,sm=90,file=a.cubin --image3=kind=ptx,sm=90,file=a.s)"
[[ "$got" == "$want" ]] || fail "fatbinary wrapper: got $got, want $want"

if ((fails > 0)); then
	echo "cuda-toolchain-test: $fails failure(s)"
	exit 1
fi
echo "cuda-toolchain-test: PASS"
