# peer.py: one round of bench-adam's peers, run by `bench-adam -peer` with the
# peers' venv (scripts/install-peers.sh). For each size it times
# DeepSpeedCPUAdam (adamw_mode=True, fp32) and PyTorch's AdamW (fused on the
# CPU when this torch has it, else foreach) on one fp32 parameter of that
# many elements, with the hyperparameters bench-adam gives its own step.
# Only step() is timed (time.perf_counter); one untimed step first allocates
# the moments and warms the pages. Writes one JSON object to stdout.
#
#   python peer.py THREADS REPS SIZE [SIZE...]
import json
import os
import resource
import sys
import time

# Libraries log to stdout: keep it for the result alone.
result_out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)

threads, reps = int(sys.argv[1]), int(sys.argv[2])
sizes = [int(s) for s in sys.argv[3:]]
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


def timed(opt):
    """Best and median of reps timed steps, and CPU seconds per wall second
    over them (the threads that really worked)."""
    opt.step()
    ts, cpu0, wall0 = [], cpu_seconds(), time.perf_counter()
    for _ in range(reps):
        t0 = time.perf_counter()
        opt.step()
        ts.append(time.perf_counter() - t0)
    busy = (cpu_seconds() - cpu0) / (time.perf_counter() - wall0)
    ts.sort()
    return {"best_s": ts[0], "median_s": ts[len(ts) // 2], "busy_threads": busy}


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
        return opt, "foreach"


out = {"torch": torch.__version__, "deepspeed": deepspeed.__version__, "threads": threads,
       "torch_threads": torch.get_num_threads(), "results": []}
for n in sizes:
    p = param(n, n)
    ds = timed(DeepSpeedCPUAdam([p], lr=LR, betas=BETAS, eps=EPS, weight_decay=WD, adamw_mode=True))
    del p
    p = param(n, n)
    opt, mode = torch_adamw(p)
    tr = timed(opt)
    out["torch_adamw_mode"] = mode
    del p, opt
    out["results"].append({"params": n, "deepspeed": ds, "torch": tr})
json.dump(out, result_out)
result_out.write("\n")
result_out.flush()
