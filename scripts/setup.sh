#!/usr/bin/env bash
# Installs the Debian packages the build, the tests and the demo need.
# Idempotent: does nothing when every package is already installed.
# Run as root (or with sudo available). Nothing is downloaded at build time.
set -euo pipefail

PACKAGES=(
  build-essential cmake git pkg-config ca-certificates
  libzmq3-dev cppzmq-dev
  libprotobuf-dev protobuf-compiler
  librocksdb-dev
  libyaml-cpp-dev
  libopenblas-dev
  zlib1g-dev libssl-dev
  dataset-fashion-mnist
  libspdlog-dev libfmt-dev
  libcli11-dev
  googletest libgtest-dev libgmock-dev
  libbenchmark-dev
  python3
  python3-matplotlib python3-yaml
  openmpi-bin
  slurmctld slurmd slurm-client munge
  iproute2 iptables          # the multi-host tests' network namespaces
  libcpp-httplib-dev nlohmann-json3-dev  # the etcd client (server/etcd_client.cc)
  libxxhash-dev              # the slot hash of hash-keyed tables (common/hash_slots.cc)
  libabsl-dev                # hashed_rows_bench's yardstick (absl::flat_hash_map)
  etcd-server                # a real etcd for the etcd client's tests
  prometheus                 # a real Prometheus for the metrics endpoint's test
  # The Python module (python/): pybind11 and the headers to build it,
  # numpy for its arrays, pytest for its tests (tests/python/), and
  # PyTorch for ps.torch (python/ps/torch.py) and its tests.
  pybind11-dev python3-pybind11 python3-dev python3-numpy python3-pytest
  python3-torch
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
  else
    echo "setup: missing packages: ${missing[*]}" >&2
    echo "setup: run as root, or install them with apt-get" >&2
    exit 1
  fi
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
