#!/usr/bin/env bash
# Installs every Debian package fmstack needs to build and test. Idempotent:
# it runs `apt-get update` and `apt-get install` only when a package is missing.
# PyTorch (~1 GB) is for the tests of PyTorch programs under `fmstack run`
# and the golden tests; --bench adds the other peers (OpenMPI, fio) and
# TCMalloc, which PyTorch's tuning guide recommends for its CPU peer.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libtomlplusplus-dev libcli11-dev libfmt-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-jsonschema python3-numpy python3-torch
  libopenblas-openmp-dev bible-kjv libxxhash-dev libgloo-dev iproute2 gdb
  libcurl4-openssl-dev libssl-dev prometheus
  slurm-wlm slurmctld slurmd slurmdbd slurm-client munge mariadb-server chromium
  clang libclang-rt-14-dev libomp-dev librsvg2-bin
  libboost-dev python3-websockets
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc python3-grpcio python3-protobuf
  # The corpus pipeline (HTML5 parser, language fingerprints, NFKC) and its
  # test corpus: the Debian Reference in six languages.
  libgumbo-dev libexttextcat-dev libicu-dev zlib1g-dev
  debian-reference-en debian-reference-ja debian-reference-de debian-reference-fr
  debian-reference-es debian-reference-it
)

if [ "${1:-}" = "--bench" ]; then
  packages+=(openmpi-bin libopenmpi-dev fio libtcmalloc-minimal4)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "bootstrap: all ${#packages[@]} packages present"
else
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  echo "bootstrap: installing ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The serving tests' real clients from npm (the official OpenAI client, ws),
# into tests/clients/node_modules; Node.js from Debian when it is missing.
root=$(cd "$(dirname "$0")/.." && pwd)
if ! command -v npm >/dev/null; then
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends nodejs npm
fi
if [ ! -d "$root/tests/clients/node_modules/openai" ] || [ ! -d "$root/tests/clients/node_modules/ws" ]; then
  echo "bootstrap: npm install (tests/clients: openai, ws)"
  (cd "$root/tests/clients" && npm install --no-audit --no-fund --loglevel=error)
fi

# The Python module (python/fmstack, docs/pytorch.md): a .pth file in the
# system python3's site-packages names this checkout's python/, so that
# `import fmstack` works without PYTHONPATH; the module finds libfmstack in
# build/ beside it (or FMSTACK_BUILD_DIR, FMSTACK_LIB).
site=$(/usr/bin/python3 -c 'import site; print(site.getsitepackages()[0])')
pth="$site/fmstack.pth"
if [ "$(cat "$pth" 2>/dev/null)" != "$root/python" ]; then
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" mkdir -p "$site"
  echo "$root/python" | "${sudo_cmd[@]}" tee "$pth" > /dev/null
  echo "bootstrap: python3 imports fmstack from $root/python ($pth)"
fi
