# fp8attn: writes OUT (build_info.json, next to libfp8attn.so) with the commit the library is built from, so that
# a benchmark run on another machine records the library's commit rather than that machine's checkout (whose
# HEAD may be older than the build it was handed). Run at every build by the fp8attn_build_info target;
# rewritten only when its content changes. Outside a git checkout the commit is "unknown".
#   cmake -DSRC=<source dir> -DOUT=<file> -DHEAD_DIMS=<FP8ATTN_HEAD_DIMS> -P cmake/build_info.cmake
set(_commit "unknown")
set(_dirty false)
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SRC} rev-parse HEAD OUTPUT_VARIABLE _head
                  RESULT_VARIABLE _rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_rc EQUAL 0)
    set(_commit "${_head}")
    # Tracked files only: an untracked scratch file does not make the build differ from the commit.
    execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SRC} status --porcelain --untracked-files=no
                    OUTPUT_VARIABLE _status OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(NOT _status STREQUAL "")
      set(_dirty true)
    endif()
  endif()
endif()
set(_content "{\"commit\": \"${_commit}\", \"dirty\": ${_dirty}, \"head_dims\": \"${HEAD_DIMS}\"}\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" _old)
  if(_old STREQUAL _content)
    return()
  endif()
endif()
file(WRITE "${OUT}" "${_content}")
