#!/usr/bin/env bash
# Builds coretry's libFuzzer targets with clang and runs each for a bounded
# time over its seed corpus (the fuzz.* CTest tests). Exits non-zero if
# configuring or building fails or any fuzzer reports a crash, a sanitizer
# error, a leak, a timeout or a broken invariant.
#
#   tests/fuzz/run.sh                       # from anywhere in a clone
#   CORETRY_FUZZ_SECONDS=120 tests/fuzz/run.sh   # longer runs
#
# Each fuzzer runs CORETRY_FUZZ_SECONDS (default 20) seconds, one after the
# other. Set BUILD_DIR to build elsewhere than build/fuzz.
set -euo pipefail

source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build_dir=${BUILD_DIR:-$source_dir/build/fuzz}
seconds=${CORETRY_FUZZ_SECONDS:-20}
targets=(fuzz_retry_after fuzz_response_classifier fuzz_fault_script fuzz_response_reading)

CC=clang CXX=clang++ cmake -S "$source_dir" -B "$build_dir" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCORETRY_BUILD_FUZZERS=ON -DCORETRY_BUILD_BENCH=OFF \
  -DCORETRY_FUZZ_SECONDS="$seconds"
cmake --build "$build_dir" -j 2 --target "${targets[@]}"
# CORETRY_FUZZ_BUILD_ONLY=1: configure and build, run nothing (CI builds
# beside other tests, then runs).
[ -z "${CORETRY_FUZZ_BUILD_ONLY:-}" ] || exit 0
ctest --test-dir "$build_dir" -L '^fuzz$' --output-on-failure --no-tests=error -j 2
