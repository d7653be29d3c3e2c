#!/usr/bin/env bash
# Installs the console's browser tests' npm packages (tests/console/package-lock.json, from the npm
# registry) when they are missing or older than the lock file. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../tests/console"
installed=node_modules/.package-lock.json
if [ -f "$installed" ] && [ "$installed" -nt package-lock.json ]; then
  exit 0
fi
echo "console-deps: npm ci in tests/console"
npm ci --no-audit --no-fund --loglevel=error
