#!/usr/bin/env bash
# scripts/slurm/unet3d.sbatch as Slurm would run it, with a stand-in srun that starts one task the
# way srun does (SLURM_STEP_NUM_TASKS, SLURM_CPUS_PER_TASK set): it must train with the given
# flags, put its output and checkpoints under SHARED, and take its threads from the CPUs per task.
#   sbatch_runs.sh <repository root> <build dir>
set -euo pipefail
root="$1" build="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin" "$work/shared"
cat > "$work/bin/srun" <<'SRUN'
#!/usr/bin/env bash
# Drops srun's own options, then runs the task as an srun step of one task.
while [[ "$1" == --* ]]; do shift; done
SLURM_STEP_NUM_TASKS=1 SLURM_CPUS_PER_TASK=1 exec "$@"
SRUN
chmod +x "$work/bin/srun"
cd "$work"
out=$(PATH="$work/bin:$PATH" SLURM_JOB_ID=7 SLURM_NTASKS=8 SLURM_SUBMIT_DIR="$work" \
      SHARED="$work/shared" MESHTENSOR_BUILD="$build" \
      bash "$root/scripts/slurm/unet3d.sbatch" --size 16 --depth 2 --channels 4 --steps 2 \
      --validation-volumes 0 2>&1) || { echo "$out"; echo "FAIL: the script failed"; exit 1; }
echo "$out"
grep -q "1 processors (mpi) x 1 compute threads each" <<<"$out" ||
  { echo "FAIL: not one MPI rank with SLURM_CPUS_PER_TASK threads"; exit 1; }
[[ -s "$work/shared/unet3d-output/metrics.jsonl" ]] || { echo "FAIL: no output under SHARED"; exit 1; }
[[ -s "$work/shared/unet3d-checkpoints/latest" ]] || { echo "FAIL: no checkpoint under SHARED"; exit 1; }
# Missing program: a clear error that says how to build it.
if MESHTENSOR_BUILD="$work/nowhere" SLURM_SUBMIT_DIR="$work" bash "$root/scripts/slurm/unet3d.sbatch" \
     2> "$work/err"; then
  echo "FAIL: ran without a program"; exit 1
fi
grep -q "MESHTENSOR_NATIVE=OFF" "$work/err" || { cat "$work/err"; echo "FAIL: no build hint"; exit 1; }
echo "sbatch script: ok"
