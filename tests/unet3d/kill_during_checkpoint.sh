#!/usr/bin/env bash
# Kills a training run that checkpoints every step (SIGKILL, at a random moment) TRIALS times.
# After each kill, `latest` must name a complete checkpoint: training resumes from it for one more
# step, which also checkpoints, and the next trial starts from there. Prints how many kills landed
# while a checkpoint was being written (a temporary file or directory left behind).
#   kill_during_checkpoint.sh UNET3D WORK_DIR [TRIALS]
set -uo pipefail
unet3d=$1
work=$2
trials=${3:-50}
rm -rf "$work"
mkdir -p "$work"
model=(--size 16 --depth 2 --channels 4 --validation-volumes 0 --threads 1 --out "$work/out"
  --checkpoint "$work/ckpt" --checkpoint-every 1)
step_of() { # the step of the checkpoint `latest` names (checkpoint-000012 or checkpoint-000012.1)
  local name
  name=$(cat "$work/ckpt/latest")
  name=${name#checkpoint-}
  echo $((10#${name%%.*}))
}

"$unet3d" train "${model[@]}" --steps 1 >"$work/first.log" 2>&1 || {
  cat "$work/first.log"
  exit 1
}
RANDOM=20261126
during=0
for trial in $(seq "$trials"); do
  "$unet3d" train "${model[@]}" --steps 1000000 --resume >"$work/killed.log" 2>&1 &
  pid=$!
  sleep "$((RANDOM % 2)).$((RANDOM % 10))$((RANDOM % 10))"
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  if compgen -G "$work/ckpt/.*.partial" >/dev/null || compgen -G "$work/ckpt/*.partial" >/dev/null ||
    compgen -G "$work/ckpt/.*.partial/*" >/dev/null; then
    during=$((during + 1))
  fi
  step=$(step_of)
  if ! "$unet3d" train "${model[@]}" --steps $((step + 1)) --resume >"$work/resumed.log" 2>&1; then
    echo "trial $trial: after the kill, latest ($(cat "$work/ckpt/latest")) did not resume:"
    cat "$work/resumed.log"
    exit 1
  fi
  if [ "$(step_of)" -ne $((step + 1)) ]; then
    echo "trial $trial: resumed from step $step but latest is now $(cat "$work/ckpt/latest")"
    exit 1
  fi
done
echo "kill_during_checkpoint: $trials kills, $during of them while a checkpoint was being" \
  "written; latest resumed after every one (last step $(step_of))"
