# The torch op library libfp8attn_torch.so (src/torch_op/fwd_op.cpp): fp8attn::fwd in C++ on PyTorch's stable
# ABI. Optional: the Python package falls back to its ctypes op (and says so) without it.
#
#   FP8ATTN_TORCH_OP      AUTO (default): build it when the Python below has torch >= 2.9 with CUDA;
#                         ON: the same, but fail when it cannot; OFF: never.
#   FP8ATTN_TORCH_PYTHON  the Python whose torch headers and libraries to build against (default: the
#                         environment variable of that name, else the Python CMake found).
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
  message(STATUS "fp8attn: not building libfp8attn_torch.so (${reason}); Python will use the ctypes op")
endfunction()

if(NOT FP8ATTN_TORCH_OP STREQUAL "OFF")
  execute_process(
    COMMAND "${FP8ATTN_TORCH_PYTHON}" -c
            "import os, torch; print(torch.__version__.split('+')[0]); print(os.path.dirname(torch.__file__))"
    OUTPUT_VARIABLE _torch_out ERROR_QUIET RESULT_VARIABLE _torch_rc OUTPUT_STRIP_TRAILING_WHITESPACE)
  string(REPLACE "\n" ";" _torch_out "${_torch_out}")
  list(LENGTH _torch_out _torch_lines)
  if(NOT _torch_rc EQUAL 0 OR NOT _torch_lines EQUAL 2)
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
      message(STATUS "fp8attn: building libfp8attn_torch.so against torch ${_torch_version} (${_torch_dir})")
    endif()
  endif()
endif()
