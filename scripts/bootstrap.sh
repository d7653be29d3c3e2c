#!/usr/bin/env bash
# Installs the Debian packages that building, testing and running Tessera need, and only those that
# are missing. Idempotent: a second run changes nothing. Works where `apt-get update` never ran.
set -euo pipefail

packages=(
  build-essential g++ cmake ninja-build make pkg-config git
  clang-format clang-tidy clang libclang-rt-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev
  libcpp-httplib-dev libsqlite3-dev libssl-dev libpq-dev libboost1.81-dev openssl
  libgtest-dev libgmock-dev libbenchmark-dev
  python3
  prometheus prometheus-alertmanager
  libjs-chart.js chromium
)
# The console's browser tests run on Node.js with npm (tests/console); a machine that has them
# from elsewhere keeps them.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi

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
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
# A fresh machine may never have fetched the package lists; fetch them when an install fails.
if ! $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"; then
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
