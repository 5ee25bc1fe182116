# The layers of include/meshtensor/ depend one way (docs/ARCHITECTURE.md): a header includes
# meshtensor headers from its own folder and from folders below it, never above, and kernels/
# nothing from comm/. The layers above tensor/ reach a device only through tensors and kernels:
# they include nothing from device/ nor from a backend's folder of kernels/, and ops/ and nn/
# name no device (what comes through tensor/ no include rule sees). The examples use no detail::
# nor kernels:: and never wait on a device themselves. Run by ctest as
# `cmake -DROOT=<source dir> -P check_layers.cmake`.
cmake_policy(SET CMP0057 NEW)
set(layers core memory device comm kernels tensor autodiff ops nn io plan)
# Below in the order but kept apart: kernels compute on one block and know nothing of messages.
set(forbidden "kernels->comm")
set(above_devices autodiff ops nn io plan)
set(device_paths "device/" "kernels/cpu/" "kernels/cuda/")
set(failures "")

file(GLOB_RECURSE headers RELATIVE "${ROOT}/include/meshtensor" "${ROOT}/include/meshtensor/*.hpp")
foreach(header IN LISTS headers)
  string(REGEX MATCH "^[a-z_]+/" folder "${header}")
  if(NOT folder)
    continue()  # meshtensor.hpp, the umbrella header, includes everything
  endif()
  string(REPLACE "/" "" folder "${folder}")
  list(FIND layers "${folder}" level)
  if(level EQUAL -1)
    list(APPEND failures "${header}: folder ${folder} is in no layer of docs/ARCHITECTURE.md")
    continue()
  endif()
  file(STRINGS "${ROOT}/include/meshtensor/${header}" includes REGEX "^#include \"meshtensor/")
  foreach(line IN LISTS includes)
    string(REGEX REPLACE "^#include \"meshtensor/([a-z_]+)/.*" "\\1" target "${line}")
    list(FIND layers "${target}" target_level)
    if(target_level GREATER level)
      list(APPEND failures "${header} (layer ${folder}) includes ${target}/, a layer above it")
    endif()
    if("${folder}->${target}" IN_LIST forbidden)
      list(APPEND failures "${header} includes ${target}/, which ${folder}/ must not")
    endif()
    if(folder IN_LIST above_devices)
      foreach(path IN LISTS device_paths)
        if(line MATCHES "^#include \"meshtensor/${path}")
          list(APPEND failures "${header} (layer ${folder}) includes ${path}: devices are reached "
                               "through tensor/ and the families of kernels/")
        endif()
      endforeach()
    endif()
  endforeach()
endforeach()

# Device names in ops/ and nn/ code (comments aside).
file(GLOB_RECURSE op_headers "${ROOT}/include/meshtensor/ops/*.hpp" "${ROOT}/include/meshtensor/nn/*.hpp")
foreach(path IN LISTS op_headers)
  file(STRINGS "${path}" lines)
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "//.*" "" code "${line}")
    string(TOLOWER "${code}" code)
    if(code MATCHES "(gpu|cuda|cudnn|cublas|nccl|current_processor|device\\(\\))")
      string(REPLACE ";" "," line "${line}")
      list(APPEND failures "${path}: names a device in an op: ${line}")
    endif()
  endforeach()
endforeach()

# The environment is read in one place (core/environment.hpp, docs/LIBRARY.md's settings table);
# the examples change settings through Settings, never the environment.
file(GLOB_RECURSE library_headers "${ROOT}/include/meshtensor/*.hpp")
foreach(path IN LISTS library_headers)
  if(path MATCHES "core/environment.hpp$")
    continue()
  endif()
  file(STRINGS "${path}" lines REGEX "(getenv|setenv|putenv)")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "//.*" "" code "${line}")
    if(code MATCHES "(getenv|setenv|putenv)")
      string(REPLACE ";" "," line "${line}")
      list(APPEND failures "${path}: reads or sets the environment outside core/environment.hpp: ${line}")
    endif()
  endforeach()
endforeach()

# The examples: public API only (no detail::, no kernel calls of their own), no waits of their own.
file(GLOB_RECURSE example_sources "${ROOT}/examples/*.hpp" "${ROOT}/examples/*.cpp")
foreach(path IN LISTS example_sources)
  file(STRINGS "${path}" lines REGEX "(detail::|kernels::|wait_for_|setenv|putenv)")
  foreach(line IN LISTS lines)
    string(REPLACE ";" "," line "${line}")
    list(APPEND failures "${path}: ${line}")
  endforeach()
endforeach()

if(failures)
  list(JOIN failures "\n  " text)
  message(FATAL_ERROR "layering broken:\n  ${text}")
endif()
list(LENGTH headers count)
message(STATUS "${count} headers: every include goes down the layers")
