#!/usr/bin/env bash
# install-peers.sh — the programs deepgo's benchmarks compare themselves
# against, where a peer exists as a Debian package: fio (examples/bench-aio
# runs it on the same file, O_DIRECT, io_uring engine). Installs only what is
# missing; as root or through sudo. A benchmark without its peer says so and
# runs alone.
set -euo pipefail

pkgs=(fio)
missing=()
for p in "${pkgs[@]}"; do
	dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	echo "install-peers: all present: ${pkgs[*]}"
	exit 0
fi
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
echo "install-peers: installing ${missing[*]}"
$sudo apt-get install -y --no-install-recommends "${missing[@]}" || {
	$sudo apt-get update
	$sudo apt-get install -y --no-install-recommends "${missing[@]}"
}
