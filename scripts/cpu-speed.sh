#!/usr/bin/env bash
# cpu-speed.sh — every figure the CPU-speed goals ask for, measured in one
# run on this machine and printed as one table (goal, measured, pass):
#   - the BLAS core deepgo runs and its sgemm against the same library with
#     the CPU's best core forced by hand (OPENBLAS_CORETYPE), alternated;
#   - bench-train -peer: our GPT's tokens/s over PyTorch eager, 1 and 2 threads
#     (and, as information rather than goals, again on Intel MKL when
#     scripts/install-mkl.sh fetched it, and with every product on OpenBLAS,
#     DEEPGO_BLAS=openblas, where deepgo's own sgemm runs the Linear products);
#   - bench-adam -peer: our AdamW over DeepSpeed's CPU Adam per size and
#     thread count, and its fraction of the update roof;
#   - bench-kernels: every bandwidth kernel against its roof at 64 and 256 MiB.
# The benchmarks' JSON stays in the output folder for the closing note.
# Run it on a quiet machine: nothing else running, no helpers, no CI.
#
#   scripts/cpu-speed.sh [OUT_DIR]     (about 15 minutes on 2 vCPUs, 23 with the MKL and OpenBLAS rows)
#
# Without the peers (scripts/install-peers.sh) their rows say so and the
# rest still runs. ROUNDS (default 3) sets the peers' interleaved rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-$(mktemp -d /tmp/cpu-speed.XXXXXX)}
rounds=${ROUNDS:-3}
mkdir -p "$out"
echo "cpu-speed: results in $out" >&2

go build -o "$out/deepgo" ./cmd/deepgo
for b in bench-train bench-adam bench-kernels; do
	go build -o "$out/$b" "./examples/$b"
done

# the core the CPU supports, as selftest names it
"$out/deepgo" selftest -n 1024 >"$out/selftest.txt"
best=$(sed -n 's/.*CPU supports "\([A-Za-z0-9]*\)".*/\1/p' "$out/selftest.txt" | head -1)
: >"$out/sgemm.txt"
for r in 1 2 3; do
	"$out/deepgo" selftest -n 1024 | sed -n "s/^sgemm.*: \([0-9.]*\) GFLOP.*/ours \1/p" >>"$out/sgemm.txt"
	if [ -n "$best" ]; then
		OPENBLAS_CORETYPE=$best "$out/deepgo" selftest -n 1024 |
			sed -n "s/^sgemm.*: \([0-9.]*\) GFLOP.*/forced \1/p" >>"$out/sgemm.txt"
	fi
done

"$out/bench-train" -peer -rounds "$rounds" >"$out/bench-train.json"
# The same GPT on Intel MKL when `make mkl` fetched it (PyTorch's own sgemm
# is MKL's): its rows say what the BLAS alone is worth.
mkl=${DG_MKL_DIR:-$HOME/.cache/deepgo/mkl}/lib/libmkl_rt.so.3
if [ -f "$mkl" ]; then
	DEEPGO_BLAS=$mkl "$out/bench-train" -peer -rounds "$rounds" >"$out/bench-train-mkl.json"
fi
if grep -q "^Linear layer's products: deepgo" "$out/selftest.txt"; then
	DEEPGO_BLAS=openblas "$out/bench-train" -peer -rounds "$rounds" >"$out/bench-train-openblas.json"
fi
"$out/bench-adam" -peer -rounds "$rounds" >"$out/bench-adam.json"
"$out/bench-kernels" -mib 64,256 >"$out/bench-kernels.json"

python3 - "$out" "$best" <<'EOF'
import json, os, statistics, sys

out, best = sys.argv[1], sys.argv[2]
rows = []

def row(goal, measured, ok):
    rows.append((goal, measured, "PASS" if ok else "FAIL" if ok is not None else "n/a"))

core = [l.strip() for l in open(os.path.join(out, "selftest.txt")) if l.startswith("OpenBLAS core:")]
row("BLAS core", core[0].removeprefix("OpenBLAS core: ") if core else "not OpenBLAS", None)
s = {"ours": [], "forced": []}
for l in open(os.path.join(out, "sgemm.txt")):
    k, v = l.split()
    s[k].append(float(v))
if s["ours"] and s["forced"]:
    o, f = statistics.median(s["ours"]), statistics.median(s["forced"])
    row(f"sgemm 1024^3 1t within 10% of OPENBLAS_CORETYPE={best}", f"{o:.1f} vs {f:.1f} GFLOP/s ({o / f:.3f})", o >= 0.9 * f)

linear = [l.strip() for l in open(os.path.join(out, "selftest.txt")) if l.startswith("Linear layer's products:")]
row("Linear products", linear[0].removeprefix("Linear layer's products: ") if linear else "?", None)
for name, blas in (("bench-train.json", ""), ("bench-train-mkl.json", ", MKL (not a goal)"),
                   ("bench-train-openblas.json", ", OpenBLAS only (not a goal)")):
    if not os.path.exists(os.path.join(out, name)):
        if "MKL" in blas:
            row(f"GPT tokens/s >= PyTorch eager{blas}", "not run (scripts/install-mkl.sh fetches MKL)", None)
        continue
    bt = json.load(open(os.path.join(out, name)))
    peer = bt.get("peer") or {}
    if isinstance(peer, dict) and peer.get("results"):
        for r in peer["results"]:
            row(f"GPT tokens/s >= PyTorch eager{blas}, {r['threads']}t",
                f"{r['deepgo_over_torch']:.3f}x (MFU {r['deepgo_mfu']:.2f} vs {r['torch_mfu']:.2f})",
                None if "not a goal" in blas else r["deepgo_over_torch"] >= 1)
    else:
        row(f"GPT tokens/s >= PyTorch eager{blas}", str(peer.get("unavailable", peer) if isinstance(peer, dict) else peer), None)

ba = json.load(open(os.path.join(out, "bench-adam.json")))
peer = ba.get("peer")
if isinstance(peer, dict):
    for r in peer["results"]:
        row(f"AdamW >= DeepSpeed, {r['params'] >> 20} Mi {r['threads']}t",
            f"{r['deepgo_over_deepspeed']:.3f}x (per-round median {r['deepgo_over_deepspeed_round_median']:.3f}, min {r['deepgo_over_deepspeed_round_min']:.3f})",
            r["deepgo_over_deepspeed"] >= 1)
else:
    row("AdamW >= DeepSpeed", str(peer), None)
for r in ba["results"]:
    if r["case"] == "adamw fp32":
        goal = 0.95 if r["threads"] == 1 else 0.9
        row(f"AdamW >= {goal} of the update roof, {r['params'] >> 20} Mi {r['threads']}t",
            f"{r['fraction_of_roof']:.3f}", r["fraction_of_roof"] >= goal)

bk = json.load(open(os.path.join(out, "bench-kernels.json")))
for r in bk["results"]:  # the goal holds from 64 MiB up
    row(f"{r['kernel']} >= {bk['target_ratio']} of {r['roof']}, {r['mib']} MiB {r['threads']}t",
        f"{r['ratio']:.3f} (per-rep median {r['pair_ratio_median']:.3f})", r["meets_goal"] if r["mib"] >= 64 else None)

print(f"cpu-speed on {bk['machine']['cpu_model']} ({bk['machine']['cpus']} CPUs, ISA {bk['isa']})")
w = max(len(g) for g, _, _ in rows)
for g, m, p in rows:
    print(f"{p:4}  {g:<{w}}  {m}")
fails = sum(p == "FAIL" for _, _, p in rows)
print(f"{fails} of {sum(p != 'n/a' for _, _, p in rows)} goals not met")
EOF
