# cuda-wheels.sh — sourced by cuda-toolchain.sh and cuda-toolchain-clang.sh.

# prepare_dir DIR STAMP PARTIAL WHO VAR leaves DIR empty and marked as the
# calling script's (PARTIAL inside), or fails: a folder is deleted only when
# the script made it (STAMP or PARTIAL inside). WHO names the script and
# VAR the variable that points DIR elsewhere, for the error.
prepare_dir() {
	local dir=$1 stamp=$2 partial=$3 who=$4 var=$5
	if [[ -d "$dir" && -n "$(ls -A "$dir")" ]]; then
		if [[ ! -e "$stamp" && ! -e "$partial" ]]; then
			cat >&2 <<EOT
$who: $dir is not empty and was not made by this script
  (no $(basename "$stamp") or $(basename "$partial") in it): leaving it untouched.
  Point $var at a new or empty folder, or remove this one yourself.
EOT
			return 1
		fi
		rm -rf "$dir"
	elif [[ -e "$dir" && ! -d "$dir" ]]; then
		echo "$who: $dir exists and is not a folder" >&2
		return 1
	fi
	mkdir -p "$dir"
	: >"$partial"
}
