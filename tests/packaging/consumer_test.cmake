# Builds and runs the consumer project against meshtensor. Arguments:
#   MODE            find_package (install meshtensor from BINARY_DIR first) or add_subdirectory
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

set(configure_args -S ${CONSUMER} -B ${WORK_DIR}/build -DMODE=${MODE} -DCMAKE_BUILD_TYPE=Release)
if(MODE STREQUAL "find_package")
  run_step(${CMAKE_COMMAND} --install ${BINARY_DIR} --prefix ${WORK_DIR}/prefix)
  if(NOT EXISTS ${WORK_DIR}/prefix/include/meshtensor/meshtensor.hpp)
    message(FATAL_ERROR "install did not place the headers")
  endif()
  list(APPEND configure_args -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
else()
  list(APPEND configure_args -DMESHTENSOR_SOURCE_DIR=${SOURCE_DIR})
endif()
run_step(${CMAKE_COMMAND} ${configure_args})
run_step(${CMAKE_COMMAND} --build ${WORK_DIR}/build --parallel 2)
run_step(${WORK_DIR}/build/consumer)
if(EXISTS ${WORK_DIR}/build/consumer_onednn)
  run_step(${WORK_DIR}/build/consumer_onednn)
elseif(WITH_ONEDNN)
  message(FATAL_ERROR "meshtensor::onednn was built here but the consumer could not use it")
endif()
# Linked with the GPU backend, the program still runs on threads unless asked for nccl.
if(EXISTS ${WORK_DIR}/build/consumer_cuda)
  run_step(${WORK_DIR}/build/consumer_cuda)
elseif(WITH_CUDA)
  message(FATAL_ERROR "meshtensor::cuda was built here but the consumer could not use it")
endif()
if(EXISTS ${WORK_DIR}/build/consumer_mpi AND MPIEXEC)
  run_step(${MPIEXEC} ${NP_FLAG} 2 ${WORK_DIR}/build/consumer_mpi)
elseif(MPIEXEC)
  message(FATAL_ERROR "meshtensor::mpi was built here but the consumer could not use it")
endif()
