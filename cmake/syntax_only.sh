#!/bin/sh
# Compiler launcher for targets that only check that their sources compile (every header alone,
# the benchmarks under the tests): the compiler parses and checks each source, writing its
# dependency file, without generating code (most of a compile's time here), and an empty object
# stands for its output so that make sees the source done.
object=""
previous=""
for argument in "$@"; do
  [ "$previous" = "-o" ] && object=$argument
  previous=$argument
done
"$@" -fsyntax-only && : > "$object"
