# Builds and runs the consumer project against meshtensor. Arguments:
#   MODE            find_package (install meshtensor from BINARY_DIR first; then also unet3d,
#                   pkg-config and the core-only consumer), build_tree (find_package with
#                   meshtensor_DIR=BINARY_DIR), add_subdirectory or fetchcontent
#   SOURCE_DIR      meshtensor's source tree;  BINARY_DIR  its build tree
#   WORK_DIR        scratch directory;  CONSUMER  the consumer project
#   MPIEXEC, NP_FLAG  to run the MPI consumer when meshtensor::mpi exists
file(REMOVE_RECURSE ${WORK_DIR})

function(run_step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}${err}")
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "step failed (${status}): ${ARGN}")
  endif()
endfunction()

# run_component(<component> <command>...): runs a component's program; the component-only one
# (component.cpp) must say it was built with <component>.
function(run_component component)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}${err}")
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "step failed (${status}): ${ARGN}")
  endif()
  if(out MATCHES "component consumer ok" AND NOT out MATCHES " ${component}")
    message(FATAL_ERROR "meshtensor::${component} did not bring MESHTENSOR_WITH_* to its program")
  endif()
endfunction()

set(consumer_mode ${MODE})
if(MODE STREQUAL "build_tree")
  set(consumer_mode find_package)
endif()
# Unoptimised: these programs check that the package's targets compile, link and run; -O3's
# code generation would double each of their compiles (16 of them over the four modes).
# The installed package runs the full program on every component; the other modes, where only
# how the targets are found differs, build the components' programs from component.cpp (each full
# program is a 13 s compile; packaging was a third of the suite's time).
if(MODE STREQUAL "find_package")
  set(full_components ON)
else()
  set(full_components OFF)
endif()
set(configure_args -S ${CONSUMER} -B ${WORK_DIR}/build -DMODE=${consumer_mode}
                   -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0
                   -DFULL_COMPONENTS=${full_components})
if(MODE STREQUAL "find_package")
  run_step(${CMAKE_COMMAND} --install ${BINARY_DIR} --prefix ${WORK_DIR}/prefix)
  foreach(installed include/meshtensor/meshtensor.hpp share/pkgconfig/meshtensor.pc
          share/doc/meshtensor/LICENSE share/doc/meshtensor/CITATION.cff)
    if(NOT EXISTS ${WORK_DIR}/prefix/${installed})
      message(FATAL_ERROR "install did not place ${installed}")
    endif()
  endforeach()
  list(APPEND configure_args -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
elseif(MODE STREQUAL "build_tree")
  list(APPEND configure_args -Dmeshtensor_DIR=${BINARY_DIR})
else()
  list(APPEND configure_args -DMESHTENSOR_SOURCE_DIR=${SOURCE_DIR})
endif()
run_step(${CMAKE_COMMAND} ${configure_args})
run_step(${CMAKE_COMMAND} --build ${WORK_DIR}/build --parallel 2)
run_step(${WORK_DIR}/build/consumer)
if(EXISTS ${WORK_DIR}/build/consumer_onednn)
  run_component(onednn ${WORK_DIR}/build/consumer_onednn)
elseif(WITH_ONEDNN)
  message(FATAL_ERROR "meshtensor::onednn was built here but the consumer could not use it")
endif()
# Linked with the GPU backend, the program still runs on threads unless asked for nccl.
if(EXISTS ${WORK_DIR}/build/consumer_cuda)
  run_component(cuda ${WORK_DIR}/build/consumer_cuda)
elseif(WITH_CUDA)
  message(FATAL_ERROR "meshtensor::cuda was built here but the consumer could not use it")
endif()
if(EXISTS ${WORK_DIR}/build/consumer_mpi AND MPIEXEC)
  if(full_components)
    run_step(${MPIEXEC} ${NP_FLAG} 2 ${WORK_DIR}/build/consumer_mpi)
  else()
    run_component(mpi ${WORK_DIR}/build/consumer_mpi)
  endif()
elseif(MPIEXEC)
  message(FATAL_ERROR "meshtensor::mpi was built here but the consumer could not use it")
endif()

if(MODE STREQUAL "find_package")
  # The programs, installed with the library, run from the prefix.
  if(EXISTS ${BINARY_DIR}/examples/unet3d/unet3d)
    run_step(${WORK_DIR}/prefix/bin/unet3d --version)
    if(NOT EXISTS ${WORK_DIR}/prefix/bin/unet3d-to-pytorch)
      message(FATAL_ERROR "install did not place bin/unet3d-to-pytorch")
    endif()
  endif()
  if(EXISTS ${BINARY_DIR}/examples/transformer/transformer)
    run_step(${WORK_DIR}/prefix/bin/transformer train --steps 2 --digits 3 --model 16 --d-ff 32
             --mesh "p:2" --layout "heads:p" --check)
  endif()
  # The core alone where OpenCL and MPI are hidden: the config is found, onednn reported missing.
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${CONSUMER}/../consumer_core -B ${WORK_DIR}/core
                          -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Debug
                          -DCMAKE_CXX_FLAGS_DEBUG=-O0
                          -DCMAKE_DISABLE_FIND_PACKAGE_OpenCL=TRUE
                          -DCMAKE_DISABLE_FIND_PACKAGE_MPI=TRUE
                  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}${err}")
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "a core-only consumer could not configure without OpenCL and MPI")
  endif()
  if(WITH_ONEDNN AND NOT "${out}${err}" MATCHES "needs oneDNN 2 with OpenCL")
    message(FATAL_ERROR "the onednn component did not say why it is missing")
  endif()
  run_step(${CMAKE_COMMAND} --build ${WORK_DIR}/core)
  run_step(${WORK_DIR}/core/consumer)
  # pkg-config, without CMake: compile the consumer with its flags.
  find_program(PKG_CONFIG pkg-config)
  find_program(CXX_COMPILER NAMES c++ g++)
  if(PKG_CONFIG AND CXX_COMPILER)
    set(ENV{PKG_CONFIG_PATH} ${WORK_DIR}/prefix/share/pkgconfig)
    execute_process(COMMAND ${PKG_CONFIG} --cflags --libs meshtensor RESULT_VARIABLE status
                    OUTPUT_VARIABLE flags ERROR_VARIABLE err OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT status EQUAL 0)
      message(FATAL_ERROR "pkg-config meshtensor: ${err}")
    endif()
    separate_arguments(flags UNIX_COMMAND "${flags}")
    run_step(${CXX_COMPILER} ${CONSUMER}/main.cpp -o ${WORK_DIR}/pkg_consumer ${flags} -lfmt)
    run_step(${WORK_DIR}/pkg_consumer)
  endif()
endif()
