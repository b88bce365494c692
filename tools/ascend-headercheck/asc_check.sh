#!/usr/bin/env bash
# asc_check.sh MODE SRC [extra clang args]      type-check SRC on one NPU device pass
# asc_check.sh MODE --emit-pch OUT              precompile the shim + kernel_operator.h for that pass
# Type-checks one Ascend C source against the REAL public asc-devkit headers with a stock clang++,
# -fsyntax-only, using shim/asc_npu_shim.h for the closed bisheng builtins.
#   MODE = cube : NPU device pass for the AIC of a dav-c220 (910B) MIX kernel (__DAV_CUBE__)
#          vec  : NPU device pass for the AIV (__DAV_VEC__)
# Env: ASC_DEVKIT (required: a folder holding an asc-devkit snapshot's include/ and impl/), ASC_GEN
#      (dir holding the generated kernel_tiling/kernel_tiling.h), ASC_AS=0 to drop the local-memory
#      address spaces, ASC_CMATH=1 to pre-include <cmath>, CXX (default clang++-16),
#      ASC_PCH=FILE to start from a header precompiled with --emit-pch for the same MODE and env
#      (same declarations, parsed once: a check then takes a fraction of a second).
set -u
MODE=$1; SRC=$2; shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
D=${ASC_DEVKIT:?set ASC_DEVKIT to an asc-devkit snapshot (include/, impl/)}
G=${ASC_GEN:?set ASC_GEN to the folder holding kernel_tiling/kernel_tiling.h (see README)}
CXX=${CXX:-clang++-16}
case $MODE in
  cube) CORE=-D__DAV_CUBE__ ;;
  vec)  CORE=-D__DAV_VEC__ ;;
  *) echo "mode must be cube or vec" >&2; exit 2 ;;
esac
FLAGS=(-std=c++17 -ferror-limit=0 -Wno-everything
  -D__NPU_ARCH__=2201 -D__CCE_AICORE__=220 -D__NPU_DEVICE__ "$CORE")
[ "${ASC_AS:-1}" = 1 ] && FLAGS+=(-DASC_SHIM_ADDRESS_SPACES)
[ "${ASC_CMATH:-0}" = 1 ] && FLAGS+=(-DASC_SHIM_WITH_CMATH)
FLAGS+=(-I"$HERE/shim" -I"$G"
  -I"$D" -I"$D/include" -I"$D/include/basic_api" -I"$D/include/utils" -I"$D/include/adv_api"
  -I"$D/impl" -I"$D/impl/basic_api" -I"$D/impl/utils")
if [ "$SRC" = "--emit-pch" ]; then
  OUT=$1; shift
  exec "$CXX" -x c++-header "${FLAGS[@]}" -include "$HERE/shim/asc_npu_shim.h" "$HERE/shim/pch.h" -o "$OUT" "$@"
fi
if [ -n "${ASC_PCH:-}" ]; then
  PRE=(-include-pch "$ASC_PCH")
else
  PRE=(-include "$HERE/shim/asc_npu_shim.h")
fi
exec "$CXX" -x c++ -fsyntax-only "${FLAGS[@]}" "${PRE[@]}" "$@" "$SRC"
