#!/usr/bin/env bash
# Install jaxtrainer and the peers' packages on a machine without internet, from a
# folder of wheels made beforehand on a machine with one.
#
#   On a machine with internet (any OS; the wheels are chosen for the target):
#     bash benchmarks/accelerator/wheels.sh download DIR [REQUIREMENTS ...]
#   On the offline machine (its Python 3.11 and its JAX already installed):
#     bash benchmarks/accelerator/wheels.sh install DIR TARGET [REQUIREMENTS ...] [-- PIP_ARGS]
#     export PYTHONPATH=$PYTHONPATH:TARGET
#
# REQUIREMENTS default to requirements/ours.txt: every package jaxtrainer needs beyond
# jax, jaxlib, numpy, scipy, ml_dtypes and opt_einsum (which the machine's own JAX
# brings), pinned. requirements/<peer>.txt lists a peer's packages beyond those; a
# peer that needs other releases of shared packages (PureJaxRL's gymnax < 1.0) goes
# to a TARGET of its own, placed before ours on that side's PYTHONPATH.
#
# download: wheels for CPython 3.11 on manylinux x86-64 (glibc 2.17 to 2.35), each
#   without its dependencies (the files list all of them); a package published only
#   as source is built into a wheel here (pure Python ones: rliable).
# install: pip with --no-deps --no-index from DIR into TARGET (TARGET, not
#   site-packages, so the machine's JAX stays first on the path); PIP_ARGS after "--"
#   go to pip, e.g. "-- --index-url file:///opt/pypi/simple" to take the packages a
#   machine's own package index holds from there (then DIR needs only the others),
#   and jaxtrainer itself from this checkout.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cmd="${1:?usage: wheels.sh download DIR [REQS...] | install DIR TARGET [REQS...] [-- PIP_ARGS]}"
dir="${2:?a wheel folder}"
shift 2
platforms=()
for p in manylinux_2_35_x86_64 manylinux_2_34_x86_64 manylinux_2_31_x86_64 manylinux_2_28_x86_64 \
         manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
         manylinux1_x86_64; do platforms+=(--platform "$p"); done

case "$cmd" in
download)
  reqs=("$@"); [ ${#reqs[@]} -gt 0 ] || reqs=("$here/requirements/ours.txt")
  mkdir -p "$dir"
  grep -hv '^\s*#' "${reqs[@]}" | grep . | while read -r req; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
        --implementation cp "${platforms[@]}" -d "$dir" "$req" 2>/dev/null ||
      python3 -m pip wheel -q --no-deps -w "$dir" "$req"
  done
  python3 -m pip wheel -q --no-deps -w "$dir" "$root"   # jaxtrainer itself
  ls "$dir" | wc -l | xargs echo "wheels in $dir:" ;;
install)
  target="${1:?a target folder}"; shift
  reqs=(); pip_args=()
  while [ $# -gt 0 ]; do
    if [ "$1" = "--" ]; then shift; pip_args=("$@"); break; fi
    reqs+=("$1"); shift
  done
  [ ${#reqs[@]} -gt 0 ] || reqs=("$here/requirements/ours.txt")
  index=(--no-index); for a in "${pip_args[@]+"${pip_args[@]}"}"; do
    [ "$a" = "--index-url" ] && index=(); done
  req_args=(); for r in "${reqs[@]}"; do req_args+=(-r "$r"); done
  if compgen -G "$dir/jaxtrainer-*.whl" >/dev/null; then req_args+=(jaxtrainer); fi
  start=$SECONDS
  PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-deps --no-compile \
      --no-cache-dir --upgrade --target "$target" --find-links "$dir" "${index[@]+"${index[@]}"}" \
      "${pip_args[@]+"${pip_args[@]}"}" "${req_args[@]}"
  echo "installed ${reqs[*]##*/} into $target in $((SECONDS - start)) s" ;;
*)
  echo "wheels.sh: unknown command '$cmd' (download or install)" >&2; exit 2 ;;
esac
