#!/usr/bin/env bash
# Build ggml_mm against a ggml source tree in the two configurations of issue #24's table:
#
#   OUTDIR/sdcpp/ggml_mm  stable-diffusion.cpp's build of ggml: its CMakeLists adds ggml with
#                         ggml's defaults (static, Release -O3, GGML_NATIVE=ON -> -march=native,
#                         GGML_OPENMP=ON, GGML_CPU_REPACK=ON but unused since sd.cpp puts weights
#                         in the default CPU buffer, GGML_LLAMAFILE=OFF) and -DGGML_MAX_NAME=160.
#   OUTDIR/best/ggml_mm   the same source with ggml's optional fast paths: GGML_LLAMAFILE=ON
#                         (llamafile sgemm for Q8_0/Q4_0/Q5_0) and weights placed in the CPU
#                         device's extra buffer types (AMX if built and present, else CPU_REPACK).
#
# usage: bench/ggml_gemm/build.sh GGML_SRC OUTDIR [-j N] [--gcc]
#   GGML_SRC  a ggml checkout (the commit sd.cpp pins: see bench/ggml_gemm/README.md)
#   --gcc     skip cmake even where it exists (the plain gcc/g++ build is used without cmake)
set -euo pipefail

usage() { echo "usage: $0 GGML_SRC OUTDIR [-j N] [--gcc]" >&2; exit 2; }
[ $# -ge 2 ] || usage
SRC=$(cd "$1" && pwd); OUT=$(mkdir -p "$2" && cd "$2" && pwd); shift 2
JOBS=$(nproc 2>/dev/null || echo 2); FORCE_GCC=0
while [ $# -gt 0 ]; do
    case "$1" in
        -j) JOBS=$2; shift 2 ;;
        --gcc) FORCE_GCC=1; shift ;;
        *) usage ;;
    esac
done
HERE=$(cd "$(dirname "$0")" && pwd)
# GCC 12's _tile_loadconfig lets the compiler drop the tile configuration's stores (SIGILL in
# ggml's AMX kernels): every compile force-includes the fence that keeps them (tilecfg_fence.h)
FENCE="-include $HERE/tilecfg_fence.h"
[ -f "$SRC/include/ggml.h" ] && [ -d "$SRC/src/ggml-cpu" ] || { echo "$SRC is not a ggml source tree" >&2; exit 2; }

build_cmake() {  # config llamafile
    local cfg=$1 llamafile=$2 b="$OUT/$1/build"
    cmake -S "$HERE" -B "$b" -DGGML_SRC="$SRC" -DGGML_MM_CONFIG="$cfg" \
        -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
        -DGGML_NATIVE=ON -DGGML_OPENMP=ON -DGGML_CPU_REPACK=ON -DGGML_LLAMAFILE="$llamafile" \
        -DCMAKE_C_FLAGS="$FENCE" -DCMAKE_CXX_FLAGS="$FENCE" >"$OUT/$cfg/cmake.log" 2>&1 \
        || { tail -30 "$OUT/$cfg/cmake.log" >&2; return 1; }
    cmake --build "$b" -j "$JOBS" >"$OUT/$cfg/build.log" 2>&1 || { tail -30 "$OUT/$cfg/build.log" >&2; return 1; }
    cp "$b/ggml_mm" "$OUT/$cfg/ggml_mm"
}

# Without cmake: the same sources, definitions and flags as ggml's CMake build above produces
# (read from its compile_commands.json at the pinned commit), compiled N at a time.
build_gcc() {  # config llamafile
    local cfg=$1 llamafile=$2 o="$OUT/$1/obj"
    mkdir -p "$o"
    local arch
    case "$(uname -m)" in
        x86_64|amd64) arch=x86 ;;
        aarch64|arm64) arch=arm ;;
        *) echo "no gcc fallback for $(uname -m): install cmake" >&2; return 1 ;;
    esac
    local common="-O3 -DNDEBUG -fopenmp -DGGML_MAX_NAME=160 -DGGML_SCHED_MAX_COPIES=4 -D_GNU_SOURCE -D_XOPEN_SOURCE=600"
    local base="$common -DGGML_USE_OPENMP -DGGML_VERSION=\"0.0.0\" -DGGML_COMMIT=\"unknown\" -I$SRC/src -I$SRC/include"
    local reg="$common -DGGML_USE_CPU -I$SRC/include"
    local cpu="$common $FENCE -DGGML_USE_OPENMP -DGGML_USE_CPU_REPACK -march=native -I$SRC -I$SRC/src -I$SRC/src/ggml-cpu -I$SRC/include"
    local list=()
    for f in ggml.c ggml.cpp ggml-alloc.c ggml-backend.cpp ggml-backend-meta.cpp ggml-opt.cpp ggml-threading.cpp \
             ggml-quants.c gguf.cpp; do
        [ -f "$SRC/src/$f" ] && list+=("base|src/$f")
    done
    for f in ggml-backend-reg.cpp ggml-backend-dl.cpp; do
        [ -f "$SRC/src/$f" ] && list+=("reg|src/$f")
    done
    for f in ggml-cpu.c ggml-cpu.cpp repack.cpp hbm.cpp quants.c traits.cpp amx/amx.cpp amx/mmq.cpp binary-ops.cpp \
             unary-ops.cpp vec.cpp ops.cpp arch/$arch/quants.c arch/$arch/repack.cpp; do
        [ -f "$SRC/src/ggml-cpu/$f" ] && list+=("cpu|src/ggml-cpu/$f")
    done
    if [ "$llamafile" = ON ]; then
        cpu="$cpu -DGGML_USE_LLAMAFILE"
        list+=("cpu|src/ggml-cpu/llamafile/sgemm.cpp")
    fi
    export SRC o base reg cpu
    printf '%s\n' "${list[@]}" | xargs -P "$JOBS" -I{} bash -c '
        kind=${1%%|*}; f=${1#*|}; obj="$o/$(echo "$f" | tr / _).o"
        case "$f" in *.c) cc=gcc; std=-std=gnu11 ;; *) cc=g++; std=-std=gnu++17 ;; esac
        case "$kind" in base) fl=$base ;; reg) fl=$reg ;; cpu) fl=$cpu ;; esac
        $cc $std $fl -c "$SRC/$f" -o "$obj" 2>>"$o/../build.log" || { echo "failed: $f" >&2; exit 255; }
    ' _ {} || { tail -30 "$OUT/$cfg/build.log" >&2; return 1; }
    gcc -std=gnu11 -O3 -DNDEBUG -DGGML_MAX_NAME=160 -DGGML_USE_CPU -DGGML_MM_CONFIG="\"$cfg\"" -I"$SRC/include" \
        -c "$HERE/ggml_mm.c" -o "$o/ggml_mm.o"
    g++ -o "$OUT/$cfg/ggml_mm" "$o"/*.o -fopenmp -lm -lpthread -ldl
}

if [ "$FORCE_GCC" = 0 ] && command -v cmake >/dev/null 2>&1; then how=cmake; else how=gcc; fi
echo "building ggml_mm from $SRC with $how, -j $JOBS, into $OUT/{sdcpp,best}" >&2
for spec in "sdcpp OFF" "best ON"; do
    set -- $spec
    mkdir -p "$OUT/$1"
    : >"$OUT/$1/build.log"
    "build_$how" "$1" "$2"
    echo "$how: $SRC ($(cat "$SRC/SOURCE.txt" 2>/dev/null | head -c 120 || true)) llamafile=$2" >"$OUT/$1/BUILT_WITH"
    "$OUT/$1/ggml_mm" --info --threads 1
done
