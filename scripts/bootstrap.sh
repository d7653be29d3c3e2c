#!/usr/bin/env bash
# Installs the Debian packages that building, testing and running Tessera need, and only those that
# are missing, and gives podman's user namespaces their /etc/subuid and /etc/subgid ranges.
# Idempotent: a second run changes nothing. Works where `apt-get update` never ran.
set -euo pipefail

packages=(
  build-essential g++ cmake ninja-build make pkg-config git
  clang-format clang-tidy clang libclang-rt-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev libyaml-cpp-dev
  libcpp-httplib-dev libsqlite3-dev libssl-dev libpq-dev libboost1.81-dev openssl
  # PostgreSQL 15: the tests run a real server (src/testing/postgres.h) for the store on it.
  postgresql
  libgtest-dev libgmock-dev libbenchmark-dev
  python3
  prometheus prometheus-alertmanager
  libjs-chart.js chromium
  # tmux: a shell into an instance is tested under a real terminal (tests/exec_e2e_test.cc).
  tmux
  # Workloads as OCI containers (src/agent/container*): podman with runc (crun refuses hybrid
  # cgroups), conmon, catatonit for --init, uidmap and slirp4netns for user namespaces,
  # containernetworking-plugins and iptables for the private network; docker-registry,
  # busybox-static and apache2-utils (htpasswd) for the tests' local registry and images.
  podman runc conmon catatonit uidmap slirp4netns containernetworking-plugins iptables
  docker-registry busybox-static apache2-utils
)
# The console's browser tests run on Node.js with npm (tests/console); a machine that has them
# from elsewhere keeps them.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi

# `podman run --userns=auto` takes each container's uids and gids from the "containers" ranges of
# /etc/subuid and /etc/subgid: 2^31 ids from 2^31-1 up, above every account, above the subordinate
# ranges useradd hands out (100000 up) and above the agent's workload uids (1999000000 up). Added
# only when the file has no "containers" line, so a second run, or an operator's own range, is left
# as it is.
for f in /etc/subuid /etc/subgid; do
  if ! grep -q '^containers:' "$f" 2>/dev/null; then
    echo "bootstrap: adding a containers range to $f"
    echo 'containers:2147483647:2147483648' | $sudo tee -a "$f" >/dev/null
  fi
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "bootstrap: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# A fresh machine may never have fetched the package lists; fetch them when an install fails.
if ! $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"; then
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
