# The unet3d tests, one scenario per ctest test:  cmake -DSCENARIO=<name> -DUNET3D=... -DCHECK=...
#   -DWORK=<scratch dir> [-DMPIEXEC=... -DNP_FLAG=...] [-DEMULATED_GPU=<dir>] -P scenario.cmake
# EMULATED_GPU: the emulated GPU's libraries (tests/gpu/emulated), for the nccl_emulated scenarios.
# Small volumes (16^3, depth 2) keep each run to a second or two.

set(small --size 16 --depth 2 --channels 4 --validate-every 100 --validation-volumes 1)

# Runs a command; fails the test unless it succeeds. Leaves what it printed in `printed`.
function(ok)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("$ ${ARGN}\n${out}${err}")
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "expected success, got status ${status}")
  endif()
  set(printed "${out}${err}" PARENT_SCOPE)
endfunction()

# Runs a command; fails the test unless it succeeds and prints something matching REGEX. Leaves
# what it printed in `printed`.
function(ok_matching regex)
  ok(${ARGN})
  if(NOT "${printed}" MATCHES "${regex}")
    message(FATAL_ERROR "the output does not match: ${regex}")
  endif()
  set(printed "${printed}" PARENT_SCOPE)
endfunction()

# Sets `ranks`, `precision` and `model` (a small U-Net on the nccl transport, one GPU or the
# 2x2 grid) for a run given as "RANKS;PRECISION".
macro(small_gpu_model ranks_and_precision)
  set(run_parts ${ranks_and_precision})
  list(GET run_parts 0 ranks)
  list(GET run_parts 1 precision)
  set(layout --mesh p:1)
  if(ranks EQUAL 4)
    set(layout --mesh "rows:2, cols:2" --layout "x:rows, y:cols")
  endif()
  set(model --size 16 --depth 2 --channels 4 --backend nccl ${layout} --precision ${precision})
endmacro()

# Fails the test if the last command's emulated GPU (MESHTENSOR_EMULATED_GPU_PAGES) saw the host
# touch the GPU's memory while GPU work was still queued: a missing wait, a race on a GPU.
function(no_race)
  if("${printed}" MATCHES "touched [1-9][0-9]* pages while GPU work was still queued")
    message(FATAL_ERROR "the host touched the GPU's memory without waiting for the GPU")
  endif()
endfunction()

# Fails the test unless the last command's emulated GPU (MESHTENSOR_EMULATED_GPU_PAGES) saw the
# host take back none of the GPU's pages on every rank: every op ran on the GPU's kernels, none
# fell back to a CPU loop on the GPU's memory.
function(all_on_gpu)
  if(NOT "${printed}" MATCHES "the host took back 0 pages" OR "${printed}" MATCHES "took back [1-9]")
    message(FATAL_ERROR "the host touched pages in the GPU's memory: an op ran a CPU loop there")
  endif()
endfunction()

# Fails the test unless `unet3d plan` with the arguments given predicts within 5% the most any
# GPU's pool held in the run whose output is in `printed` (its peak_processor_memory_mib).
function(plan_predicts_held)
  if(NOT "${printed}" MATCHES "\"peak_processor_memory_mib\":([0-9]+)\\.?([0-9]*)")
    message(FATAL_ERROR "the run printed no peak_processor_memory_mib")
  endif()
  set(mib ${CMAKE_MATCH_1})
  string(SUBSTRING "${CMAKE_MATCH_2}000" 0 3 thousandths)
  string(REGEX REPLACE "^0+([0-9])" "\\1" thousandths "${thousandths}")
  math(EXPR run "${mib} * 1000 + ${thousandths}")
  ok(${UNET3D} plan ${ARGN})
  if(NOT "${printed}" MATCHES "\"peak_held_bytes\":{[^}]*\"max\":([0-9]+)}")
    message(FATAL_ERROR "the plan printed no peak_held_bytes")
  endif()
  math(EXPR planned "${CMAKE_MATCH_1} * 1000 / 1048576")
  math(EXPR off "(${planned} - ${run}) * 100")
  if(off LESS 0)
    math(EXPR off "-${off}")
  endif()
  math(EXPR allowed "5 * ${run}")
  if(off GREATER allowed)
    message(FATAL_ERROR "the plan's peak held, ${planned} thousandths of a MiB, is not within 5% "
                        "of the run's, ${run}")
  endif()
endfunction()

# Runs a command; fails the test unless it fails with a message matching REGEX.
function(fails regex)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("$ ${ARGN}\n${out}${err}")
  if(status EQUAL 0)
    message(FATAL_ERROR "expected a failure, but the command succeeded")
  endif()
  if(NOT "${out}${err}" MATCHES "${regex}")
    message(FATAL_ERROR "the error message does not match: ${regex}")
  endif()
endfunction()

file(REMOVE_RECURSE ${WORK}/${SCENARIO})
file(MAKE_DIRECTORY ${WORK}/${SCENARIO})
set(here ${WORK}/${SCENARIO})
# Settings and calibrations of this scenario's own, not the user's.
set(ENV{MESHTENSOR_CONFIG_DIR} ${here}/config)
set(ENV{MESHTENSOR_CACHE_DIR} ${here}/cache)

# A kernel throughput cached for this CPU at every thread count a run may ask for, so that
# --layout auto prices plans without calibrating (which takes a minute).
function(cache_throughput)
  # cache_throughput(WITHOUT_RESAMPLE): as a calibration cached before calibrations ran them.
  set(resample "family resample 1e9\n")
  if("${ARGV0}" STREQUAL "WITHOUT_RESAMPLE")
    set(resample "")
  endif()
  file(STRINGS /proc/cpuinfo model REGEX "^model name" LIMIT_COUNT 1)
  string(REGEX REPLACE "^model name[ \t]*:[ ]*" "" model "${model}")
  if(model STREQUAL "")
    set(model "unknown CPU")
  endif()
  cmake_host_system_information(RESULT cores QUERY NUMBER_OF_LOGICAL_CORES)
  foreach(threads RANGE 1 ${cores})
    file(WRITE ${here}/cache/throughput-${threads}-threads.txt
         "machine ${model}\nthreads ${threads}\nseconds_per_call 1e-05\nfamily copy 1e9\n"
         "family elementwise 1e9\nfamily sum 1e9\nfamily norm 3e9\nfamily optimizer 2e9\n"
         "family conv 5e10\nfamily pool 1e9\n${resample}")
  endforeach()
endfunction()

# A trained checkpoint and a held-out volume that several scenarios start from.
function(make_model)
  ok(${UNET3D} train ${small} --steps 3 --threads 1 --out ${here}/train --checkpoint ${here}/ckpt)
  ok(${UNET3D} generate --size 16 --index 0 --output ${here}/volume.npy --labels ${here}/labels.npy --threads 1)
endfunction()

if(SCENARIO STREQUAL "losses_equal")
  # The same seed and flags give the same losses on 1 processor, 2x2, 2x2x2 and (if MPI) mpirun -np 4.
  ok(${UNET3D} train ${small} --steps 5 --threads 1 --out ${here}/one)
  ok(${UNET3D} train ${small} --steps 5 --mesh "rows:2, cols:2" --layout "x:rows, y:cols" --out ${here}/four)
  ok(${UNET3D} train ${small} --steps 5 --mesh "a:2, b:2, c:2" --layout "x:a, y:b, z:c" --out ${here}/eight)
  set(logs ${here}/one/metrics.jsonl ${here}/four/metrics.jsonl ${here}/eight/metrics.jsonl)
  if(MPIEXEC)
    ok(${MPIEXEC} ${NP_FLAG} 4 ${UNET3D} train ${small} --steps 5 --mesh "rows:2, cols:2" --layout "x:rows, y:cols"
       --out ${here}/mpi)
    list(APPEND logs ${here}/mpi/metrics.jsonl)
  endif()
  ok(${CHECK} losses 1e-3 ${logs})
  # Per-level layouts: space at the top, channels below (the deep levels' input channels split, so
  # their convolutions add partial sums across processors); the same losses.
  ok(${UNET3D} train ${small} --steps 5 --threads 4 --layouts "x:p | channels:p" --out ${here}/levels)
  ok(${UNET3D} train ${small} --steps 5 --mesh "a:2, b:2" --layouts "x:a, y:b | x:a, channels:b | channels:a"
     --out ${here}/levels2d)
  set(level_logs ${here}/one/metrics.jsonl ${here}/levels/metrics.jsonl ${here}/levels2d/metrics.jsonl)
  if(MPIEXEC)
    ok(${MPIEXEC} ${NP_FLAG} 4 ${UNET3D} train ${small} --steps 5 --layouts "x:p | x:p | channels:p"
       --out ${here}/mpi_levels)
    list(APPEND level_logs ${here}/mpi_levels/metrics.jsonl)
  endif()
  ok(${CHECK} losses 1e-3 ${level_logs})
  # Deep halos at every level (each level's two convolutions on one exchange, the rows the
  # second's halo needs computed twice): the same losses.
  ok(${UNET3D} train ${small} --steps 5 --mesh "a:2, b:2, c:2" --layout "x:a, y:b, z:c"
     --deep-halos on --out ${here}/deep_eight)
  ok(${UNET3D} train ${small} --steps 5 --threads 4 --layout x:p --deep-halos 0,2
     --out ${here}/deep_levels)
  set(deep_logs ${here}/one/metrics.jsonl ${here}/deep_eight/metrics.jsonl
      ${here}/deep_levels/metrics.jsonl)
  if(MPIEXEC)
    ok(${MPIEXEC} ${NP_FLAG} 4 ${UNET3D} train ${small} --steps 5 --mesh "rows:2, cols:2"
       --layout "x:rows, y:cols" --deep-halos on --out ${here}/deep_mpi)
    list(APPEND deep_logs ${here}/deep_mpi/metrics.jsonl)
  endif()
  ok(${CHECK} losses 1e-3 ${deep_logs})
  # In bfloat16 the same losses on every mesh within bfloat16's rounding (partial sums rounded
  # before they meet: 2x2x2's halo gradients, channel splits' partial outputs); 1.4e-3 measured.
  set(bf16 ${UNET3D} train ${small} --steps 5 --precision bf16)
  ok(${bf16} --threads 1 --out ${here}/bf16_one)
  ok(${bf16} --mesh "a:2, b:2, c:2" --layout "x:a, y:b, z:c" --out ${here}/bf16_eight)
  ok(${bf16} --threads 4 --layouts "x:p | channels:p" --out ${here}/bf16_levels)
  ok(${bf16} --mesh "a:2, b:2, c:2" --layout "x:a, y:b, z:c" --deep-halos on
     --out ${here}/bf16_deep)
  set(bf16_logs ${here}/bf16_one/metrics.jsonl ${here}/bf16_eight/metrics.jsonl
      ${here}/bf16_levels/metrics.jsonl ${here}/bf16_deep/metrics.jsonl)
  if(MPIEXEC)
    ok(${MPIEXEC} ${NP_FLAG} 4 ${bf16} --mesh "rows:2, cols:2" --layout "x:rows, y:cols"
       --out ${here}/bf16_mpi)
    list(APPEND bf16_logs ${here}/bf16_mpi/metrics.jsonl)
  endif()
  ok(${CHECK} losses 5e-3 ${bf16_logs})
  # Augmented (flips, 90-degree turns, intensities): the same volumes on every mesh, flipped and
  # turned across split dims, so the same losses; and not those of the unaugmented run.
  set(augmented ${UNET3D} train ${small} --steps 5 --augment all)
  ok(${augmented} --threads 1 --out ${here}/aug_one)
  ok(${augmented} --mesh "a:2, b:2, c:2" --layout "x:a, y:b, z:c" --out ${here}/aug_eight)
  ok(${augmented} --threads 3 --layout "x:p" --out ${here}/aug_uneven)
  set(aug_logs ${here}/aug_one/metrics.jsonl ${here}/aug_eight/metrics.jsonl
      ${here}/aug_uneven/metrics.jsonl)
  if(MPIEXEC)
    ok(${MPIEXEC} ${NP_FLAG} 4 ${augmented} --mesh "rows:2, cols:2" --layout "x:rows, z:cols"
       --out ${here}/aug_mpi)
    list(APPEND aug_logs ${here}/aug_mpi/metrics.jsonl)
  endif()
  ok(${CHECK} losses 1e-3 ${aug_logs})
  fails("largest relative loss difference" ${CHECK} losses 1e-3 ${here}/one/metrics.jsonl
        ${here}/aug_one/metrics.jsonl)
  fails("--augment flips: \"flips\" is no augmentation"
        ${UNET3D} train ${small} --steps 1 --augment flips --out ${here}/o)
  # Pinned to one core (as a batch system or launcher binding would), a processor runs one thread.
  find_program(TASKSET taskset)
  if(TASKSET)
    ok_matching("x 1 compute threads each" ${TASKSET} -c 0 ${UNET3D} train ${small} --steps 1
                --threads 1 --out ${here}/pinned)
  endif()
elseif(SCENARIO STREQUAL "command_line")
  # --version, --help with defaults and examples, --print-config read back by --config (before or
  # after the command), --quiet.
  ok_matching("unet3d [0-9]+\\.[0-9]+\\.[0-9]+ \\(meshtensor" ${UNET3D} --version)
  ok_matching("--steps[^\n]*600.*--lr[^\n]*0\\.003.*Examples:" ${UNET3D} train --help)
  ok_matching("Examples:.*unet3d train --data" ${UNET3D} --help)
  execute_process(COMMAND ${UNET3D} train --print-config ${small} --steps 2 --seed 5
                  OUTPUT_FILE ${here}/run.toml RESULT_VARIABLE status)
  file(READ ${here}/run.toml config)
  message("${config}")
  if(NOT status EQUAL 0 OR NOT config MATCHES "\\[train\\].*steps = 2.*seed = 5")
    message(FATAL_ERROR "--print-config did not print the run's flags")
  endif()
  if(EXISTS ${here}/unet3d-output)
    message(FATAL_ERROR "--print-config ran the command")
  endif()
  ok(${UNET3D} --config ${here}/run.toml train --threads 2 --out ${here}/from_config)
  ok(${UNET3D} train --config ${here}/run.toml --threads 2 --steps 1 --out ${here}/overridden)
  file(STRINGS ${here}/from_config/metrics.jsonl steps REGEX "\"loss\"")
  file(STRINGS ${here}/overridden/metrics.jsonl overridden REGEX "\"loss\"")
  list(LENGTH steps from_config_steps)
  list(LENGTH overridden overridden_steps)
  if(NOT from_config_steps EQUAL 2 OR NOT overridden_steps EQUAL 1)
    message(FATAL_ERROR "--config ran ${from_config_steps} steps (2 expected); the command line's "
                        "--steps 1 ran ${overridden_steps}")
  endif()
  file(WRITE ${here}/bad.toml "[train]\nstepz = 3\n")
  fails("--config: .*stepz" ${UNET3D} train --config ${here}/bad.toml)
  fails("--config: .*missing.toml" ${UNET3D} train --config ${here}/missing.toml)
  ok(${UNET3D} train ${small} --steps 2 --quiet --threads 2 --out ${here}/quiet)
  if(printed MATCHES "step 1/2" OR NOT printed MATCHES "\"final_loss\"")
    message(FATAL_ERROR "--quiet printed progress, or no summary")
  endif()
elseif(SCENARIO STREQUAL "pytorch_export")
  # scripts/to_pytorch.py's model gives the probabilities `unet3d predict` gives on a split
  # layout, within 1e-5, for batch and group norm.
  execute_process(COMMAND ${PYTHON} -c "import torch, numpy" RESULT_VARIABLE status OUTPUT_QUIET
                  ERROR_QUIET)
  if(NOT status EQUAL 0)
    message("skipped: torch and numpy are not available to ${PYTHON} (Debian: python3-torch)")
    message("MESHTENSOR_SKIP")
    return()
  endif()
  ok(${UNET3D} generate --size 16 --output ${here}/volume.npy --threads 1)
  foreach(norm batch group)
    ok(${UNET3D} train ${small} --steps 10 --norm ${norm} --threads 2 --checkpoint ${here}/${norm}
       --out ${here}/train_${norm})
    ok(${UNET3D} predict --checkpoint ${here}/${norm} --input ${here}/volume.npy
       --output ${here}/${norm}.npy --probabilities ${here}/p_${norm}.npy --mesh "a:2, b:2"
       --layout "x:a, z:b")
    ok(${PYTHON} ${CMAKE_CURRENT_LIST_DIR}/../../scripts/to_pytorch.py ${here}/${norm}
       ${here}/${norm}.pt)
    ok(${PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_pytorch.py ${here}/${norm}.pt ${here}/volume.npy
       ${here}/p_${norm}.npy 1e-5)
  endforeach()
  if(EXISTS ${here}/batch.pt.partial)
    message(FATAL_ERROR "to_pytorch.py left a .partial file")
  endif()
elseif(SCENARIO STREQUAL "schedule_16_ranks")
  # 16 MPI ranks (oversubscribed), depth 3 at 32^3: level 2 has 8 voxels along x, too few for 16
  # processors, so the schedule switches to channels there. One processor's losses within 1e-4.
  set(deep --size 32 --depth 3 --channels 4 --steps 3 --validation-volumes 0)
  ok(${UNET3D} train ${deep} --threads 1 --out ${here}/one)
  ok(${MPIEXEC} ${NP_FLAG} 16 ${UNET3D} train ${deep} --layouts "x:p | x:p | channels:p"
     --out ${here}/sixteen)
  ok(${CHECK} losses 1e-4 ${here}/one/metrics.jsonl ${here}/sixteen/metrics.jsonl)
elseif(SCENARIO STREQUAL "predict_equal")
  # Labels predicted on 1 processor and on 8 (2x2x2) are identical, the probabilities equal
  # within float rounding: blocks of other shapes may run their convolutions on other kernels
  # (the row kernels some, oneDNN the rest: on AVX2 alone, 1 and 8 processors differ so), which
  # sum in other orders.
  make_model()
  ok(${UNET3D} predict --checkpoint ${here}/ckpt --input ${here}/volume.npy --output ${here}/one.npy
     --probabilities ${here}/p1.npy --threads 1)
  ok(${UNET3D} predict --checkpoint ${here}/ckpt --input ${here}/volume.npy --output ${here}/eight.npy
     --probabilities ${here}/p8.npy --mesh "a:2, b:2, c:2" --layout "x:a, y:b, z:c")
  ok(${CHECK} same-npy ${here}/one.npy ${here}/eight.npy)
  ok(${CHECK} close-npy 1e-5 ${here}/p1.npy ${here}/p8.npy)
  # Channels split below the top level: partial sums in another order, the same probabilities
  # within float rounding.
  ok(${UNET3D} predict --checkpoint ${here}/ckpt --input ${here}/volume.npy --output ${here}/levels.npy
     --probabilities ${here}/plevels.npy --threads 4 --layouts "x:p | channels:p")
  ok(${CHECK} close-npy 1e-5 ${here}/p1.npy ${here}/plevels.npy)
elseif(SCENARIO STREQUAL "resume")
  # A run stopped after 3 steps and resumed ends exactly where an uninterrupted one does; resumed
  # on another layout, it follows the same losses within float rounding. Exactly: so the convolution
  # formats follow a fixed rule, not timings that a loaded machine can make differ between runs.
  set(ENV{MESHTENSOR_ONEDNN_FORMATS} by_channels)
  ok(${UNET3D} train ${small} --steps 6 --threads 1 --out ${here}/whole --checkpoint ${here}/whole_ckpt)
  ok(${UNET3D} train ${small} --steps 6 --stop-after 3 --threads 1 --out ${here}/parts --checkpoint ${here}/parts_ckpt)
  file(COPY ${here}/parts_ckpt ${here}/parts DESTINATION ${here}/moved)
  ok(${UNET3D} train ${small} --steps 6 --resume --threads 1 --out ${here}/parts --checkpoint ${here}/parts_ckpt)
  ok(${CHECK} losses 0 ${here}/whole/metrics.jsonl ${here}/parts/metrics.jsonl)
  ok(${UNET3D} train ${small} --steps 6 --resume --mesh "rows:2, cols:2" --layout "x:rows, y:cols"
     --out ${here}/moved/parts --checkpoint ${here}/moved/parts_ckpt)
  ok(${CHECK} losses 1e-5 ${here}/whole/metrics.jsonl ${here}/moved/parts/metrics.jsonl)
  file(READ ${here}/whole_ckpt/latest whole_name)
  file(READ ${here}/parts_ckpt/latest parts_name)
  string(STRIP "${whole_name}" whole_name)
  string(STRIP "${parts_name}" parts_name)
  ok(${CHECK} same-dir ${here}/whole_ckpt/${whole_name} ${here}/parts_ckpt/${parts_name})
elseif(SCENARIO STREQUAL "plan")
  # 4096 processors from the command line: the table and one JSON line, run in this one process.
  ok(${UNET3D} plan --size 64 --depth 2 --channels 4 --mesh "a:16, b:16, c:16"
     --layout "x:a, y:b, z:c")
  foreach(expected "\"processors\":4096,\"planned\":343" "halo messages +[0-9.]+ k")
    if(NOT "${printed}" MATCHES "${expected}")
      message(FATAL_ERROR "the plan printed nothing matching ${expected}")
    endif()
  endforeach()
  fails("--data: a plan runs on phantom volumes" ${UNET3D} plan --data ${WORK} --mesh "p:2")
elseif(SCENARIO STREQUAL "auto_layout")
  # --layout auto on 8 processors of a volume whose level 3 (4^3) cannot split x 8 ways: the
  # choice switches the deep levels, prints itself beside the runner-up, and trains to the losses
  # of one processor; a budget nothing fits names what would.
  cache_throughput()
  set(model --size 32 --depth 3 --channels 4 --validation-volumes 0 --steps 2)
  ok_matching("chosen +\"x:p \\| .*runner-up" ${UNET3D} plan ${model} --mesh p:8 --layout auto
              --memory-per-processor 64MiB)
  ok_matching("\"predicted_step_s\":[0-9.]+" ${UNET3D} plan ${model} --mesh p:2 --predict)
  # --deep-halos auto weighs each level's deep halo with plans and says what it chose.
  ok_matching("--deep-halos auto: (none|levels [0-9,]+) \\(predicted step [0-9.]+ s; [0-9.]+ s without"
              ${UNET3D} plan ${model} --mesh p:8 --layouts "x:p | x:p | channels:p"
              --deep-halos auto --network ib-hdr)
  # Where a level's layout splits the channels, its concatenation runs on the resampling kernels:
  # a cached calibration without their rate is measured again, not refused.
  cache_throughput(WITHOUT_RESAMPLE)
  ok_matching("\"predicted_step_s\":[0-9.]+" ${UNET3D} plan ${model} --mesh p:8
              --layouts "x:p | x:p | channels:p" --predict)
  cache_throughput()
  fails("no layout schedule fits 16.0 KiB per processor on mesh \\[p=2\\]: the least any needs is"
        ${UNET3D} plan ${model} --mesh p:2 --layout auto --memory-per-processor 16KiB)
  ok(${UNET3D} train ${model} --threads 1 --out ${here}/one)
  ok_matching("chosen" ${UNET3D} train ${model} --threads 8 --layout auto --memory-per-processor 64MiB
              --out ${here}/eight)
  ok(${CHECK} losses 1e-5 ${here}/one/metrics.jsonl ${here}/eight/metrics.jsonl)
  if(MPIEXEC)
    # Under a launcher processor 0 chooses and tells the others.
    ok_matching("chosen" ${MPIEXEC} ${NP_FLAG} 4 ${UNET3D} train ${model} --mesh p:4 --layout auto
                --memory-per-processor 64MiB --out ${here}/mpi)
    ok(${CHECK} losses 1e-5 ${here}/one/metrics.jsonl ${here}/mpi/metrics.jsonl)
    # With no calibration cached, processor 0 calibrates while the others wait, once.
    file(REMOVE_RECURSE ${here}/cache)
    ok_matching("chosen" ${MPIEXEC} ${NP_FLAG} 2 ${UNET3D}
                train ${model} --mesh p:2 --layout auto --memory-per-processor 64MiB
                --out ${here}/mpi2)
    string(REGEX MATCHALL "calibrating this machine's kernels" calibrations "${printed}")
    list(LENGTH calibrations times)
    if(NOT times EQUAL 1)
      message(FATAL_ERROR "the job calibrated ${times} times; once was expected")
    endif()
    ok(${CHECK} losses 1e-5 ${here}/one/metrics.jsonl ${here}/mpi2/metrics.jsonl)
  endif()
elseif(SCENARIO STREQUAL "bad_flags")
  fails("--precision: fp16 not in \\{fp32,bf16\\}" ${UNET3D} train ${small} --precision fp16 --out ${here}/o)
  fails("cannot parse mesh shape" ${UNET3D} train ${small} --mesh "rows:2,,cols" --out ${here}/o)
  fails("maps dim \"x\" to two mesh axes" ${UNET3D} train ${small} --mesh "rows:1, cols:1" --layout "x:rows, x:cols" --out ${here}/o)
  fails("names mesh axis \"cols\"" ${UNET3D} train ${small} --mesh "rows:1" --layout "x:cols" --out ${here}/o)
  fails("at level 2 \\(4x4x4 voxels\\): dim \"x\" has 4, fewer than the 8 processors of mesh axis \"p\".*--layouts \"x:p \\| x:p \\| channels:p\""
        ${UNET3D} train ${small} --threads 8 --out ${here}/o)
  fails("--layouts \"x:p \\| x:p \\| x:p \\| x:p\" has 4 levels but the U-Net of --depth 2 has 3"
        ${UNET3D} train ${small} --threads 2 --layouts "x:p | x:p | x:p | x:p" --out ${here}/o)
  fails("layout \"y:q\" of level 1: layout \"y:q\" names mesh axis \"q\""
        ${UNET3D} train ${small} --threads 2 --layouts "x:p | y:q" --out ${here}/o)
  fails("--layouts: layout schedule \"x:p \\|\\| x:\", stage 2 .*entry \"x:\" has no value"
        ${UNET3D} train ${small} --threads 2 --layouts "x:p || x:" --out ${here}/o)
  fails("--layout \"x:p\" and --layouts \"x:p\" both say where tensors live"
        ${UNET3D} train ${small} --threads 2 --layout x:p --layouts x:p --out ${here}/o)
  fails("size 20 along x is not divisible by 2\\^depth = 8" ${UNET3D} train --size 20 --depth 3 --out ${here}/o)
  fails("--memory-per-processor \"2XB\": unknown unit \"XB\".*e.g. 2GiB"
        ${UNET3D} train ${small} --layout auto --memory-per-processor 2XB --out ${here}/o)
  fails("--layout auto needs --memory-per-processor" ${UNET3D} train ${small} --layout auto --out ${here}/o)
  fails("--deep-halos \"1,5\": expected off, on, auto or levels 0 to 2"
        ${UNET3D} train ${small} --deep-halos 1,5 --out ${here}/o)
  fails("--memory-per-processor is the budget --layout auto chooses within"
        ${UNET3D} train ${small} --memory-per-processor 1GiB --out ${here}/o)
  fails("network \"nope\" is not in .*networks.txt; its networks are shared-memory, ib-hdr"
        ${UNET3D} plan ${small} --predict --network nope)
  fails("--network, --kernels and --calibrate price plans" ${UNET3D} train ${small} --network ib-hdr --out ${here}/o)
  fails("--layout auto chooses for phantom volumes" ${UNET3D} train --data ${here} --layout auto
        --memory-per-processor 1GiB --out ${here}/o)
  if(MPIEXEC)
    # 64 ranks that all fail at once end the job (Open MPI's mpirun hung when ranks left before
    # the others had started); so does an unknown flag.
    fails("size 20 along x is not divisible" ${MPIEXEC} ${NP_FLAG} 64 ${UNET3D} train --size 20 --depth 3
          --out ${here}/o)
    fails("argument was not expected: --bogus" ${MPIEXEC} ${NP_FLAG} 64 ${UNET3D} train --bogus)
    fails("--memory-per-processor \"2XB\": unknown unit" ${MPIEXEC} ${NP_FLAG} 64 ${UNET3D} train
          --layout auto --memory-per-processor 2XB)
    # --help ends every rank with status 0, and an error once the mesh exists (a block over the
    # limit, on every rank) ends the job with the processors named.
    ok(${MPIEXEC} ${NP_FLAG} 64 ${UNET3D} train --help)
    fails("error on processor [0-9]+ of 64: the tensor \\[.*more than MESHTENSOR_MAX_BLOCK_BYTES"
          ${CMAKE_COMMAND} -E env MESHTENSOR_MAX_BLOCK_BYTES=16KiB ${MPIEXEC} ${NP_FLAG} 64 ${UNET3D}
          train --size 64 --depth 2 --mesh p:64 --layouts "x:p | channels:p" --steps 1
          --out ${here}/o64)
  endif()
  # Real numbers are finite and above zero (CLI11's own check lets NaN and infinity through).
  foreach(bad "--lr;nan" "--lr;inf" "--lr;-0.1" "--class-weights;1,nan,3" "--spacing;1,inf,1")
    fails("must be a finite number above 0, not \"(nan|inf|-0.1)\"" ${UNET3D} train ${small} ${bad}
          --out ${here}/o)
  endforeach()
  fails("--threads: Value 5000 not in range 1 to 1024" ${UNET3D} train ${small} --threads 5000
        --out ${here}/o)
  # A block bigger than the limit names its tensor and processor before anything is allocated (the
  # first over 16 KiB is a weight).
  fails("the tensor \\[kx=3, .*\\] \\(float32, layout \"\"\\) on processor 0 of 1 needs a block of [0-9]+ elements of 4 bytes, [0-9]+ bytes \\([0-9.]+ KiB\\), more than MESHTENSOR_MAX_BLOCK_BYTES \\(16.0 KiB\\)"
        ${CMAKE_COMMAND} -E env MESHTENSOR_MAX_BLOCK_BYTES=16KiB ${UNET3D} train ${small} --threads 1
        --steps 1 --out ${here}/o)
  fails("--log /dev/full: could not write the metrics" ${UNET3D} train ${small} --steps 1 --threads 1
        --out ${here}/o --log /dev/full)
  # A learning rate of 1e30 makes step 2's loss NaN: the run stops there, naming it, and the last
  # checkpoint is step 1's; with --on-nonfinite skip-step the optimiser skips it and the run ends.
  fails("step 2: the loss \\(-?nan\\) is not finite \\(NaN or infinity\\); training stopped"
        ${UNET3D} train ${small} --lr 1e30 --steps 3 --threads 1 --out ${here}/nan
        --checkpoint ${here}/nan/ckpt --checkpoint-every 1)
  file(READ ${here}/nan/ckpt/latest latest)
  if(NOT latest STREQUAL "checkpoint-000001\n")
    message(FATAL_ERROR "a step with a NaN loss was checkpointed: latest is ${latest}")
  endif()
  ok(${UNET3D} train ${small} --lr 1e30 --steps 3 --threads 2 --on-nonfinite skip-step
     --out ${here}/skip)
  file(READ ${here}/skip/metrics.jsonl log)
  if(NOT log MATCHES "\"skipped\":\"the loss \\(-?nan\\) is not finite\",\"step\":3")
    message(FATAL_ERROR "the skipped steps are not in the metrics log")
  endif()
  fails("--out /proc/unet3d-out: cannot create or write" ${UNET3D} train ${small} --steps 1 --threads 1 --out /proc/unet3d-out)
  fails("--checkpoint /proc/ckpt: cannot create or write" ${UNET3D} train ${small} --steps 1 --threads 1
        --out ${here}/o --checkpoint /proc/ckpt)
elseif(SCENARIO STREQUAL "bad_files")
  make_model()
  set(predict ${UNET3D} predict --threads 1)
  fails("no checkpoint here" ${predict} --checkpoint ${here}/missing --input ${here}/volume.npy --output ${here}/s.npy)
  # A failing predict leaves an existing output untouched.
  file(WRITE ${here}/existing.npy "keep me")
  ok(${CHECK} corrupt dtype ${here}/volume.npy ${here}/volume_f8.npy)
  fails("volume_f8.npy: holds elements of type '<f8' but '<f4' was expected"
        ${predict} --checkpoint ${here}/ckpt --input ${here}/volume_f8.npy --output ${here}/existing.npy)
  # A NaN in the volume, in the second processor's block: refused as a NIfTI volume's, on both.
  ok(${CHECK} corrupt nan ${here}/volume.npy ${here}/volume_nan.npy)
  fails("volume_nan.npy: element \\(15, 15, 15\\) is nan. meshtensor reads finite values only"
        ${UNET3D} predict --threads 2 --layout "x:p" --checkpoint ${here}/ckpt
        --input ${here}/volume_nan.npy --output ${here}/existing.npy)
  foreach(mode truncate zeros garbage shape)
    file(COPY ${here}/ckpt DESTINATION ${here}/${mode})
    file(READ ${here}/${mode}/ckpt/latest name)
    string(STRIP "${name}" name)
    set(victim ${here}/${mode}/ckpt/${name}/down0.conv1.weight.npy)
    ok(${CHECK} corrupt ${mode} ${victim} ${victim}.bad)
    file(RENAME ${victim}.bad ${victim})
  endforeach()
  fails("truncated or corrupted" ${predict} --checkpoint ${here}/truncate/ckpt --input ${here}/volume.npy --output ${here}/existing.npy)
  # A file of the right size whose data are zeros (a power loss): only its checksum tells.
  fails("down0.conv1.weight.npy: its CRC-32 is [0-9]+ but the manifest saved [0-9]+: the file changed after the checkpoint was written"
        ${predict} --checkpoint ${here}/zeros/ckpt --input ${here}/volume.npy --output ${here}/existing.npy)
  fails("header is garbage|not a .npy file|malformed" ${predict} --checkpoint ${here}/garbage/ckpt --input ${here}/volume.npy --output ${here}/existing.npy)
  fails("holds an array of shape \\(216,\\) but \\[kx=3, ky=3, kz=3, channels=1, channels_out=4\\] was expected"
        ${predict} --checkpoint ${here}/shape/ckpt --input ${here}/volume.npy --output ${here}/existing.npy)
  file(READ ${here}/existing.npy kept)
  if(NOT kept STREQUAL "keep me")
    message(FATAL_ERROR "a failing predict overwrote its output")
  endif()
  file(COPY ${here}/ckpt DESTINATION ${here}/json)
  file(READ ${here}/json/ckpt/latest name)
  string(STRIP "${name}" name)
  file(WRITE ${here}/json/ckpt/${name}/manifest.json "{ not json")
  fails("manifest.json: not valid JSON" ${predict} --checkpoint ${here}/json/ckpt --input ${here}/volume.npy --output ${here}/s.npy)
  # Manifests edited into something else: each refused naming the key and what would be valid
  # (". it must" stands for "; it must": a semicolon would split the list).
  file(READ ${here}/ckpt/${name}/manifest.json manifest)
  set(edits
      "\"down0.conv1.weight.npy\"|\"../../../../etc/hostname\"|tensors\\[[0-9]+\\].file is \"../../../../etc/hostname\". it must be the name of a .npy file inside"
      "\"step\": [0-9]+|\"step\": \"soon\"|step is \"soon\". it must be an integer from 0"
      "\"depth\": 2|\"depth\": 99|flags.depth is 99. it must be an integer from 1 to 6"
      "\"dims\":|\"dimz\":|tensors\\[0\\] has no \"dims\""
      "\"dtype\": \"float32\"|\"dtype\": \"float16\"|tensors\\[0\\].dtype is \"float16\". it must be one of \"float32\""
      "\"norm\": \"batch\"|\"norm\": 7|flags.norm is 7. it must be one of \"batch\", \"instance\"")
  set(k 0)
  foreach(edit IN LISTS edits)
    string(REPLACE "|" ";" parts "${edit}")
    list(GET parts 0 from)
    list(GET parts 1 to)
    list(GET parts 2 expected)
    math(EXPR k "${k} + 1")
    file(COPY ${here}/ckpt DESTINATION ${here}/schema${k})
    string(REGEX REPLACE "${from}" "${to}" edited "${manifest}")
    if(edited STREQUAL manifest)
      message(FATAL_ERROR "the manifest has nothing matching ${from}")
    endif()
    file(WRITE ${here}/schema${k}/ckpt/${name}/manifest.json "${edited}")
    fails("manifest.json: ${expected}" ${predict} --checkpoint ${here}/schema${k}/ckpt
          --input ${here}/volume.npy --output ${here}/s.npy)
  endforeach()
  # `latest` and `best` name a checkpoint directory beside them, nothing else.
  foreach(pointer latest best)
    file(COPY ${here}/ckpt DESTINATION ${here}/${pointer})
    file(WRITE ${here}/${pointer}/ckpt/${pointer} "../../ckpt/${name}\n")
    fails("${pointer}: names \"../../ckpt/${name}\"; it must name a checkpoint-NNNNNN directory beside it"
          ${predict} --pick ${pointer} --checkpoint ${here}/${pointer}/ckpt --input ${here}/volume.npy
          --output ${here}/s.npy)
  endforeach()
  fails("the volume is \\(16, 16, 16\\) but --size/--shape says \\(32, 32, 32\\)"
        ${predict} --size 32 --checkpoint ${here}/ckpt --input ${here}/volume.npy --output ${here}/s.npy)
  fails("s.npy: cannot create .*/s.npy.partial \\(No such file or directory. does the directory exist" ${predict} --checkpoint ${here}/ckpt --input ${here}/volume.npy --output ${here}/no/such/dir/s.npy)
  fails("--resume: the checkpoint was trained with --channels 4 but this run has 8"
        ${UNET3D} train --size 16 --depth 2 --channels 8 --steps 4 --threads 1 --out ${here}/o --checkpoint ${here}/ckpt --resume)
  ok(${UNET3D} generate --size 18 --output ${here}/eighteen.npy --threads 1)
  fails("size 18 along x is not divisible by 2\\^depth = 4" ${predict} --checkpoint ${here}/ckpt --input ${here}/eighteen.npy --output ${here}/s.npy)
elseif(SCENARIO STREQUAL "scans" OR SCENARIO STREQUAL "bad_scans" OR SCENARIO STREQUAL "decathlon")
  # A folder of NIfTI scans made by nibabel from phantoms (LPS axes, int16 with slope, 0.8 x 0.8 x
  # 2 mm, shapes that differ), resampled to 1.6 x 1.6 x 2 mm for training.
  include(${CMAKE_CURRENT_LIST_DIR}/../support/nibabel.cmake)
  require_nibabel(have_nibabel)
  if(NOT have_nibabel)
    return()
  endif()
  set(shapes "40,36,14" "36,40,12" "44,32,16")
  set(pairs)
  set(index 0)
  foreach(shape ${shapes})
    ok(${UNET3D} generate --shape ${shape} --index ${index} --output ${here}/v${index}.npy
       --labels ${here}/l${index}.npy --threads 1)
    list(APPEND pairs ${here}/v${index}.npy ${here}/l${index}.npy)
    math(EXPR index "${index} + 1")
  endforeach()
  ok(${PYTHON} ${CMAKE_CURRENT_LIST_DIR}/make_scans.py ${here} ${pairs})
  set(model_flags --depth 2 --channels 4 --spacing 1.6,1.6,2 --validate-every 100)
  set(scan_flags ${model_flags} --validation-volumes 1)
  if(SCENARIO STREQUAL "decathlon")
    # A Decathlon dataset of two MRI-like channels (4-D files): its dataset.json names the classes
    # and modalities. Validated every step, so that `best` names the best checkpoint. Predicted
    # from the dataset.json's test list on 1 processor, from the folder on 8, and from nnU-Net's
    # one file per channel over MPI: equal labels on the scan's grid.
    set(data ${here}/decathlon)
    ok(${UNET3D} train --data ${data} --depth 2 --channels 4 --spacing 1.6,1.6,2
       --validation-volumes 1 --validate-every 1
       --checkpoint-every 100 --steps 3 --threads 2 --out ${here}/train --checkpoint ${here}/ckpt)
    ok(${CHECK} task ${here}/ckpt "background,organ,tumour" "FLAIR,T1w")
    if(NOT EXISTS ${here}/ckpt/best OR NOT EXISTS ${here}/ckpt/latest)
      message(FATAL_ERROR "training with validation keeps no best checkpoint")
    endif()
    ok_matching("\"scans\":1" ${UNET3D} predict --checkpoint ${here}/ckpt --input ${data}/dataset.json
       --output ${here}/one --probabilities ${here}/p1 --threads 1)
    ok(${UNET3D} predict --checkpoint ${here}/ckpt --input ${data}/imagesTs --output ${here}/eight
       --probabilities ${here}/p8 --mesh "a:2, b:2, c:2" --layout "x:a, y:b, z:c")
    set(labels ${here}/one/mri_002.nii.gz ${here}/eight/mri_002.nii.gz)
    set(probabilities ${here}/p1/mri_002.nii.gz ${here}/p8/mri_002.nii.gz)
    set(launch)
    if(MPIEXEC)
      set(launch ${MPIEXEC} ${NP_FLAG} 2)
    endif()
    ok(${launch} ${UNET3D} predict --checkpoint ${here}/ckpt --input ${here}/nnunet_ts
       --output ${here}/nnunet --mesh "p:2" --layout "y:p")
    list(APPEND labels ${here}/nnunet/mri_002.nii.gz)
    ok_matching("checkpoint-000003" ${UNET3D} predict --checkpoint ${here}/ckpt --pick latest
                --input ${data}/imagesTs/mri_002.nii.gz --output ${here}/latest.nii.gz --threads 2)
    ok(${PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_scans.py ${data}/imagesTs/mri_002.nii.gz ${labels}
       -- ${probabilities})
    # Evaluated against the training labels, on 1 processor, 8 and MPI: the same scores, those
    # of scipy's distance transform as MONAI defines them.
    ok(${UNET3D} predict --checkpoint ${here}/ckpt --input ${data}/imagesTr --output ${here}/tr
       --threads 2)
    set(evaluate ${UNET3D} evaluate --predictions ${here}/tr --labels ${data}/labelsTr
        --classes background,organ,tumour --tolerance 2)
    ok_matching("\"cases\":2" ${evaluate} --threads 1 --output ${here}/eval_one)
    ok(${evaluate} --mesh "a:2, b:2, c:2" --layout "x:a, y:b, z:c" --output ${here}/eval_eight)
    set(reports ${here}/eval_one.json ${here}/eval_eight.json)
    if(MPIEXEC)
      ok(${MPIEXEC} ${NP_FLAG} 3 ${evaluate} --layout "z:p" --output ${here}/eval_mpi)
      list(APPEND reports ${here}/eval_mpi.json)
    endif()
    ok(${PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_evaluation.py ${reports})
    # Without --classes: every label value the volumes hold (1, 2, 3, and a 5 in one prediction).
    set(more ${here}/more_classes)
    ok(${UNET3D} evaluate --predictions ${more}/predicted --labels ${more}/labels --threads 2
       --layout "y:p" --output ${here}/eval_more)
    ok(${PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_evaluation.py --every-label ${here}/eval_more.json)
    file(STRINGS ${here}/eval_one.csv rows)
    list(LENGTH rows row_count)
    if(NOT row_count EQUAL 7)  # the header, 2 cases x 2 classes, 2 means
      message(FATAL_ERROR "evaluation.csv has ${row_count} rows, not 7")
    endif()
    # A prediction on another grid than its label, a case without a label, a label out of range.
    file(MAKE_DIRECTORY ${here}/other_grid ${here}/one_label)
    file(COPY_FILE ${here}/scans/segmentation-1.nii ${here}/other_grid/mri_000.nii)
    file(COPY_FILE ${data}/labelsTr/mri_001.nii.gz ${here}/other_grid/mri_001.nii.gz)
    file(COPY_FILE ${data}/labelsTr/mri_000.nii.gz ${here}/one_label/mri_000.nii.gz)
    set(failing ${UNET3D} evaluate --predictions ${here}/tr --threads 2 --output ${here}/evaluation)
    fails("mri_000.nii.gz: 40x36x14 voxels, but its label volume .*other_grid/mri_000.nii has 36x40x12"
          ${failing} --labels ${here}/other_grid)
    fails("mri_001.nii.gz: no label volume of case mri_001 in --labels"
          ${failing} --labels ${here}/one_label)
    fails("holds the label value 2; --classes names 2 classes"
          ${failing} --labels ${data}/labelsTr --classes background,organ)
    if(EXISTS ${here}/evaluation.json OR EXISTS ${here}/evaluation.csv)
      message(FATAL_ERROR "a failed evaluation wrote its report")
    endif()
    # What is wrong with a dataset, named.
    set(train ${UNET3D} train ${model_flags} --validation-volumes 0 --threads 2 --out ${here}/o)
    fails("decathlon_missing/dataset.json lists .*decathlon_missing/labelsTr/mri_000.nii.gz: no such file"
          ${train} --data ${here}/decathlon_missing --steps 1)
    fails("decathlon_one_channel/imagesTr/mri_001.nii.gz: holds 1 channel\\(s\\) \\(volumes along dim 4\\), but the task has 2 \\(FLAIR, T1w\\)"
          ${train} --data ${here}/decathlon_one_channel --steps 2)
    fails("--classes background,organ names 2 classes but the dataset.json of --data .* has 3 \\(background,organ,tumour\\)"
          ${train} --data ${data} --classes background,organ --steps 1)
    fails("--window windows CT channels, and the channels are FLAIR, T1w"
          ${train} --data ${data} --window -100,200 --steps 1)
    fails("--class-weights gives 2 weights for the 3 classes"
          ${train} --data ${data} --class-weights 1,2 --steps 1)
    fails("--classes a,b: the phantoms have 3 classes" ${UNET3D} train ${small} --classes a,b --steps 1)
    if(EXISTS ${here}/o/metrics.jsonl)
      file(READ ${here}/o/metrics.jsonl log)
      if(NOT log STREQUAL "")
        message(FATAL_ERROR "a run refused before its first step logged a step")
      endif()
    endif()
  elseif(SCENARIO STREQUAL "scans")
    # Training on the folder, then whole-scan prediction on 1 processor, 8 and MPI: equal labels,
    # on the scan's grid with its header.
    ok(${UNET3D} train --data ${here}/scans ${scan_flags} --steps 3 --threads 2 --out ${here}/train
       --checkpoint ${here}/ckpt)
    set(scan ${here}/scans/volume-0.nii.gz)
    ok(${UNET3D} predict --checkpoint ${here}/ckpt --input ${scan} --output ${here}/one.nii.gz
       --probabilities ${here}/p1.nii.gz --threads 1)
    ok(${UNET3D} predict --checkpoint ${here}/ckpt --input ${scan} --output ${here}/eight.nii
       --probabilities ${here}/p8.nii.gz --mesh "a:2, b:2, c:2" --layout "x:a, y:b, z:c")
    set(labels ${here}/one.nii.gz ${here}/eight.nii)
    set(probabilities ${here}/p1.nii.gz ${here}/p8.nii.gz)
    if(MPIEXEC)
      ok(${MPIEXEC} ${NP_FLAG} 4 ${UNET3D} predict --checkpoint ${here}/ckpt --input ${scan}
         --output ${here}/mpi.nii.gz --mesh "rows:2, cols:2" --layout "y:rows, z:cols")
      list(APPEND labels ${here}/mpi.nii.gz)
    endif()
    if(MPIEXEC AND EMULATED_GPU)
      # The same folder on 2 emulated GPUs (tests/gpu/emulated): training on scans read,
      # resampled and one-hot encoded on the GPU ranks follows the CPU's losses, and the host never
      # touches GPU memory while GPU work is still queued.
      ok(${CMAKE_COMMAND} -E env LD_LIBRARY_PATH=${EMULATED_GPU} MESHTENSOR_EMULATED_GPU_PAGES=1
         ${MPIEXEC} ${NP_FLAG} 2 ${UNET3D} train --data ${here}/scans ${scan_flags} --steps 3
         --backend nccl --out ${here}/gpu_train)
      no_race()
      ok(${CHECK} losses 1e-4 ${here}/train/metrics.jsonl ${here}/gpu_train/metrics.jsonl)
    endif()
    ok(${PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_scans.py ${scan} ${labels} -- ${probabilities})
  else()
    set(train ${UNET3D} train ${scan_flags} --steps 1 --threads 2 --out ${here}/o)
    fails("--data ${here}/empty: no image/label pairs; expected a Decathlon dataset.json, LiTS names" ${train} --data ${here}/empty)
    fails("--data ${here}/missing: no such directory" ${train} --data ${here}/missing)
    fails("volume-0.nii.gz: has no label volume .*segmentation-0.nii\\[.gz\\]" ${train} --data ${here}/unlabelled)
    fails("segmentation-1.nii: 36x40x12 voxels, but its image .*volume-0.nii.gz has 40x36x14; a label volume needs its image's grid"
          ${train} --data ${here}/mismatch)
    # One pair, trained on: hold none out.
    fails("misaligned/segmentation-1.nii: its affine \\(voxel to world\\) differs from that of its image .*volume-1.nii at row 2, column 3"
          ${UNET3D} train ${model_flags} --validation-volumes 0 --steps 1 --threads 2 --out ${here}/o
          --data ${here}/misaligned)
    fails("strange_labels/segmentation-1.nii: holds the label value 7.000000; the labels of --classes are 0 background, 1 organ, 2 tumour"
          ${UNET3D} train ${model_flags} --validation-volumes 0 --steps 1 --threads 2 --out ${here}/o
          --data ${here}/strange_labels)
    fails("--batch 2: with --data each step is one whole scan" ${train} --data ${here}/scans --batch 2)
    fails("--spacing resamples the scans of --data" ${UNET3D} train --spacing 1,1,1 --out ${here}/o)
    ok(${UNET3D} train --data ${here}/scans ${scan_flags} --steps 1 --threads 1 --out ${here}/t --checkpoint ${here}/ckpt)
    set(predict ${UNET3D} predict --checkpoint ${here}/ckpt --threads 2)
    fails("--output ${here}/s.npy: the labels of a NIfTI scan are written as NIfTI"
          ${predict} --input ${here}/scans/volume-1.nii --output ${here}/s.npy)
    fails("truncated.nii: .* bytes, but its header promises .* \\(truncated\\)"
          ${predict} --input ${here}/truncated.nii --output ${here}/s.nii.gz)
    fails("nothing.nii.gz: no such file" ${predict} --input ${here}/nothing.nii.gz --output ${here}/s.nii.gz)
    if(EXISTS ${here}/s.nii.gz OR EXISTS ${here}/s.partial.nii.gz)
      message(FATAL_ERROR "a failing predict left an output behind")
    endif()
  endif()
elseif(SCENARIO STREQUAL "nccl_emulated")
  # On the nccl transport, every GPU call carried out by the emulated GPU: training on 4 ranks
  # follows one CPU processor's losses, stopped and resumed from its checkpoint too, having made
  # every kind of GPU call (meshtensor's kernels, cuDNN, NCCL); predicting from that checkpoint on
  # 2 ranks gives the CPU's probabilities; training leaves the GPU's pages to the GPU; and the host
  # never touches the GPU's memory while GPU work is queued (GPU calls return without waiting).
  set(ENV{LD_LIBRARY_PATH} ${EMULATED_GPU})
  set(ENV{MESHTENSOR_EMULATED_GPU_SUMMARY} 1)
  set(ENV{MESHTENSOR_EMULATED_GPU_PAGES} 1)
  set(ENV{MESHTENSOR_ONEDNN_FORMATS} by_channels)
  set(four_gpus ${MPIEXEC} ${NP_FLAG} 4 ${UNET3D})
  set(grid --mesh "rows:2, cols:2" --layout "x:rows, y:cols")
  ok(${UNET3D} train ${small} --steps 6 --threads 1 --out ${here}/cpu --checkpoint ${here}/cpu_ckpt)
  ok_matching("emulated GPU summary: kernel=[1-9][0-9]* cudnn=[1-9][0-9]* cublas=[0-9]+ nccl=[1-9]"
              ${four_gpus} train ${small} --steps 6 --backend nccl ${grid} --out ${here}/gpu)
  no_race()
  ok(${CHECK} losses 1e-4 ${here}/cpu/metrics.jsonl ${here}/gpu/metrics.jsonl)
  ok(${four_gpus} train ${small} --steps 6 --stop-after 3 --backend nccl ${grid} --out ${here}/parts
     --checkpoint ${here}/gpu_ckpt)
  no_race()
  ok(${four_gpus} train ${small} --steps 6 --resume --backend nccl ${grid} --out ${here}/parts
     --checkpoint ${here}/gpu_ckpt)
  no_race()
  ok(${CHECK} losses 1e-4 ${here}/cpu/metrics.jsonl ${here}/parts/metrics.jsonl)
  ok(${UNET3D} generate --size 16 --index 3 --output ${here}/volume.npy --threads 1)
  ok(${UNET3D} predict --checkpoint ${here}/cpu_ckpt --input ${here}/volume.npy
     --output ${here}/cpu.npy --probabilities ${here}/p_cpu.npy --threads 1)
  ok(${MPIEXEC} ${NP_FLAG} 2 ${UNET3D} predict --checkpoint ${here}/cpu_ckpt --backend nccl
     --input ${here}/volume.npy --output ${here}/gpu.npy --probabilities ${here}/p_gpu.npy)
  no_race()
  all_on_gpu()
  ok(${CHECK} close-npy 1e-5 ${here}/p_cpu.npy ${here}/p_gpu.npy)
  # Training and prediction steps keep their blocks in the GPU's memory, in fp32 and bf16: the
  # host touches none of the GPU's pages (each would be a page fault and a transfer over the bus,
  # every step), so every op ran on the GPU. bf16 predictions follow the CPU's.
  foreach(precision fp32 bf16)
    ok(${four_gpus} train --size 16 --depth 2 --channels 4 --validation-volumes 0 --steps 3
       --backend nccl ${grid} --precision ${precision} --out ${here}/pages_${precision})
    all_on_gpu()
    no_race()
  endforeach()
  # Training steps never make the host wait for a GPU, on one GPU or four, in either precision:
  # the statistics stay on the GPU, collectives and halos are ordered there, the optimiser skips
  # a bad step there, and the host reads each step's loss, checks and Dice counts while the GPU
  # runs the next (the emulated GPU counts every wait).
  foreach(run "1;fp32" "1;bf16" "4;fp32")
    small_gpu_model("${run}")
    ok_matching("emulated GPU summary: .* waits=0\n" ${MPIEXEC} ${NP_FLAG} ${ranks} ${UNET3D} train
                ${model} --validation-volumes 0 --steps 4 --out ${here}/waits_${ranks}_${precision})
    if("${printed}" MATCHES "waits=[1-9]")
      message(FATAL_ERROR "the host waited for a GPU during training")
    endif()
  endforeach()
  # Each training step from the second on as one CUDA graph (--graphs): the same losses to the
  # bit, the four GPUs' halo exchanges and collectives inside the graph, one launch a step (3 of
  # 4 steps), no race, and at most one wait: at the capture, where the pool gives back the blocks
  # the eager step cached (cudaFree waits for the GPU).
  foreach(run "1;bf16" "4;fp32")
    small_gpu_model("${run}")
    ok_matching("emulated GPU summary: .* graphs=3 waits=[01]\n" ${MPIEXEC} ${NP_FLAG} ${ranks}
                ${UNET3D} train ${model} --validation-volumes 0 --steps 4 --graphs
                --out ${here}/graphs_${ranks}_${precision})
    no_race()
    ok(${CHECK} losses 0 ${here}/waits_${ranks}_${precision}/metrics.jsonl
       ${here}/graphs_${ranks}_${precision}/metrics.jsonl)
  endforeach()
  # A plan for GPUs predicts what each GPU's pool held within 5%, on one GPU and two, in both
  # precisions; the top level's blocks (1 MiB) are past the pool's small segments.
  foreach(run "1;bf16" "2;fp32")
    list(GET run 0 ranks)
    list(GET run 1 precision)
    set(model --size 32 --depth 2 --channels 16 --backend nccl --mesh p:${ranks}
              --precision ${precision})
    ok(${MPIEXEC} ${NP_FLAG} ${ranks} ${UNET3D} train ${model} --validation-volumes 0 --steps 2
       --out ${here}/held_${ranks}_${precision})
    plan_predicts_held(${model})
  endforeach()
  ok(${UNET3D} train ${small} --steps 3 --threads 1 --precision bf16 --out ${here}/cpu_bf16
     --checkpoint ${here}/bf16_ckpt)
  ok(${UNET3D} predict --checkpoint ${here}/bf16_ckpt --input ${here}/volume.npy
     --output ${here}/cpu_bf16.npy --probabilities ${here}/p_cpu_bf16.npy --threads 1)
  ok(${MPIEXEC} ${NP_FLAG} 2 ${UNET3D} predict --checkpoint ${here}/bf16_ckpt --backend nccl
     --input ${here}/volume.npy --output ${here}/gpu_bf16.npy --probabilities ${here}/p_gpu_bf16.npy)
  all_on_gpu()
  no_race()
  ok(${CHECK} close-npy 1e-2 ${here}/p_cpu_bf16.npy ${here}/p_gpu_bf16.npy)
elseif(SCENARIO STREQUAL "nccl_emulated_bad_start")
  # Machines the nccl transport cannot start on end every rank at once with the reason.
  set(ENV{LD_LIBRARY_PATH} ${EMULATED_GPU})
  set(train ${MPIEXEC} ${NP_FLAG} 2 ${UNET3D} train ${small} --steps 1 --backend nccl --out ${here}/o)
  set(ENV{MESHTENSOR_EMULATED_GPUS} 0)
  fails("the nccl transport cannot start; every processor: no GPU is visible to this process" ${train})
  set(ENV{MESHTENSOR_EMULATED_GPUS} 1)
  fails("2 processors of host .* would share GPU 0 \\(meshtensor emulated GPU.*the nccl transport needs one GPU per processor"
        ${train})
  unset(ENV{MESHTENSOR_EMULATED_GPUS})
  set(ENV{MESHTENSOR_EMULATED_DRIVER_VERSION} 12000)
  fails("supports CUDA 12.0 but this program was built with the CUDA [0-9.]+ runtime; install a newer driver"
        ${train})
  unset(ENV{MESHTENSOR_EMULATED_DRIVER_VERSION})
  set(ENV{MESHTENSOR_EMULATED_NCCL_VERSION} 21800)
  fails("the NCCL library loaded \\(libnccl.so.2, version 2.18.0\\) is older than the NCCL [0-9.]+ this program was built with"
        ${train})
  unset(ENV{MESHTENSOR_EMULATED_NCCL_VERSION})
  # A card too small for the run (2 MB of GPU memory): an error that names the tensor, its layout,
  # the processor and the bytes, on every rank, and no hang.
  set(ENV{MESHTENSOR_EMULATED_GPU_MEMORY} 2000000)
  fails("error on processor [01] of 2: (the tensor \\[.*\\] \\(float32, layout .*\\) on processor [01] of 2 needs a block of [0-9.]+ [KM]iB: )?an array of [0-9 x]+ elements of 4 bytes: GPU memory has no room for a block of [0-9]+ bytes \\(this processor has [0-9]+ bytes in use"
        ${MPIEXEC} ${NP_FLAG} 2 ${UNET3D} train --size 32 --depth 2 --channels 8 --steps 1
        --validation-volumes 0 --backend nccl --out ${here}/o)
  unset(ENV{MESHTENSOR_EMULATED_GPU_MEMORY})
else()
  message(FATAL_ERROR "unknown scenario ${SCENARIO}")
endif()
