# Runs a program under mpirun that must fail (a rank throws, or the job cannot start), and checks
# that the job ends by itself, soon, with a non-zero status and a message matching EXPECT on stderr.
# Arguments: MPIEXEC, NP_FLAG, NP, PROGRAM, ARGS (a ;-list), EXPECT (a regular expression),
# MAX_SECONDS (optional: how soon the job must have ended), ONCE (optional: the message must not
# repeat, as from each rank).
string(TIMESTAMP started "%s")
execute_process(
  COMMAND ${MPIEXEC} ${NP_FLAG} ${NP} ${PROGRAM} ${ARGS}
  RESULT_VARIABLE status
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err
  TIMEOUT 120)
message("status: ${status}\nstdout:\n${out}\nstderr:\n${err}")
if(status MATCHES "timeout" OR status MATCHES "Process terminated")
  message(FATAL_ERROR "the job did not end: a rank was left waiting")
endif()
string(TIMESTAMP ended "%s")
math(EXPR seconds "${ended} - ${started}")
message("the job ended after ${seconds} s")
if(MAX_SECONDS AND seconds GREATER MAX_SECONDS)
  message(FATAL_ERROR "the job took ${seconds} s to end, more than ${MAX_SECONDS} s")
endif()
if(status EQUAL 0)
  message(FATAL_ERROR "the job ended with status 0 although it failed")
endif()
if(NOT err MATCHES "${EXPECT}")
  message(FATAL_ERROR "stderr does not say why the job failed (expected: ${EXPECT})")
endif()
string(REGEX MATCHALL "${EXPECT}" said "${err}")
list(LENGTH said times)
if(ONCE AND times GREATER 1)
  message(FATAL_ERROR "stderr says why the job failed ${times} times; once was expected")
endif()
