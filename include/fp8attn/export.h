/*
 * fp8attn: FP8ATTN_API marks what libfp8attn.so exports. The library is compiled with hidden visibility
 * (-fvisibility=hidden), so only the declarations in include/fp8attn/ that carry this macro (the C ABI and
 * the public C++ API) are dynamic symbols; internals, and the static CUDA runtime, stay private. This keeps
 * the ABI what the headers say, and keeps a statically linked libstdc++ (or any other copy of a library
 * the process also loads) from interposing on the host's. tests/check_exports.py holds the build to it.
 */
#ifndef FP8ATTN_EXPORT_H_
#define FP8ATTN_EXPORT_H_

#if defined(__GNUC__) || defined(__clang__)
#define FP8ATTN_API __attribute__((visibility("default")))
#else
#define FP8ATTN_API
#endif

#endif /* FP8ATTN_EXPORT_H_ */
