#!/usr/bin/env bash
#===- scripts/fuzz.sh - Build and run the libFuzzer targets ---------------===#
#
#   scripts/fuzz.sh [build|run|all]      (default: all)
#
# build: configures fuzz/ (a runtime-only project: no MLIR, no CUDA) with
#        clang in $FUZZ_BUILD_DIR (default build-fuzz), instrumented for
#        libFuzzer, ASan and UBSan, and builds the fuzzers. Installs clang
#        and libclang-rt-14-dev with apt when -fsanitize=fuzzer does not link.
# run:   runs each fuzzer for $FUZZ_SECONDS seconds (default 20) from the
#        committed seeds (fuzz/corpus/<name>) and freshly made ones, into a
#        working corpus under the build directory; prints each fuzzer's
#        executions and exits non-zero when any fuzzer found a crash, a leak,
#        a timeout or an out-of-memory (the input is kept under
#        $FUZZ_BUILD_DIR/artifacts/).
#
#===----------------------------------------------------------------------===#
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
SECONDS_EACH=${FUZZ_SECONDS:-20}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
FUZZERS=(config safetensors plan)
what=${1:-all}

CXX=${FUZZ_CXX:-clang++}
CC=${FUZZ_CC:-clang}

have_libfuzzer() {
  local tmp
  tmp=$(mktemp -d)
  printf 'extern "C" int LLVMFuzzerTestOneInput(const char *, unsigned long) { return 0; }\n' \
    >"$tmp/f.cpp"
  if "$CXX" -fsanitize=fuzzer,address,undefined "$tmp/f.cpp" -o "$tmp/f" \
    >/dev/null 2>&1; then
    rm -rf "$tmp"
    return 0
  fi
  rm -rf "$tmp"
  return 1
}

build() {
  if ! command -v "$CXX" >/dev/null 2>&1 || ! have_libfuzzer; then
    echo "fuzz: installing clang and libclang-rt-14-dev (libFuzzer)"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq clang \
      libclang-rt-14-dev >/dev/null
    have_libfuzzer || { echo "fuzz: $CXX cannot link -fsanitize=fuzzer" >&2; exit 1; }
  fi
  if [ ! -f "$BUILD_DIR/build.ninja" ]; then
    cmake -S fuzz -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" >/dev/null
  fi
  cmake --build "$BUILD_DIR" -j "$JOBS" \
    --target make_seeds "${FUZZERS[@]/%/_fuzz}"
}

run() {
  local failed=() seeds="$BUILD_DIR/seeds"
  rm -rf "$seeds"
  "$BUILD_DIR/bin/make_seeds" "$seeds"
  mkdir -p "$BUILD_DIR/artifacts"
  for name in "${FUZZERS[@]}"; do
    local work="$BUILD_DIR/corpus/$name" log="$BUILD_DIR/$name.log"
    mkdir -p "$work"
    local rc=0
    # New inputs go to the first directory (the working corpus); the
    # committed and the fresh seeds are only read.
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
      "$BUILD_DIR/bin/${name}_fuzz" -max_total_time="$SECONDS_EACH" \
      -timeout=25 -rss_limit_mb=2560 -max_len=65536 -print_final_stats=1 \
      -artifact_prefix="$BUILD_DIR/artifacts/$name-" \
      "$work" "fuzz/corpus/$name" "$seeds/$name" >"$log" 2>&1 || rc=$?
    local execs
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    echo "fuzz: $name: ${execs:-?} executions in ${SECONDS_EACH}s, exit $rc," \
      "corpus $(ls "$work" | wc -l) inputs"
    if [ "$rc" -ne 0 ]; then
      failed+=("$name")
      grep -E "ERROR|SUMMARY|invariant|runtime error|Test unit written" "$log" \
        | head -20 >&2 || true
    fi
  done
  if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: FAILED: ${failed[*]} (logs: $BUILD_DIR/<name>.log, inputs:" \
      "$BUILD_DIR/artifacts/)" >&2
    exit 1
  fi
  echo "fuzz: all ${#FUZZERS[@]} fuzzers ran clean"
}

case "$what" in
build) build ;;
run) run ;;
all) build && run ;;
*) echo "usage: scripts/fuzz.sh [build|run|all]" >&2; exit 2 ;;
esac
