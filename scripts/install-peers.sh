#!/usr/bin/env bash
# install-peers.sh — installs the peers that `examples/bench-adam -peer` and
# `examples/bench-train -peer` measure deepgo against: PyTorch (CPU),
# DeepSpeed with its CPU Adam op built, numpy, and fio from Debian.
#
# They go into a virtual environment OUTSIDE the repository (a large
# download: never run by `make test` or CI):
#
#	DEEPGO_PEERS_VENV   the venv (default ~/.cache/deepgo/peers-venv)
#	PYTHON              the interpreter that makes it (default python3)
#
# Idempotent: what is installed at the pinned version is skipped. PyTorch
# comes from PyTorch's CPU wheel index when this machine reaches it (a
# ~200 MB wheel), else from the default index (whose Linux wheel is the CUDA
# build and pulls NVIDIA's runtime wheels: several GB, but it runs on CPU).
set -euo pipefail

TORCH_VERSION=2.15.0
DEEPSPEED_VERSION=0.19.8
NUMPY_VERSION=2.4.6 # the newest for Python 3.11 (2.5 needs 3.12)
TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu

venv=${DEEPGO_PEERS_VENV:-$HOME/.cache/deepgo/peers-venv}
python=${PYTHON:-python3}
here=$(cd "$(dirname "$0")/.." && pwd)
case "$(cd "$(dirname "$venv")" 2>/dev/null && pwd)/" in
"$here"/*)
	echo "install-peers: DEEPGO_PEERS_VENV=$venv is inside the repository ($here): choose a folder outside it" >&2
	exit 2
	;;
esac

log() { echo "install-peers: $*"; }

# fio: the disk roof of bench-ckpt and the peer of bench-aio (same file,
# O_DIRECT, io_uring engine).
if command -v fio >/dev/null; then
	log "fio: already installed ($(fio --version))"
elif command -v apt-get >/dev/null; then
	sudo=""
	[[ "$(id -u)" == 0 ]] || sudo=sudo
	$sudo apt-get install -y --no-install-recommends fio >/dev/null 2>&1 ||
		{ $sudo apt-get update >/dev/null && $sudo apt-get install -y --no-install-recommends fio >/dev/null; }
	log "fio: installed $(fio --version)"
else
	log "fio: no apt-get here; install fio by hand" >&2
fi

if [[ ! -x "$venv/bin/python" ]]; then
	mkdir -p "$(dirname "$venv")"
	"$python" -m venv "$venv"
	log "venv: made $venv ($("$venv/bin/python" --version))"
else
	log "venv: $venv exists ($("$venv/bin/python" --version))"
fi
py="$venv/bin/python"
# the benchmarks use the venv only once this script has finished
stamp="$venv/deepgo-peers.ok"
rm -f "$stamp"
pip=("$py" -m pip --disable-pip-version-check -q)

# installed NAME prints the installed version of distribution NAME, or nothing.
installed() { "$py" -c "import importlib.metadata as m, sys
try: print(m.version(sys.argv[1]))
except m.PackageNotFoundError: pass" "$1"; }

# ensure NAME VERSION [pip args...] installs NAME==VERSION unless present.
ensure() {
	local name=$1 want=$2
	shift 2
	local have
	have=$(installed "$name")
	if [[ "${have%%+*}" == "$want" ]]; then
		log "$name: $have already installed"
		return
	fi
	"${pip[@]}" install "$@" "$name==$want"
	log "$name: installed $(installed "$name")"
}

ensure numpy "$NUMPY_VERSION"
have=$(installed torch)
if [[ "${have%%+*}" == "$TORCH_VERSION" ]]; then
	log "torch: $have already installed"
elif "${pip[@]}" install --retries 0 --timeout 20 --index-url "$TORCH_CPU_INDEX" "torch==$TORCH_VERSION" 2>/dev/null; then
	log "torch: installed $(installed torch) from the CPU wheel index"
else
	log "torch: the CPU wheel index is not reachable; installing the default index's wheel (CUDA build, large)"
	"${pip[@]}" install "torch==$TORCH_VERSION"
	log "torch: installed $(installed torch)"
fi
# DeepSpeed's op builders JIT-compile with ninja and read the CPU's flags
# through py-cpuinfo.
ensure ninja 1.13.2
ensure py-cpuinfo 9.0.0
ensure deepspeed "$DEEPSPEED_VERSION"

# Build DeepSpeedCPUAdam now (torch's extension cache, ~/.cache/torch_extensions)
# so that the first benchmark round does not time a compiler.
DS_ACCELERATOR=cpu "$py" - <<'EOF'
import deepspeed, torch
from deepspeed.ops.adam import DeepSpeedCPUAdam
p = torch.nn.Parameter(torch.zeros(8))
p.grad = torch.ones(8)
DeepSpeedCPUAdam([p], lr=1e-3, adamw_mode=True).step()
print("install-peers: DeepSpeedCPUAdam built and ran (deepspeed %s, torch %s, %d threads)"
      % (deepspeed.__version__, torch.__version__, torch.get_num_threads()))
EOF
"$py" -c "import importlib.metadata as m; print(*(f'{d} {m.version(d)}' for d in ('torch', 'deepspeed', 'numpy')))" >"$stamp"
log "done ($(cat "$stamp")): benchmarks find the peers in $venv (DEEPGO_PEERS_VENV)"
