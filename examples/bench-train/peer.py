# peer.py: one round of bench-train's peer, run by `bench-train -peer` with the
# peers' venv (scripts/install-peers.sh): the GPT that bench-train times
# (nn.GPT: GPT-2 architecture) in PyTorch eager, fp32, forward + backward
# (no optimizer step: bench-train excludes it too). Like bench-train it takes
# one warm-up step, then STEPS timed steps (perf_counter around forward and
# backward; grads are set to None before each, untimed) and reports their
# mean. Writes one JSON object to stdout.
#
#   python peer.py THREADS STEPS LAYERS HEADS WIDTH VOCAB SEQ BATCH
import json
import math
import os
import resource
import sys
import time

# Libraries log to stdout: keep it for the result alone.
result_out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)

threads, steps, L, H, C, V, T, B = (int(a) for a in sys.argv[1:9])
if os.environ.get("OMP_NUM_THREADS") != str(threads):
    sys.exit("peer.py: OMP_NUM_THREADS=%r, want %d" % (os.environ.get("OMP_NUM_THREADS"), threads))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(threads)


class Block(nn.Module):
    """nn.Block: pre-LN, biases on every linear, LayerNorm eps 1e-5, GELU
    (tanh), causal attention scaled by 1/sqrt(head dim)."""

    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.c_attn = nn.Linear(C, 3 * C)
        self.attn_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (z.view(b, t, H, C // H).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(b, t, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    """nn.GPT: token + learned position embedding, the blocks, a final
    LayerNorm and a head tied to the token embedding (no bias); mean
    cross-entropy over the B*T tokens."""

    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(C, eps=1e-5)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * L))
            elif p.dim() == 2:
                nn.init.normal_(p, std=0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, tgt):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for blk in self.h:
            x = blk(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, V), tgt.view(-1))


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


torch.manual_seed(1)
model = GPT()
idx, tgt = torch.randint(V, (B, T)), torch.randint(V, (B, T))
ts = []
cpu0 = wall0 = 0.0
for s in range(steps + 1):
    model.zero_grad(set_to_none=True)
    if s == 1:
        cpu0, wall0 = cpu_seconds(), time.perf_counter()
    t0 = time.perf_counter()
    loss = model(idx, tgt)
    loss.backward()
    if s > 0:  # the first step allocates and warms caches
        ts.append(time.perf_counter() - t0)
busy = (cpu_seconds() - cpu0) / (time.perf_counter() - wall0)
mean = sum(ts) / len(ts)
json.dump({"torch": torch.__version__, "threads": threads, "torch_threads": torch.get_num_threads(),
           "params": sum(p.numel() for p in model.parameters()), "step_s": mean,
           "tokens_per_s": B * T / mean, "loss": loss.item(), "busy_threads": busy,
           "attention": "F.scaled_dot_product_attention(is_causal=True)"}, result_out)
result_out.write("\n")
result_out.flush()
