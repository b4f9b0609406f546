// Test helpers for host-only checks: a described H200 and distinct fake device addresses (never dereferenced).
#pragma once

#include <cstdint>

#include "fp8attn/fp8attn.h"

namespace fp8attn_test {

inline fp8attn::DeviceInfo h200() {
  fp8attn::DeviceInfo d;
  d.cc_major = 9;
  d.cc_minor = 0;
  d.num_sms = 132;
  return d;
}

// A distinct fake device address per slot, 256-byte aligned like cudaMalloc's.
template <typename T = void>
T* fake(uintptr_t slot) {
  return reinterpret_cast<T*>(uintptr_t{0x7f0000000000} + slot * 0x10000000);
}

}  // namespace fp8attn_test
