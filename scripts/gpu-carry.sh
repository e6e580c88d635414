#!/usr/bin/env bash
# gpu-carry.sh — pack what scripts/gpu-check.sh runs into build/gpu-carry,
# small enough to travel to a lent GPU machine that has no Go and no CUDA
# toolchain (a 64 MiB limit on what travels): the six binaries of build/cuda
# (built first with `DG_CUDA_ARCHS=90 scripts/build-cuda.sh` and
# scripts/build-gpu-binaries.sh) stripped and xz-compressed (about 30 MB),
# the cuBLAS header cuda.test's TestCuBLASSoname reads, and run.sh, which
# on the GPU machine unpacks them into build/cuda, takes NCCL and cuBLAS
# from the image's Python nvidia wheels (DEEPGO_NCCL_LIB, DEEPGO_CUBLAS_LIB;
# unless set) and runs `GPU_CHECK_PREBUILT=1 scripts/gpu-check.sh`, copying
# its logs into $OUT when that is set:
#
#   BUDGET=430 bash build/gpu-carry/run.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SRC=build/cuda
DST=build/gpu-carry
bins=(gpucheck cuda.test nccl.test deepgo.test bench-train bench-adam)
for b in "${bins[@]}"; do
	[[ -x "$SRC/$b" ]] || { echo "gpu-carry: no $SRC/$b: run scripts/build-cuda.sh and scripts/build-gpu-binaries.sh" >&2; exit 1; }
done
hdr="$SRC/include/cuda/cublas_api.h"
[[ -e "$hdr" ]] || { echo "gpu-carry: no $hdr" >&2; exit 1; }
rm -rf "$DST"
mkdir -p "$DST"
for b in "${bins[@]}"; do
	strip -o "$DST/$b" "$SRC/$b"
	xz -T0 -6 "$DST/$b"
done
xz -c "$hdr" > "$DST/cublas_api.h.xz"
cat > "$DST/run.sh" <<'RUN'
#!/usr/bin/env bash
# written by scripts/gpu-carry.sh: unpack, find NCCL and cuBLAS, run gpu-check prebuilt
set -uo pipefail
mkdir -p build/cuda/include/cuda
for f in build/gpu-carry/*.xz; do
	n=$(basename "$f" .xz)
	if [[ $n == *.h ]]; then
		xz -dc "$f" > "build/cuda/include/cuda/$n"
	else
		xz -dc "$f" > "build/cuda/$n" && chmod +x "build/cuda/$n"
	fi
done
nvidia-smi -L
SP=$(python3 -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))' 2>/dev/null || true)
if [[ -n "$SP" ]]; then
	: "${DEEPGO_NCCL_LIB:=$(find "$SP/nvidia" -name 'libnccl.so.2' | head -1)}"
	: "${DEEPGO_CUBLAS_LIB:=$(dirname "$(find "$SP/nvidia" -name 'libcublas.so.1*' | head -1)")}"
	export DEEPGO_NCCL_LIB DEEPGO_CUBLAS_LIB
fi
echo "nccl=${DEEPGO_NCCL_LIB:-} cublas=${DEEPGO_CUBLAS_LIB:-}"
GPU_CHECK_PREBUILT=1 GPU_CHECK_BUDGET=${BUDGET:-400} bash scripts/gpu-check.sh 2>&1 | tee "${OUT:-/tmp}/gpu-check.log"
rc=${PIPESTATUS[0]}
[[ -n "${OUT:-}" ]] && cp build/cuda/*.log "$OUT/" 2>/dev/null
exit "$rc"
RUN
chmod +x "$DST/run.sh"
du -sh "$DST"
