#!/usr/bin/env bash
# gpu-check-test.sh — checks of scripts/gpu-check.sh that need no GPU (CI,
# about a second):
#
#   1. on a machine without a GPU, `make gpu-check` fails at once saying
#      "no GPU" and never prints PASS (skipped where there is a GPU: there
#      gpu-check itself is the test);
#   2. on fakes (a fake nvidia-smi on PATH, GPU_CHECK_PREBUILT=1 and
#      GPU_CHECK_BIN pointing at shell scripts standing in for gpucheck,
#      the three test binaries and the two benchmarks): every part runs
#      with the arguments and environment it must get, the summary table
#      carries each part's figures, and one failing part fails the whole
#      while the others still run and report.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
status=0
bad() {
	echo "gpu-check-test: FAIL: $*"
	status=1
}

if compgen -G '/dev/nvidia[0-9]*' >/dev/null || [[ -e /dev/dxg ]] || command -v nvidia-smi >/dev/null 2>&1; then
	echo "gpu-check-test: this machine has a GPU: skipping the no-GPU check"
else
	out="$(make --no-print-directory gpu-check 2>&1)"
	rc=$?
	echo "$out" | sed 's/^/  | /'
	if ((rc == 0)) || ! grep -q "no GPU" <<<"$out" || grep -q "PASS" <<<"$out"; then
		bad "make gpu-check without a GPU exited $rc, want non-zero with \"no GPU\" and no PASS"
	fi
fi

fake="$(mktemp -d)"
trap 'rm -rf "$fake"' EXIT
mkdir -p "$fake/path" "$fake/bin"
printf '#!/bin/sh\necho "Fake H200, 580.00, 143771 MiB"\n' >"$fake/path/nvidia-smi"
cat >"$fake/bin/gpucheck" <<'F'
#!/bin/sh
echo "sumsq      f32          1000  rel 3.00e-13             PASS     10.0"
echo "axpy       f32          1000  0 bad                  PASS     20.0"
echo "optim      bf16         1000  rel 1.25e-09           PASS     30.0"
echo "gpucheck: PASS (0 failing rows)"
F
# a test binary: passes when it gets DEEPGO_REQUIRE_GPU=1 and, for
# deepgo.test, -test.run CUDA from the repository root
cat >"$fake/bin/cuda.test" <<'F'
#!/bin/sh
[ "$DEEPGO_REQUIRE_GPU" = 1 ] || { echo "FAIL: no DEEPGO_REQUIRE_GPU"; exit 1; }
name=$(basename "$0" .test)
if [ "$name" = deepgo ]; then
	case "$*" in *"-test.run CUDA"*) ;; *) echo "FAIL: args $*"; exit 1 ;; esac
	[ -e device_cuda_test.go ] || { echo "FAIL: run in $(pwd)"; exit 1; }
fi
echo "=== RUN   Test${name}A"
echo "--- PASS: Test${name}A (0.01s)"
echo "=== RUN   Test${name}B"
echo "--- PASS: Test${name}B (0.01s)"
echo PASS
F
cp "$fake/bin/cuda.test" "$fake/bin/nccl.test"
cp "$fake/bin/cuda.test" "$fake/bin/deepgo.test"
cat >"$fake/bin/bench-train" <<'F'
#!/bin/sh
case "$*" in *"-device cuda"*) ;; *) echo "args $*" >&2; exit 2 ;; esac
echo '{"device":"cuda:0","mfu_formula":"x","peak_gflops":51234.7,"runs":[{"device":"cuda:0","tokens_per_s":123456.7,"mfu":0.4321},{"tokens_per_s":1,"mfu":0.1}]}'
F
cat >"$fake/bin/bench-adam" <<'F'
#!/bin/sh
case "$*" in *"-device cuda"*) ;; *) echo "args $*" >&2; exit 2 ;; esac
if [ -n "$FAKE_ADAM_FAIL" ]; then echo "bench-adam: cuda: out of memory" >&2; exit 1; fi
printf '{\n  "device": "cuda:0",\n  "roof_GB_s": {\n    "256M": 4100.5\n  },\n  "results": [\n    {\n      "effective_GB_s": 3500.2,\n      "roof_GB_s": 4000.9,\n      "fraction_of_roof": 0.8748\n    }\n  ]\n}\n'
F
chmod +x "$fake"/path/* "$fake"/bin/*

run_fake() {
	PATH="$fake/path:$PATH" GPU_CHECK_PREBUILT=1 GPU_CHECK_BIN="$fake/bin" GPU_CHECK_BUDGET=60 \
		DEEPGO_NCCL_LIB=x DEEPGO_CUBLAS_LIB=x bash scripts/gpu-check.sh 2>&1
}
out="$(run_fake)"
rc=$?
summary="$(sed -n '/^gpu-check: summary/,$p' <<<"$out")"
echo "$summary" | sed 's/^/  | /'
((rc == 0)) || bad "on fakes that pass: exit $rc, want 0; output:"$'\n'"$out"
for want in \
	'^gpucheck +PASS .*3 rows, 0 failing, max rel err 1.25e-09' \
	'^cuda.test +PASS .*2 top-level passed, 0 failed' \
	'^nccl.test +PASS .*2 top-level passed' \
	'^deepgo.test +PASS .*2 top-level passed.*-test.run CUDA' \
	'^bench-train +PASS .*123457 tokens/s, MFU 0.432 .*peak 51235 GFLOP/s' \
	'^bench-adam +PASS .*fp32 AdamW 3500 GB/s vs copy roof 4001 GB/s \(0.87\)' \
	'^gpu-check: PASS'; do
	grep -qE "$want" <<<"$summary" || bad "summary lacks /$want/"
done

out="$(FAKE_ADAM_FAIL=1 run_fake)"
rc=$?
summary="$(sed -n '/^gpu-check: summary/,$p' <<<"$out")"
((rc != 0)) || bad "with bench-adam failing: exit 0, want non-zero"
for want in '^bench-train +PASS' '^bench-adam +FAIL .*exit 1: bench-adam: cuda: out of memory' '^gpu-check: FAILED' '- bench-adam exited 1'; do
	grep -qE -- "$want" <<<"$summary" || bad "with bench-adam failing, the summary lacks /$want/:"$'\n'"$summary"
done

rm "$fake/bin/deepgo.test"
out="$(run_fake)"
grep -qE '^deepgo.test +FAIL .*no binary' <<<"$out" || bad "without deepgo.test: no FAIL row saying so:"$'\n'"$out"

((status == 0)) && echo "gpu-check-test: PASS"
exit $status
