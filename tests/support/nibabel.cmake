# For test scripts (cmake -P) that need nibabel: sets `result` to whether ${PYTHON} has it, and
# when not, prints why and the marker that makes ctest report the test as skipped.
function(require_nibabel result)
  execute_process(COMMAND ${PYTHON} -c "import nibabel" RESULT_VARIABLE status OUTPUT_QUIET ERROR_QUIET)
  if(status EQUAL 0)
    set(${result} TRUE PARENT_SCOPE)
  else()
    message("skipped: nibabel is not available to ${PYTHON} (Debian: python3-nibabel)")
    message("MESHTENSOR_SKIP")
    set(${result} FALSE PARENT_SCOPE)
  endif()
endfunction()
