# gen-bf16-adam-golden.py: golden values for deepgo's bf16-master Adam
# (optim/bf16_golden_test.go) from DeepSpeed's DeepSpeedCPUAdam on bf16
# parameters, with fp32 moments (fp32_optimizer_states=True, the
# bf16_master_weights_and_grads path) and bf16 moments
# (fp32_optimizer_states=False, bf16_optimizer_states). Run with the peers'
# venv (scripts/install-peers.sh):
#
#   DS_ACCELERATOR=cpu OMP_NUM_THREADS=1 ~/.cache/deepgo/peers-venv/bin/python \
#       scripts/gen-bf16-adam-golden.py > optim/testdata/bf16_adam_golden.json
#
# Every tensor is written as its bit patterns (uint16 for bf16, uint32 for
# fp32), so the test compares bits. The size 288 = 256 + 32 runs DeepSpeed's
# AVX512 Step_8 and Step_1 loops. It is a multiple of 16 on purpose:
# DeepSpeed's scalar tail (the last n % 16 elements of a tensor) is C++ that
# GCC contracts into fused multiply-adds its own way (measured: the first
# moment as fma(m, beta1, g*(1-beta1)) there, fma(g, 1-beta1, m*beta1) in
# the vector loop), so its last bits depend on where DeepSpeed's tensors
# end; deepgo follows the vector loop for every element.
import json
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")
out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)  # libraries log to stdout

import torch  # noqa: E402
import deepspeed  # noqa: E402
from deepspeed.ops.adam import DeepSpeedCPUAdam  # noqa: E402

N, STEPS = 288, 5


def bits(t):
    if t.dtype == torch.bfloat16:
        return [int(x) & 0xFFFF for x in t.contiguous().view(torch.int16).tolist()]
    return [int(x) & 0xFFFFFFFF for x in t.contiguous().view(torch.int32).tolist()]


cases = []
for name, hp in [
    ("adamw_wd", dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1, adamw_mode=True, bias_correction=True)),
    ("adam_l2", dict(lr=3e-3, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.05, adamw_mode=False, bias_correction=True)),
    ("adamw_nobc", dict(lr=1e-3, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.0, adamw_mode=True, bias_correction=False)),
]:
    for fp32_states in (True, False):
        g = torch.Generator().manual_seed(len(cases) + 1)
        p = torch.nn.Parameter((torch.randn(N, generator=g) * 0.5).to(torch.bfloat16))
        init = bits(p.data)
        opt = DeepSpeedCPUAdam([p], fp32_optimizer_states=fp32_states, **hp)
        steps = []
        for _ in range(STEPS):
            p.grad = (torch.randn(N, generator=g) * 0.1).to(torch.bfloat16)
            grad = bits(p.grad)
            opt.step()
            st = opt.state[p]
            steps.append(dict(grad=grad, param=bits(p.data), exp_avg=bits(st["exp_avg"]),
                              exp_avg_sq=bits(st["exp_avg_sq"])))
        cases.append(dict(name=name + ("_fp32states" if fp32_states else "_bf16states"),
                          lr=hp["lr"], beta1=hp["betas"][0], beta2=hp["betas"][1], eps=hp["eps"],
                          weight_decay=hp["weight_decay"], adamw_mode=hp["adamw_mode"],
                          bias_correction=hp["bias_correction"], bf16_states=not fp32_states,
                          init=init, steps=steps))
json.dump(dict(generator="scripts/gen-bf16-adam-golden.py", deepspeed=deepspeed.__version__,
               torch=torch.__version__, n=N, cases=cases), out, separators=(",", ":"))
out.write("\n")
