# Installation of libfp8attn.so, two ways:
#
#   cmake --install build --prefix PREFIX     the C/C++ package: PREFIX/lib/libfp8attn.so, the public headers
#                                             in PREFIX/include/fp8attn/, and the CMake package in
#                                             PREFIX/lib/cmake/fp8attn/ (find_package(fp8attn) -> fp8attn::fp8attn).
#                                             The build tree exports the same targets (export() below), so
#                                             -Dfp8attn_DIR=<build> works without installing.
#   pip install .  (SKBUILD)                  the wheel: libfp8attn.so and src/kernels.list inside the Python
#                                             package, next to its modules (python/fp8attn/_lib.py finds it),
#                                             and libfp8attn_torch.so next to it when cmake/torch_op.cmake
#                                             built it (torch >= 2.9 at build time; fp8attn/ops.py loads it
#                                             from the folder of libfp8attn.so). Always also the op's source
#                                             and the C headers it includes (fp8attn/_torch_op/), from which
#                                             fp8attn/ops.py compiles the op on first import when the wheel
#                                             has none (torch installed after fp8attn; cached per user).
include(CMakePackageConfigHelpers)

if(SKBUILD)
  install(TARGETS fp8attn LIBRARY DESTINATION fp8attn)
  if(TARGET fp8attn_torch)
    install(TARGETS fp8attn_torch LIBRARY DESTINATION fp8attn)
  endif()
  if(TARGET fp8attn_eager)
    install(TARGETS fp8attn_eager LIBRARY DESTINATION fp8attn)
  endif()
  install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/src/kernels.list DESTINATION fp8attn)
  install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/src/torch_op/fwd_op.cpp ${CMAKE_CURRENT_SOURCE_DIR}/src/torch_op/fwd_call.h
                ${CMAKE_CURRENT_SOURCE_DIR}/src/torch_op/eager_entry.cpp
          DESTINATION fp8attn/_torch_op)
  install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/include/fp8attn/c_api.h
                ${CMAKE_CURRENT_SOURCE_DIR}/include/fp8attn/export.h
                ${CMAKE_CURRENT_SOURCE_DIR}/include/fp8attn/params.h
          DESTINATION fp8attn/_torch_op/include/fp8attn)
  configure_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/_build_info.py.in
                 ${CMAKE_CURRENT_BINARY_DIR}/_build_info.py @ONLY)
  install(FILES ${CMAKE_CURRENT_BINARY_DIR}/_build_info.py DESTINATION fp8attn)
  return()
endif()

set(FP8ATTN_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/fp8attn)

install(TARGETS fp8attn EXPORT fp8attnTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES
          ${CMAKE_CURRENT_SOURCE_DIR}/include/fp8attn/c_api.h
          ${CMAKE_CURRENT_SOURCE_DIR}/include/fp8attn/export.h
          ${CMAKE_CURRENT_SOURCE_DIR}/include/fp8attn/fp8attn.h
          ${CMAKE_CURRENT_SOURCE_DIR}/include/fp8attn/params.h
          ${CMAKE_CURRENT_SOURCE_DIR}/include/fp8attn/status.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/fp8attn)
install(EXPORT fp8attnTargets NAMESPACE fp8attn:: DESTINATION ${FP8ATTN_INSTALL_CMAKEDIR})

configure_package_config_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/fp8attnConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/fp8attnConfig.cmake
                              INSTALL_DESTINATION ${FP8ATTN_INSTALL_CMAKEDIR})
# 0.x: a minor release may change the ABI (see FP8ATTN_ABI_VERSION in c_api.h), so only the same
# MAJOR.MINOR satisfies a request.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/fp8attnConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/fp8attnConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/fp8attnConfigVersion.cmake
        DESTINATION ${FP8ATTN_INSTALL_CMAKEDIR})

export(EXPORT fp8attnTargets NAMESPACE fp8attn:: FILE ${CMAKE_CURRENT_BINARY_DIR}/fp8attnTargets.cmake)
