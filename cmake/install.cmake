# Install rules: headers, the exported targets, a package config so that `find_package(meshtensor)`
# works after `cmake --install` (and from the build tree: meshtensor_DIR=<build>), a pkg-config
# file, and the license, citation and changelog.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(meshtensor_targets meshtensor)
if(MESHTENSOR_HAS_MPI)
  list(APPEND meshtensor_targets meshtensor_mpi)
endif()
if(MESHTENSOR_HAS_ONEDNN)
  list(APPEND meshtensor_targets meshtensor_onednn)
endif()
if(MESHTENSOR_HAS_NIFTI)
  list(APPEND meshtensor_targets meshtensor_nifti)
endif()
if(MESHTENSOR_HAS_CUDA)
  list(APPEND meshtensor_targets meshtensor_cuda)
endif()
install(TARGETS ${meshtensor_targets} EXPORT meshtensorTargets)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/meshtensor DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(meshtensor_config_dir ${CMAKE_INSTALL_DATADIR}/cmake/meshtensor)
install(EXPORT meshtensorTargets NAMESPACE meshtensor:: DESTINATION ${meshtensor_config_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/meshtensorConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/meshtensorConfig.cmake
                              INSTALL_DESTINATION ${meshtensor_config_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/meshtensorConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES ${PROJECT_BINARY_DIR}/meshtensorConfig.cmake ${PROJECT_SOURCE_DIR}/cmake/FindNIFTI.cmake
              ${PROJECT_SOURCE_DIR}/cmake/FindNCCL.cmake ${PROJECT_SOURCE_DIR}/cmake/FindCUDNN.cmake
              ${PROJECT_BINARY_DIR}/meshtensorConfigVersion.cmake
        DESTINATION ${meshtensor_config_dir})

# The same targets from the build tree, without installing: -Dmeshtensor_DIR=<this build>.
export(EXPORT meshtensorTargets NAMESPACE meshtensor:: FILE ${PROJECT_BINARY_DIR}/meshtensorTargets.cmake)
foreach(module FindNIFTI FindNCCL FindCUDNN)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/${module}.cmake ${PROJECT_BINARY_DIR}/${module}.cmake
                 COPYONLY)
endforeach()

# pkg-config, for builds without CMake: the core (threads transport); header-only, so in share/.
configure_file(${PROJECT_SOURCE_DIR}/cmake/meshtensor.pc.in ${PROJECT_BINARY_DIR}/meshtensor.pc
               @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/meshtensor.pc DESTINATION ${CMAKE_INSTALL_DATADIR}/pkgconfig)
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE ${PROJECT_SOURCE_DIR}/CITATION.cff
              ${PROJECT_SOURCE_DIR}/CHANGELOG.md ${PROJECT_SOURCE_DIR}/README.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR})
