# peer.py: bench-adam's peers, run by `bench-adam -peer` with the peers'
# venv (scripts/install-peers.sh), one process per thread count that stays
# up for the whole run. For each size it builds DeepSpeedCPUAdam
# (adamw_mode=True, fp32) and PyTorch's AdamW (fused on the CPU when this
# torch has it, else foreach) on one fp32 parameter of that many elements,
# with the hyperparameters bench-adam gives its own step, and takes one
# untimed step of each (allocating the moments, warming the pages). It then
# writes one JSON line (versions, mode) and serves: each input line
# "ds SIZE" or "torch SIZE" runs one step of that optimizer and answers one
# JSON line with its wall seconds (time.perf_counter around step()) and CPU
# seconds per wall second; "quit" (or end of input) ends it. bench-adam
# interleaves these steps with its own, so both see the same machine.
#
#   python peer.py THREADS SIZE [SIZE...]
import json
import os
import resource
import sys
import time

# Libraries log to stdout: keep it for the answers alone.
result_out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)

threads = int(sys.argv[1])
sizes = [int(s) for s in sys.argv[2:]]
# DeepSpeed's CPU Adam threads with OpenMP (omp parallel for over tiles): the
# caller sets OMP_NUM_THREADS before this process starts; torch's own pool is
# set here too.
if os.environ.get("OMP_NUM_THREADS") != str(threads):
    sys.exit("peer.py: OMP_NUM_THREADS=%r, want %d" % (os.environ.get("OMP_NUM_THREADS"), threads))
os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch  # noqa: E402

torch.set_num_threads(threads)
import deepspeed  # noqa: E402
from deepspeed.ops.adam import DeepSpeedCPUAdam  # noqa: E402

LR, BETAS, EPS, WD = 1e-4, (0.9, 0.999), 1e-8, 0.01


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def param(n, seed):
    g = torch.Generator().manual_seed(seed)
    p = torch.nn.Parameter(torch.rand(n, generator=g) * 2 - 1)
    p.grad = torch.rand(n, generator=g) * 2 - 1
    return p


def torch_adamw(p):
    """fused=True where this torch has a CPU fused AdamW, else foreach."""
    try:
        opt = torch.optim.AdamW([p], lr=LR, betas=BETAS, eps=EPS, weight_decay=WD, fused=True)
        opt.step()
        return opt, "fused"
    except (RuntimeError, ValueError, TypeError) as e:
        print("peer.py: torch AdamW fused=True failed on the CPU (%s): foreach" % e, file=sys.stderr)
        opt = torch.optim.AdamW([p], lr=LR, betas=BETAS, eps=EPS, weight_decay=WD, foreach=True)
        opt.step()
        return opt, "foreach"


def answer(obj):
    json.dump(obj, result_out)
    result_out.write("\n")
    result_out.flush()


opts, mode, keep = {}, None, []
for n in sizes:
    p = param(n, n)
    ds = DeepSpeedCPUAdam([p], lr=LR, betas=BETAS, eps=EPS, weight_decay=WD, adamw_mode=True)
    ds.step()
    q = param(n, n)
    tr, mode = torch_adamw(q)
    keep += [p, q]
    opts[("ds", n)], opts[("torch", n)] = ds, tr
answer({"torch": torch.__version__, "deepspeed": deepspeed.__version__, "threads": threads,
        "torch_threads": torch.get_num_threads(), "torch_adamw_mode": mode})
for line in sys.stdin:
    f = line.split()
    if f == ["quit"]:
        break
    if len(f) != 2 or (f[0], int(f[1])) not in opts:
        sys.exit("peer.py: bad request %r (want ds|torch SIZE of %s, or quit)" % (line, sizes))
    opt = opts[(f[0], int(f[1]))]
    c0, t0 = cpu_seconds(), time.perf_counter()
    opt.step()
    wall = time.perf_counter() - t0
    answer({"s": wall, "busy": (cpu_seconds() - c0) / wall})
