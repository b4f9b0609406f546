# CuTe/CUTLASS headers, pinned (FP8ATTN_CUTLASS_VERSION). The PyPI wheel nvidia-cutlass ships them under
# cutlass_library/source/include. Looked up in this order:
#
#   1. FP8ATTN_CUTLASS_DIR, when set: a CUTLASS include dir (holding cute/ and cutlass/).
#   2. The nvidia-cutlass package of the build's Python, when its version is the pinned one. This is how
#      `pip install .`, `pip wheel .` and an sdist build get them: pyproject.toml declares
#      nvidia-cutlass==<pin> a build requirement, so pip installs it into its isolated build environment,
#      whose Python scikit-build-core hands to CMake. The package is located with importlib.util.find_spec,
#      which does not import it (its __init__ would import numpy, scipy, cuda-python, ...).
#   3. The ignored folder .deps/cutlass-<pin>/ of the source tree, pip-installed there (no dependencies) by
#      the Python CMake found: the plain CMake build of scripts/test.sh.
find_package(CUDAToolkit REQUIRED)
if(FP8ATTN_CUTLASS_DIR)
  set(FP8ATTN_CUTLASS_INCLUDE ${FP8ATTN_CUTLASS_DIR})
  set(_fp8attn_cutlass_from "FP8ATTN_CUTLASS_DIR")
else()
  find_package(Python3 COMPONENTS Interpreter REQUIRED)
  unset(FP8ATTN_CUTLASS_INCLUDE)
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c
            "import importlib.util as u, importlib.metadata as m, os; s = u.find_spec('cutlass_library'); \
print(m.version('nvidia-cutlass')); print(os.path.join(list(s.submodule_search_locations)[0], 'source', 'include'))"
    OUTPUT_VARIABLE _cutlass_out ERROR_QUIET RESULT_VARIABLE _cutlass_rc OUTPUT_STRIP_TRAILING_WHITESPACE)
  string(REPLACE "\n" ";" _cutlass_out "${_cutlass_out}")
  list(LENGTH _cutlass_out _cutlass_lines)
  if(_cutlass_rc EQUAL 0 AND _cutlass_lines EQUAL 2)
    list(GET _cutlass_out 0 _cutlass_version)
    list(GET _cutlass_out 1 _cutlass_include)
    if(NOT _cutlass_version STREQUAL FP8ATTN_CUTLASS_VERSION)
      message(STATUS "fp8attn: ignoring nvidia-cutlass ${_cutlass_version} of ${Python3_EXECUTABLE} "
                     "(pinned: ${FP8ATTN_CUTLASS_VERSION})")
    elseif(NOT EXISTS ${_cutlass_include}/cute/tensor.hpp)
      message(STATUS "fp8attn: nvidia-cutlass of ${Python3_EXECUTABLE} has no headers at ${_cutlass_include}")
    else()
      set(FP8ATTN_CUTLASS_INCLUDE ${_cutlass_include})
      set(_fp8attn_cutlass_from "nvidia-cutlass ${_cutlass_version} of ${Python3_EXECUTABLE}")
    endif()
  endif()
  if(NOT FP8ATTN_CUTLASS_INCLUDE)
    set(_deps ${CMAKE_CURRENT_SOURCE_DIR}/.deps/cutlass-${FP8ATTN_CUTLASS_VERSION})
    set(FP8ATTN_CUTLASS_INCLUDE ${_deps}/cutlass_library/source/include)
    set(_fp8attn_cutlass_from ".deps/")
    if(NOT EXISTS ${FP8ATTN_CUTLASS_INCLUDE}/cute/tensor.hpp)
      message(STATUS "fp8attn: installing nvidia-cutlass==${FP8ATTN_CUTLASS_VERSION} headers into ${_deps}")
      execute_process(
        COMMAND ${Python3_EXECUTABLE} -m pip install --quiet --no-deps --no-compile --target ${_deps}
                nvidia-cutlass==${FP8ATTN_CUTLASS_VERSION}
        RESULT_VARIABLE _rc)
      if(NOT _rc EQUAL 0 OR NOT EXISTS ${FP8ATTN_CUTLASS_INCLUDE}/cute/tensor.hpp)
        message(FATAL_ERROR "fp8attn: could not install nvidia-cutlass==${FP8ATTN_CUTLASS_VERSION} "
                            "(pip exit ${_rc}) with ${Python3_EXECUTABLE}; pip-install it into that Python, "
                            "or set FP8ATTN_CUTLASS_DIR to a CUTLASS include dir")
      endif()
    endif()
  endif()
endif()
message(STATUS "fp8attn: CUTLASS headers at ${FP8ATTN_CUTLASS_INCLUDE} (${_fp8attn_cutlass_from})")
