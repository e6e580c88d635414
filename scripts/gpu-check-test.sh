#!/usr/bin/env bash
# gpu-check-test.sh — `make gpu-check` on a machine without a GPU (CI) must
# fail at once saying "no GPU", never print PASS. On a machine with a GPU
# there is nothing to check here (gpu-check itself is the test there).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if compgen -G '/dev/nvidia[0-9]*' >/dev/null || [[ -e /dev/dxg ]] || command -v nvidia-smi >/dev/null 2>&1; then
	echo "gpu-check-test: this machine has a GPU: nothing to check"
	exit 0
fi
out="$(make --no-print-directory gpu-check 2>&1)"
rc=$?
echo "$out" | sed 's/^/  | /'
if ((rc == 0)) || ! grep -q "no GPU" <<<"$out" || grep -q "PASS" <<<"$out"; then
	echo "gpu-check-test: FAIL: make gpu-check without a GPU exited $rc, want non-zero with \"no GPU\" and no PASS"
	exit 1
fi
echo "gpu-check-test: PASS"
