# Finds NVIDIA's cuDNN (cudnn.h, libcudnn) and defines CUDNN::cudnn. cuDNN 9 ships no CMake
# package in the toolkit layout these machines use. Looks under CUDNN_ROOT, then the CUDA
# toolkit's directories, then the system paths. Sets CUDNN_VERSION from cudnn_version.h.
set(_cudnn_hints ${CUDNN_ROOT} $ENV{CUDNN_ROOT} $ENV{CUDNN_HOME} ${CUDAToolkit_ROOT}
                 $ENV{CUDA_HOME} ${CUDAToolkit_LIBRARY_ROOT} /usr/local/cuda)
find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${_cudnn_hints} ${CUDAToolkit_INCLUDE_DIRS}
          PATH_SUFFIXES include)
find_library(CUDNN_LIBRARY NAMES cudnn HINTS ${_cudnn_hints} ${CUDAToolkit_LIBRARY_DIR}
             PATH_SUFFIXES lib64 lib lib/x86_64-linux-gnu)
foreach(_cudnn_header cudnn_version.h cudnn.h)
  if(CUDNN_INCLUDE_DIR AND EXISTS "${CUDNN_INCLUDE_DIR}/${_cudnn_header}" AND NOT CUDNN_VERSION)
    file(STRINGS "${CUDNN_INCLUDE_DIR}/${_cudnn_header}" _cudnn_version_lines
         REGEX "^#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ")
    if(_cudnn_version_lines)
      foreach(part MAJOR MINOR PATCHLEVEL)
        string(REGEX MATCH "CUDNN_${part} ([0-9]+)" _ "${_cudnn_version_lines}")
        set(_cudnn_${part} ${CMAKE_MATCH_1})
      endforeach()
      set(CUDNN_VERSION "${_cudnn_MAJOR}.${_cudnn_MINOR}.${_cudnn_PATCHLEVEL}")
    endif()
  endif()
endforeach()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN REQUIRED_VARS CUDNN_LIBRARY CUDNN_INCLUDE_DIR
                                  VERSION_VAR CUDNN_VERSION)
if(CUDNN_FOUND AND NOT TARGET CUDNN::cudnn)
  add_library(CUDNN::cudnn UNKNOWN IMPORTED)
  set_target_properties(CUDNN::cudnn PROPERTIES
    IMPORTED_LOCATION "${CUDNN_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}")
endif()
mark_as_advanced(CUDNN_INCLUDE_DIR CUDNN_LIBRARY)
unset(_cudnn_hints)
