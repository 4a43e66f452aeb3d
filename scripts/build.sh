#!/usr/bin/env bash
# Configures and builds fmstack into ./build (Release with assertions kept).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="${FMSTACK_BUILD_DIR:-$root/build}"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" >/dev/null
cmake --build "$build" -j "$(nproc)"
