#!/usr/bin/env bash
# gpu-check.sh — on a machine with an NVIDIA GPU: build the CUDA library and
# the gpucheck program (system CUDA or the wheels, see cuda-toolchain.sh), run
# gpucheck (every kernel against its CPU twin, with a table), the Go test
# binaries build/cuda/{cuda,nccl}.test, the root package's CUDA tests
# (build/cuda/deepgo.test -test.run CUDA: the engine table and the GPT on
# GPU 0 against the CPU backend) and the two benchmarks on the GPU
# (build/cuda/bench-train and bench-adam -device cuda), then print one
# summary table: each part's result, seconds and key figures. The Go
# binaries are built here when Go is present (scripts/build-gpu-binaries.sh);
# else carried in from a CPU machine, which builds them with `make cuda`.
#
# Time: everything, builds included, within GPU_CHECK_BUDGET seconds (default
# 480: 8 minutes); each part also has its own limit (below), and a part the
# budget no longer covers fails as "not run". GPU_CHECK_PREBUILT=1 builds
# nothing and runs what GPU_CHECK_BIN (default build/cuda) holds: a GPU
# machine with build/cuda carried from a CPU machine saves the build's
# minutes (scripts/gpu-check-test.sh also runs the script so, on fakes).
#
# It passes only when everything ran: a machine without a GPU fails ("no
# GPU"), a missing test binary fails, and the Go tests run with
# DEEPGO_REQUIRE_GPU=1 (internal/gputest), so a GPU test that would skip
# (no device, no NCCL, no cuBLAS) fails instead; any test still reported as
# skipped fails the check too. libnccl and cuBLAS are taken from the
# toolchain in use (system CUDA, pip-installed wheels or DG_CUDA_DIR) through
# DEEPGO_NCCL_LIB and DEEPGO_CUBLAS_LIB unless those are set already.
# Every failure is reported, with the tables, before the non-zero exit.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
t0=$SECONDS
BUDGET="${GPU_CHECK_BUDGET:-480}"
BIN="${GPU_CHECK_BIN:-$ROOT/build/cuda}"
failed=()
# the summary: one entry per part, in order
rows=()

fail() {
	failed+=("$1")
	echo "gpu-check: FAILED: $1"
}

# record NAME RESULT SECONDS FIGURES: a row of the summary table
record() {
	rows+=("$(printf '%-18s %-5s %6s  %s' "$1" "$2" "$3" "$4")")
}

finish() {
	if ((${#rows[@]} > 0)); then
		echo
		echo "gpu-check: summary"
		printf '%-18s %-5s %6s  %s\n' part result s "key figures"
		printf '%s\n' "${rows[@]}"
		echo
	fi
	if ((${#failed[@]} > 0)); then
		echo "gpu-check: FAILED in $((SECONDS - t0)) s:"
		printf '  - %s\n' "${failed[@]}"
		exit 1
	fi
	echo "gpu-check: PASS in $((SECONDS - t0)) s"
	exit 0
}

# limit CAP: seconds a part may run: CAP, or what is left of the budget
# (0 when under 10 s are left)
limit() {
	local left=$((BUDGET - (SECONDS - t0)))
	if ((left < 10)); then
		echo 0
	else
		echo $((left < $1 ? left : $1))
	fi
}

# A machine without a GPU has no NVIDIA device node (/dev/dxg under WSL)
# and no nvidia-smi: stop before a build of minutes.
if ! compgen -G '/dev/nvidia[0-9]*' >/dev/null && [[ ! -e /dev/dxg ]] && ! command -v nvidia-smi >/dev/null 2>&1; then
	fail "no GPU on this machine (no /dev/nvidia* device, no nvidia-smi)"
	finish
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null ||
	echo "gpu-check: nvidia-smi not found"

if [[ -z "${GPU_CHECK_PREBUILT:-}" ]]; then
	# Keep carried-in Go binaries: build-cuda.sh rebuilds its test
	# binaries only when Go is present (SKIP_GO when it is not), and so
	# does build-gpu-binaries.sh.
	skip_go=()
	command -v go >/dev/null 2>&1 || skip_go=(SKIP_GO=1)
	p0=$SECONDS
	if ! timeout "$(limit 400)" env "${skip_go[@]}" scripts/build-cuda.sh; then
		fail "scripts/build-cuda.sh"
		record build FAIL $((SECONDS - p0)) "scripts/build-cuda.sh failed or ran out of the budget"
		finish
	fi
	if command -v go >/dev/null 2>&1 && ! timeout "$(limit 300)" scripts/build-gpu-binaries.sh; then
		fail "scripts/build-gpu-binaries.sh"
		record build FAIL $((SECONDS - p0)) "scripts/build-gpu-binaries.sh failed or ran out of the budget"
		finish
	fi
	record build ok $((SECONDS - p0)) "$(command -v go >/dev/null 2>&1 && echo "library, gpucheck, Go binaries" || echo "library, gpucheck (Go binaries carried in)")"
fi

# Where the binaries load libnccl and cuBLAS from: the toolchain just built
# with, unless the caller chose (the binaries also look in build/cuda/lib
# next to themselves and on the loader's path).
eval "$(scripts/cuda-toolchain.sh --env 2>/dev/null)"
if [[ -z "${DEEPGO_NCCL_LIB:-}" && -e "${DG_NCCL_LIB:-/nonexistent}/libnccl.so.2" ]]; then
	export DEEPGO_NCCL_LIB="$DG_NCCL_LIB/libnccl.so.2"
fi
if [[ -z "${DEEPGO_CUBLAS_LIB:-}" ]] && compgen -G "${DG_CUDA_LIB:-/nonexistent}/libcublas.so.[0-9]*" >/dev/null; then
	export DEEPGO_CUBLAS_LIB="$DG_CUDA_LIB"
fi
echo "gpu-check: DEEPGO_NCCL_LIB=${DEEPGO_NCCL_LIB:-(unset)} DEEPGO_CUBLAS_LIB=${DEEPGO_CUBLAS_LIB:-(unset)}"

# gpucheck: the kernel table; its figures are the rows, the failing rows and
# the largest relative error any row reports
echo "gpu-check: $BIN/gpucheck"
p0=$SECONDS
lim=$(limit 240)
if ((lim == 0)); then
	fail "gpucheck: not run: the ${BUDGET} s budget is spent"
	record gpucheck FAIL 0 "not run: budget spent"
else
	timeout "$lim" "$BIN/gpucheck" 2>&1 | tee "$BIN/gpucheck.log"
	rc=${PIPESTATUS[0]}
	nrows=$(grep -cE ' (PASS|FAIL) +[0-9.]+$' "$BIN/gpucheck.log")
	nfail=$(grep -cE ' FAIL +[0-9.]+$' "$BIN/gpucheck.log")
	maxrel=$(grep -oE 'rel [0-9.e+-]+' "$BIN/gpucheck.log" | awk '{ if ($2 + 0 > m) m = $2 + 0 } END { printf "%.2e", m }')
	figs="$nrows rows, $nfail failing, max rel err $maxrel"
	if ((rc != 0)); then
		if grep -q "no GPU" "$BIN/gpucheck.log"; then
			fail "no GPU: $(grep -m1 "no GPU" "$BIN/gpucheck.log")"
			record gpucheck FAIL $((SECONDS - p0)) "no GPU"
			finish # nothing below can run either
		fi
		fail "gpucheck exited $rc (see the table above and $BIN/gpucheck.log)"
		record gpucheck FAIL $((SECONDS - p0)) "exit $rc; $figs"
	else
		record gpucheck PASS $((SECONDS - p0)) "$figs"
	fi
fi

# run_tests NAME DIR CAP [RUN]: $BIN/NAME.test in package folder DIR (only
# the tests matching RUN when given), every GPU test required; prints the
# run/pass/fail/skip lines
run_tests() {
	local name=$1 dir=$2 bin="$BIN/$1.test" log="$BIN/$1.log" lim run=() p0=$SECONDS
	lim=$(limit "$3")
	[[ -n "${4:-}" ]] && run=(-test.run "$4")
	if [[ ! -x "$bin" ]]; then
		fail "no $bin: build it with Go (make cuda) and carry build/cuda here"
		record "$name.test" FAIL 0 "no binary"
		return
	fi
	if ((lim == 0)); then
		fail "$name tests: not run: the ${BUDGET} s budget is spent"
		record "$name.test" FAIL 0 "not run: budget spent"
		return
	fi
	echo "gpu-check: $bin ${run[*]}"
	(cd "$dir" && DEEPGO_REQUIRE_GPU=1 timeout "$lim" "$bin" -test.v -test.timeout "$((lim > 20 ? lim - 10 : lim))s" "${run[@]}") >"$log" 2>&1
	local rc=$? result=PASS
	grep -E '^(=== RUN|\s*--- |PASS|FAIL|ok)|_test.go' "$log"
	local npass nfail skips
	npass=$(grep -cE -- '^--- PASS' "$log")
	nfail=$(grep -cE -- '^\s*--- FAIL' "$log")
	skips=$(grep -c -- '--- SKIP' "$log")
	if ((rc != 0)); then
		fail "$name tests exited $rc (see above and $log)"
		result=FAIL
	fi
	if ((skips > 0)); then
		fail "$name tests: $skips skipped (a skip means untested here)"
		result=FAIL
	fi
	if ((npass == 0 && rc == 0)); then
		fail "$name tests: no test ran"
		result=FAIL
	fi
	record "$name.test" "$result" $((SECONDS - p0)) "$npass top-level passed, $nfail failed (incl. subtests), $skips skipped${4:+; -test.run $4}$( ((rc == 124)) && echo "; timed out after ${lim} s")"
}
run_tests cuda cuda 180
# one-rank communicators: NCCL refuses two ranks on one GPU
run_tests nccl nccl 90
# the engine and the GPT on GPU 0 (TestDeviceEquivalenceCUDA, TestGPTOnCUDA)
run_tests deepgo . 180 CUDA

# json_num FILE KEY: the first number under "KEY" in FILE's JSON
json_num() {
	grep -oE "\"$2\": ?-?[0-9][0-9.eE+-]*" "$1" | head -1 | sed -E 's/.*: ?//'
}

# run_bench NAME CAP ARGS...: $BIN/NAME with ARGS, its JSON kept in
# $BIN/NAME.json; prints it
run_bench() {
	local name=$1 bin="$BIN/$1" out="$BIN/$1.json" lim p0=$SECONDS
	lim=$(limit "$2")
	shift 2
	if [[ ! -x "$bin" ]]; then
		fail "no $bin: build it with scripts/build-gpu-binaries.sh (make cuda) and carry build/cuda here"
		record "$name" FAIL 0 "no binary"
		return 1
	fi
	if ((lim == 0)); then
		fail "$name: not run: the ${BUDGET} s budget is spent"
		record "$name" FAIL 0 "not run: budget spent"
		return 1
	fi
	echo "gpu-check: $bin $*"
	timeout "$lim" "$bin" "$@" >"$out" 2>"$BIN/$name.err"
	local rc=$?
	cat "$out" "$BIN/$name.err"
	if ((rc != 0)); then
		fail "$name exited $rc (see $BIN/$name.err)"
		record "$name" FAIL $((SECONDS - p0)) "exit $rc$( ((rc == 124)) && echo ": timed out after ${lim} s"): $(tail -1 "$BIN/$name.err")"
		return 1
	fi
	bench_s=$((SECONDS - p0))
}

# GPT-2 small's shape with an 8k vocabulary: 8 x 256 tokens a step
if run_bench bench-train 90 -device cuda -layers 12 -heads 12 -width 768 -vocab 8192 -seq 256 -batch 8 -steps 10; then
	f="$BIN/bench-train.json"
	record bench-train PASS "$bench_s" "$(printf '%.0f tokens/s, MFU %.3f (no ckpt) vs peak %.0f GFLOP/s' \
		"$(json_num "$f" tokens_per_s)" "$(json_num "$f" mfu)" "$(json_num "$f" peak_gflops)")"
fi
# 256 Mi parameters: ~7 GB moved per fp32 step
if run_bench bench-adam 90 -device cuda -sizes 256 -reps 10; then
	f="$BIN/bench-adam.json"
	record bench-adam PASS "$bench_s" "$(printf 'fp32 AdamW %.0f GB/s vs copy roof %.0f GB/s (%.2f)' \
		"$(json_num "$f" effective_GB_s)" "$(json_num "$f" roof_GB_s)" "$(json_num "$f" fraction_of_roof)")"
fi
finish
