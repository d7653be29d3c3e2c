#!/usr/bin/env bash
# The main job until the control-plane server lands: a short tour of the catalog and the MIG
# planner, run from the binary given as $1.
set -euo pipefail
bin=${1:-build/release/tessera}
run() { echo "\$ tessera $*"; "$bin" "$@"; echo; }
run catalog list --kind gpus
run catalog list --kind instance-types
run mig plan --gpu H100-80GB --existing 3g.40gb@4 1g.10gb 2g.20gb
run mig check --gpu A100-40GB 4g.20gb@0 3g.20gb@4
