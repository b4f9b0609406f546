// fp8attn: the result of an API call. Every failure carries a message that names the argument and
// what was expected; the API never asserts or aborts on bad input.
#pragma once

#include <string>
#include <utility>

namespace fp8attn {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,  // the call is malformed (shape, stride, dtype, pointer, value)
  kNotSupported = 2,     // well-formed, but a feature fp8attn does not implement (E5M2, MLA, softcap...)
  kNotCompiled = 3,      // supported, but its kernel is not in this build (see FP8ATTN_HEAD_DIMS)
  kCudaError = 4,        // the CUDA runtime failed (no device, launch error...)
};

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return {}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

}  // namespace fp8attn
