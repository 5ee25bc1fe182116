#!/usr/bin/env bash
# The main job: set up, build and run the quick-start example on the threads transport.
# Arguments go to the example, e.g. --mesh "rows:2; cols:4" --layout "x:rows; z:cols".
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh quickstart
exec build/examples/quickstart/quickstart "$@"
