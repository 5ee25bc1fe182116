# Finds niftilib's NIfTI-2 I/O library (Debian: libnifti2-dev) and defines NIFTI::nifti2.
# Debian's own NIFTIConfig.cmake names files under /usr/lib that the package installs under the
# multiarch directory, and the command-line tools of another package, so it fails; this module
# looks for the header and the libraries directly.
find_path(NIFTI_INCLUDE_DIR nifti/nifti2_io.h)
find_library(NIFTI_nifti2_LIBRARY NAMES nifti2)
find_library(NIFTI_znz_LIBRARY NAMES znz)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NIFTI REQUIRED_VARS NIFTI_nifti2_LIBRARY NIFTI_znz_LIBRARY
                                  NIFTI_INCLUDE_DIR)
if(NIFTI_FOUND AND NOT TARGET NIFTI::nifti2)
  add_library(NIFTI::nifti2 UNKNOWN IMPORTED)
  # nifti2_io.h includes its neighbours (znzlib.h, nifti2.h) as <name>: their directory is the path.
  set_target_properties(NIFTI::nifti2 PROPERTIES
    IMPORTED_LOCATION "${NIFTI_nifti2_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${NIFTI_INCLUDE_DIR}/nifti"
    INTERFACE_LINK_LIBRARIES "${NIFTI_znz_LIBRARY}")
endif()
mark_as_advanced(NIFTI_INCLUDE_DIR NIFTI_nifti2_LIBRARY NIFTI_znz_LIBRARY)
