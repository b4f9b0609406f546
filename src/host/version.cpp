// fp8attn: the version queries of the C ABI (c_api.h). FP8ATTN_VERSION_STRING comes from CMake's project
// VERSION (CMakeLists.txt), the one place the version is written.
#include "fp8attn/c_api.h"

#ifndef FP8ATTN_VERSION_STRING
#error "FP8ATTN_VERSION_STRING must be defined by the build (CMakeLists.txt: project VERSION)"
#endif

const char* fp8attn_version(void) { return FP8ATTN_VERSION_STRING; }

int fp8attn_abi_version(void) { return FP8ATTN_ABI_VERSION; }
