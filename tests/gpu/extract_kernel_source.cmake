# Writes the CUDA source held in a header's raw string literal (R"( ... )") to a file, so that a
# test can compile meshtensor's GPU kernels as host C++ and run them on the CPU.
# Arguments: HEADER, OUTPUT.
file(READ ${HEADER} text)
string(FIND "${text}" "R\"(" begin)
string(FIND "${text}" ")\"}" end REVERSE)
if(begin EQUAL -1 OR end EQUAL -1)
  message(FATAL_ERROR "${HEADER} holds no raw string literal R\"( ... )\"}")
endif()
math(EXPR begin "${begin} + 3")
math(EXPR length "${end} - ${begin}")
string(SUBSTRING "${text}" ${begin} ${length} source)
file(WRITE ${OUTPUT}.new "// Extracted from ${HEADER}\n${source}")
file(COPY_FILE ${OUTPUT}.new ${OUTPUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUTPUT}.new)
