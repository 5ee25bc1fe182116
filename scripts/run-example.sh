#!/usr/bin/env bash
# The main job: set up, build and train the 3D U-Net on synthetic CT volumes split over this
# machine's cores (threads transport), about 3 minutes on 2 cores. Arguments go to `unet3d train`,
# e.g. --size 96 --mesh "rows:2; cols:2" --layout "x:rows; y:cols" --steps 100.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh unet3d
exec build/examples/unet3d/unet3d train "$@"
