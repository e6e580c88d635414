"""Golden routing of DeepSpeed's TopKGate for nn's moe_gate tests.

Run by hand (CPU torch + deepspeed):
    ~/.cache/deepgo/peers-venv/bin/python nn/testdata/moe/gen_gate.py

writes gate.json next to itself (DeepSpeed logs to stdout).

Each case calls deepspeed.moe.sharded_moe.top1gating / top2gating on fixed
random float32 logits, with use_rts=False, noisy_gate_policy=None and
top2_2nd_expert_sampling=False, once with sparse_routes=True (the routes
MOELayer uses) and once dense (combine weights [S, E, C], dispatch mask),
and records the gradient of sum(gates_routes * w) + c * l_aux with respect
to the logits for a fixed random w and c.
"""
import json
import os

import torch
from deepspeed.moe.sharded_moe import top1gating, top2gating

CASES = [
    # S, E, k, capacity_factor, min_capacity, drop_tokens, skew
    (16, 4, 1, 1.0, 4, True, 0.0),
    (16, 4, 1, 1.0, 4, False, 0.0),
    (32, 8, 1, 0.5, 2, True, 1.5),
    (12, 3, 1, 1.25, 0, True, 2.0),
    (64, 4, 1, 1.1, 4, True, 1.0),
    (24, 5, 1, 1.0, 4, False, 2.0),
    (16, 4, 2, 1.0, 4, True, 0.0),
    (16, 4, 2, 1.0, 4, False, 0.0),
    (33, 5, 2, 0.75, 1, True, 1.0),
    (20, 6, 2, 1.5, 8, True, 2.0),
    (40, 8, 2, 0.3, 0, True, 1.0),
    (30, 4, 2, 1.0, 4, False, 3.0),
]


def main():
    g = torch.Generator().manual_seed(1234)
    out = []
    for s, e, k, cf, mc, drop, skew in CASES:
        logits = torch.randn(s, e, generator=g, dtype=torch.float32)
        logits[:, 0] += skew  # a popular expert, so capacity drops tokens
        w = torch.randn(k, s, generator=g, dtype=torch.float32)
        c = 0.37
        x = logits.clone().requires_grad_(True)
        if k == 1:
            r = top1gating(x, cf, mc, None, None, drop, False, None, sparse_routes=True)
            dense = top1gating(logits.clone(), cf, mc, None, None, drop, False, None)
        else:
            r = top2gating(x, cf, mc, drop, None, False, sparse_routes=True)
            dense = top2gating(logits.clone(), cf, mc, drop, None, False)
        l_aux, cap, _, idx, loc, gates, counts = r
        (torch.sum(gates * w) + c * l_aux).backward()
        out.append({
            "s": s, "e": e, "k": k, "capacity_factor": cf, "min_capacity": mc, "drop_tokens": drop,
            "logits": logits.flatten().tolist(),
            "capacity": int(cap), "expert": idx.flatten().tolist(), "loc": loc.flatten().tolist(),
            "weight": gates.detach().flatten().tolist(), "l_aux": float(l_aux), "exp_counts": counts.tolist(),
            "w": w.flatten().tolist(), "c": c, "dlogits": x.grad.flatten().tolist(),
            "combine_shape": list(dense[1].shape), "combine": dense[1].flatten().tolist(),
            "dispatch": dense[2].flatten().int().tolist(), "dense_l_aux": float(dense[0]),
        })
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "gate.json"), "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
