# `cmake --install build --prefix P` puts under P:
#   bin/longseq                        the command-line tool
#   lib/liblongseq_*.a                 the libraries, and lib/cmake/longseq/ the CMake package:
#                                      find_package(longseq) gives longseq::longseq_core ...
#                                      longseq::longseq_train (examples/consumer uses it)
#   include/longseq/<folder>/*.hpp     the public headers
#   share/longseq/{presets,hardware}/  the data core::data_dir() finds beside bin/, and the
#   share/longseq/kjv-genesis-exodus.txt  default corpus (--data data/... resolves to it)
# scripts/ci_install.sh installs into a temporary prefix, builds the consumer and runs both.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(LONGSEQ_LIBRARIES longseq_core longseq_kernels longseq_comm longseq_attention longseq_model
    longseq_train longseq_plan longseq_tokenizer)
# CUDA builds: train reaches the GPU model (train/device.cpp), which needs the CUDA rooms.
if(LONGSEQ_WITH_CUDA)
  list(APPEND LONGSEQ_LIBRARIES longseq_kernels_cuda longseq_attention_cuda longseq_model_cuda)
endif()
install(TARGETS longseq_flags ${LONGSEQ_LIBRARIES} EXPORT longseqTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS longseq RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/src/longseq DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.hpp")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/data/presets ${PROJECT_SOURCE_DIR}/data/hardware
        DESTINATION ${CMAKE_INSTALL_DATADIR}/longseq)
install(FILES ${PROJECT_SOURCE_DIR}/data/kjv-genesis-exodus.txt
        DESTINATION ${CMAKE_INSTALL_DATADIR}/longseq)

install(EXPORT longseqTargets NAMESPACE longseq:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/longseq)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/longseqConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/longseqConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/longseq
                              PATH_VARS CMAKE_INSTALL_DATADIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/longseqConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/longseqConfig.cmake ${PROJECT_BINARY_DIR}/longseqConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/longseq)
