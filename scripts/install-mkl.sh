#!/usr/bin/env bash
# install-mkl.sh — Intel MKL's runtime for DEEPGO_BLAS: PyPI's mkl wheel,
# unpacked (no Python environment) into DG_MKL_DIR (default
# ~/.cache/deepgo/mkl, outside the clone, so CI runs on one machine share
# it). Only the libraries a sequential LP64 sgemm loads are kept:
# libmkl_rt, its LP64 interface, libmkl_core, libmkl_sequential and the
# per-ISA kernels (~450 MB; a missing one is a fatal error inside MKL,
# which ends the process, so the set is checked here). Prints
# the path to give DEEPGO_BLAS. Skips the download when that version is
# there already.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$ROOT/scripts/cuda-wheels.sh" # prepare_dir: a folder is deleted only when this script made it
VERSION="${DG_MKL_VERSION:-2026.2.1}"
DIR="${DG_MKL_DIR:-$HOME/.cache/deepgo/mkl}"
PYTHON="${DG_PYTHON:-python3}"
STAMP="$DIR/.deepgo-mkl"                # holds the version installed
PARTIAL="$DIR/.deepgo-mkl-installing"   # this script's folder, install unfinished
LIB="$DIR/lib/libmkl_rt.so.3"
if [[ -f "$STAMP" && -f "$LIB" && "$(cat "$STAMP")" == "$VERSION" ]]; then
	echo "$LIB"
	exit 0
fi
prepare_dir "$DIR" "$STAMP" "$PARTIAL" install-mkl DG_MKL_DIR
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --dest "$tmp" "mkl==$VERSION" >&2
mkdir -p "$DIR/lib"
"$PYTHON" - "$tmp" "$DIR/lib" <<'PY'
import glob, os, sys, zipfile
src, dst = sys.argv[1], sys.argv[2]
keep = {"libmkl_rt.so.3", "libmkl_core.so.3", "libmkl_sequential.so.3", "libmkl_def.so.3",
        "libmkl_intel_lp64.so.3", "libmkl_mc3.so.3", "libmkl_avx2.so.3", "libmkl_avx512.so.3",
        "libmkl_avx10.so.3"}
(whl,) = glob.glob(os.path.join(src, "mkl-*.whl"))
with zipfile.ZipFile(whl) as z:
    for name in z.namelist():
        base = os.path.basename(name)
        if base in keep:
            with z.open(name) as f, open(os.path.join(dst, base), "wb") as out:
                while chunk := f.read(1 << 20):
                    out.write(chunk)
            keep.discard(base)
if keep:
    sys.exit("install-mkl: the wheel lacks " + ", ".join(sorted(keep)))
PY
echo "$VERSION" >"$STAMP"
rm -f "$PARTIAL"
echo "$LIB"
