# Runs the rank-throws program under mpirun and checks that the job ends by itself, with a
# non-zero status and the failing rank's message. Arguments: MPIEXEC, NP_FLAG, PROGRAM.
execute_process(
  COMMAND ${MPIEXEC} ${NP_FLAG} 4 ${PROGRAM}
  RESULT_VARIABLE status
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err
  TIMEOUT 60)
message("status: ${status}\nstdout:\n${out}\nstderr:\n${err}")
if(status MATCHES "timeout" OR status MATCHES "Process terminated")
  message(FATAL_ERROR "the job did not end: a rank was left waiting")
endif()
if(status EQUAL 0)
  message(FATAL_ERROR "the job ended with status 0 although a rank threw")
endif()
if(NOT err MATCHES "error on processor 2 of 4: deliberate failure on one rank")
  message(FATAL_ERROR "the failing rank's message is missing from stderr")
endif()
