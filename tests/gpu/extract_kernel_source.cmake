# Writes the CUDA source held in a header's raw string literal (R"( ... )") to a file, so that a
# test can compile meshtensor's GPU kernels as host C++ and run them on the CPU; with NAMES, also
# a file listing each kernel the source defines as MESHTENSOR_KERNEL(name), for the emulated GPU.
# Arguments: HEADER, OUTPUT, NAMES (optional).
file(READ ${HEADER} text)
string(FIND "${text}" "R\"(" begin)
string(FIND "${text}" ")\"}" end REVERSE)
if(begin EQUAL -1 OR end EQUAL -1)
  message(FATAL_ERROR "${HEADER} holds no raw string literal R\"( ... )\"}")
endif()
math(EXPR begin "${begin} + 3")
math(EXPR length "${end} - ${begin}")
string(SUBSTRING "${text}" ${begin} ${length} source)

function(write_if_changed path content)
  file(WRITE ${path}.new "${content}")
  file(COPY_FILE ${path}.new ${path} ONLY_IF_DIFFERENT)
  file(REMOVE ${path}.new)
endfunction()

write_if_changed(${OUTPUT} "// Extracted from ${HEADER}\n${source}")
if(NAMES)
  string(REGEX MATCHALL "extern \"C\" __global__ void [A-Za-z0-9_]+" kernels "${source}")
  if(NOT kernels)
    message(FATAL_ERROR "${HEADER} defines no extern \"C\" __global__ kernel")
  endif()
  set(list "// The kernels of ${HEADER}\n")
  foreach(kernel ${kernels})
    string(REGEX REPLACE ".* " "" name "${kernel}")
    string(APPEND list "MESHTENSOR_KERNEL(${name})\n")
  endforeach()
  write_if_changed(${NAMES} "${list}")
endif()
