# CuTe/CUTLASS headers, pinned. The PyPI wheel nvidia-cutlass ships them under
# cutlass_library/source/include; it is installed (no dependencies) into the ignored folder .deps/.
find_package(CUDAToolkit REQUIRED)
if(FP8ATTN_CUTLASS_DIR)
  set(FP8ATTN_CUTLASS_INCLUDE ${FP8ATTN_CUTLASS_DIR})
else()
  set(_deps ${CMAKE_CURRENT_SOURCE_DIR}/.deps/cutlass-${FP8ATTN_CUTLASS_VERSION})
  set(FP8ATTN_CUTLASS_INCLUDE ${_deps}/cutlass_library/source/include)
  if(NOT EXISTS ${FP8ATTN_CUTLASS_INCLUDE}/cute/tensor.hpp)
    find_package(Python3 COMPONENTS Interpreter REQUIRED)
    message(STATUS "fp8attn: installing nvidia-cutlass==${FP8ATTN_CUTLASS_VERSION} headers into ${_deps}")
    execute_process(
      COMMAND ${Python3_EXECUTABLE} -m pip install --quiet --no-deps --no-compile --target ${_deps}
              nvidia-cutlass==${FP8ATTN_CUTLASS_VERSION}
      RESULT_VARIABLE _rc)
    if(NOT _rc EQUAL 0 OR NOT EXISTS ${FP8ATTN_CUTLASS_INCLUDE}/cute/tensor.hpp)
      message(FATAL_ERROR "fp8attn: could not install nvidia-cutlass==${FP8ATTN_CUTLASS_VERSION} "
                          "(pip exit ${_rc}); set FP8ATTN_CUTLASS_DIR to a CUTLASS include dir")
    endif()
  endif()
endif()
message(STATUS "fp8attn: CUTLASS headers at ${FP8ATTN_CUTLASS_INCLUDE}")
