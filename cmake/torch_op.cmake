# The torch op library libfp8attn_torch.so (src/torch_op/fwd_op.cpp): fp8attn::fwd in C++ on PyTorch's stable
# ABI. Optional: without it the Python package compiles the op on first import (an installed package, which
# ships the source: cmake/install.cmake, fp8attn/ops.py) or falls back to its ctypes op (and says so).
#
#   FP8ATTN_TORCH_OP      AUTO (default): build it when the Python below has torch >= 2.9 with CUDA;
#                         ON: the same, but fail when it cannot; OFF: never.
#   FP8ATTN_TORCH_PYTHON  the Python whose torch headers and libraries to build against (default: the
#                         environment variable of that name, else the Python CMake found).
#
# Under pip's build isolation (`pip install .`) the Python CMake found is the interpreter of the environment
# being installed into, run with PYTHONPATH pointing at the isolated build environment, which has no torch.
# When that finds no torch and FP8ATTN_TORCH_PYTHON was not given, the same interpreter is asked again without
# pip's PYTHONPATH / PYTHONNOUSERSITE: it then sees the target environment, so a user who has torch installed
# gets the op built at install time (~2 s of compiling on 2 cores). `pip install --no-build-isolation .` sees
# it directly.
#
# The op targets the stable ABI of torch 2.9 (TORCH_TARGET_VERSION), so one build loads under every torch
# >= 2.9; it uses no Python C API, so the Python version does not matter either.
set(FP8ATTN_TORCH_OP "AUTO" CACHE STRING "Build libfp8attn_torch.so (the C++ torch op): AUTO, ON or OFF")
set(_fp8attn_torch_python_default "${Python3_EXECUTABLE}")
if(DEFINED ENV{FP8ATTN_TORCH_PYTHON} AND NOT "$ENV{FP8ATTN_TORCH_PYTHON}" STREQUAL "")
  set(_fp8attn_torch_python_default "$ENV{FP8ATTN_TORCH_PYTHON}")
endif()
set(FP8ATTN_TORCH_PYTHON "${_fp8attn_torch_python_default}" CACHE FILEPATH
    "Python with torch >= 2.9 to build libfp8attn_torch.so against")

function(fp8attn_torch_op_skip reason)
  if(FP8ATTN_TORCH_OP STREQUAL "ON")
    message(FATAL_ERROR "fp8attn: FP8ATTN_TORCH_OP=ON but ${reason}")
  endif()
  if(SKBUILD)
    set(_then "the installed package compiles it on first import where it can, else uses its ctypes op")
  else()
    set(_then "scripts/build_torch_op.sh builds it later; else Python uses the ctypes op")
  endif()
  message(STATUS "fp8attn: not building libfp8attn_torch.so (${reason}); ${_then}")
endfunction()

# Sets _torch_out to "version;dir;full version;C++11 ABI;Python include dir;extension suffix" of the torch that
# `${FP8ATTN_TORCH_PYTHON} [launcher...]` imports (the last four for the eager entry, built for that torch and
# that Python).
function(fp8attn_probe_torch)
  execute_process(
    COMMAND ${ARGN} "${FP8ATTN_TORCH_PYTHON}" -c
            "import os, sysconfig, torch; print(torch.__version__.split('+')[0]); print(os.path.dirname(torch.__file__)); print(torch.__version__); print(int(torch._C._GLIBCXX_USE_CXX11_ABI)); print(sysconfig.get_paths()['include']); print(sysconfig.get_config_var('EXT_SUFFIX'))"
    OUTPUT_VARIABLE _out ERROR_QUIET RESULT_VARIABLE _rc OUTPUT_STRIP_TRAILING_WHITESPACE)
  string(REPLACE "\n" ";" _out "${_out}")
  list(LENGTH _out _lines)
  if(NOT _rc EQUAL 0 OR NOT _lines EQUAL 6)
    set(_out "")
  endif()
  set(_torch_out "${_out}" PARENT_SCOPE)
endfunction()

if(NOT FP8ATTN_TORCH_OP STREQUAL "OFF")
  fp8attn_probe_torch()
  set(_torch_where "")
  if(NOT _torch_out AND SKBUILD AND "${FP8ATTN_TORCH_PYTHON}" STREQUAL "${Python3_EXECUTABLE}"
     AND DEFINED ENV{PYTHONPATH})
    fp8attn_probe_torch(${CMAKE_COMMAND} -E env --unset=PYTHONPATH --unset=PYTHONNOUSERSITE)
    set(_torch_where " (the environment being installed into)")
  endif()
  if(NOT _torch_out)
    fp8attn_torch_op_skip("${FP8ATTN_TORCH_PYTHON} cannot import torch (set FP8ATTN_TORCH_PYTHON)")
  else()
    list(GET _torch_out 0 _torch_version)
    list(GET _torch_out 1 _torch_dir)
    if(_torch_version VERSION_LESS 2.9)
      fp8attn_torch_op_skip("torch ${_torch_version} at ${_torch_dir} predates the stable ABI op library (2.9)")
    elseif(NOT EXISTS "${_torch_dir}/include/torch/csrc/stable/library.h"
           OR NOT EXISTS "${_torch_dir}/lib/libtorch_cuda.so")
      fp8attn_torch_op_skip("torch ${_torch_version} at ${_torch_dir} lacks the stable headers or CUDA")
    else()
      add_library(fp8attn_torch SHARED src/torch_op/fwd_op.cpp)
      target_include_directories(fp8attn_torch SYSTEM PRIVATE "${_torch_dir}/include")
      target_compile_definitions(fp8attn_torch PRIVATE TORCH_TARGET_VERSION=0x0209000000000000)
      target_compile_options(fp8attn_torch PRIVATE -Wall -Wextra)
      # The aoti_torch_* C shims live in libtorch_cpu / libtorch_cuda, which torch has loaded by the time
      # Python loads this library; the C ABI comes from libfp8attn.so next to it ($ORIGIN).
      # (By name and -L, not by path or link directory: those would put this machine's torch into the RPATH.)
      target_link_options(fp8attn_torch PRIVATE "-L${_torch_dir}/lib")
      target_link_libraries(fp8attn_torch PRIVATE fp8attn torch_cpu torch_cuda)
      # Hidden visibility: it exports only fp8attn_torch_last_error_code (the op registers itself at load).
      # Installed (pip install ., cmake/install.cmake) next to libfp8attn.so, which $ORIGIN finds.
      set_target_properties(fp8attn_torch PROPERTIES CXX_VISIBILITY_PRESET hidden
                                                     INSTALL_RPATH "$ORIGIN")
      message(STATUS "fp8attn: building libfp8attn_torch.so against torch ${_torch_version} "
                     "(${_torch_dir}${_torch_where})")
      # The eager entry (src/torch_op/eager_entry.cpp): the op's C++ called from Python without the dispatcher.
      # It uses ATen and the Python C API, so it serves only the torch and the Python it was built for
      # (fp8attn/ops.py reads the torch it names from the file); elsewhere the package uses the op alone.
      list(GET _torch_out 2 _torch_full_version)
      list(GET _torch_out 3 _torch_cxx11_abi)
      list(GET _torch_out 4 _python_include)
      list(GET _torch_out 5 _python_ext_suffix)
      if(EXISTS "${_python_include}/Python.h" AND EXISTS "${_torch_dir}/lib/libtorch_python.so")
        add_library(fp8attn_eager MODULE src/torch_op/eager_entry.cpp)
        target_include_directories(fp8attn_eager SYSTEM PRIVATE "${_torch_dir}/include"
                                   "${_torch_dir}/include/torch/csrc/api/include" "${_python_include}")
        target_compile_definitions(fp8attn_eager PRIVATE _GLIBCXX_USE_CXX11_ABI=${_torch_cxx11_abi}
                                   FP8ATTN_EAGER_TORCH_VERSION="${_torch_full_version}")
        target_compile_options(fp8attn_eager PRIVATE -Wall -Wextra)
        target_link_options(fp8attn_eager PRIVATE "-L${_torch_dir}/lib")
        target_link_libraries(fp8attn_eager PRIVATE fp8attn torch_python torch_cpu torch_cuda c10)
        set_target_properties(fp8attn_eager PROPERTIES PREFIX "" OUTPUT_NAME fp8attn_eager
                              SUFFIX "${_python_ext_suffix}" CXX_VISIBILITY_PRESET hidden INSTALL_RPATH "$ORIGIN")
        message(STATUS "fp8attn: building the eager entry fp8attn_eager${_python_ext_suffix} for torch "
                       "${_torch_full_version}")
      else()
        message(STATUS "fp8attn: not building the eager entry (no Python.h in ${_python_include} or no "
                       "libtorch_python.so); eager calls go through torch's dispatcher")
      endif()
    endif()
  endif()
endif()
