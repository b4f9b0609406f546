// Parameterized gtest suites over named harness Cases (test_fwd_dense.cpp, test_kvcache.cpp):
//
//   std::vector<NamedCase> my_cases();                       // {"name", Case}
//   class MyMatrix : public NamedCaseTest {};
//   TEST_P(MyMatrix, MatchesReference) { Check(); }
//   INSTANTIATE_TEST_SUITE_P(My, MyMatrix, ::testing::ValuesIn(my_cases()), case_name);
//
// Each suite prints one summary line at its end: the case that came closest to the error bar, and the
// largest relative RMS error.
#pragma once

#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "harness.h"

namespace fp8attn_test {

struct NamedCase {
  std::string name;
  Case c;
};

// gtest prints a failing parameter with this: the whole description instead of raw bytes.
void PrintTo(const NamedCase& nc, std::ostream* os);

// The test name of a parameter: its NamedCase::name.
std::string case_name(const ::testing::TestParamInfo<NamedCase>& info);

struct HeadDims {
  int d, dv;
};

// Every supported (d, dv) pair, in src/kernels.list's order (generated head_dims.inc, see host/head_dims.h).
inline constexpr HeadDims kHeadDims[] = {
#define FP8ATTN_HEAD_DIM_PAIR(D, DV) {D, DV},
#include "head_dims.inc"
#undef FP8ATTN_HEAD_DIM_PAIR
};
inline constexpr int kNumHeadDims = int(sizeof(kHeadDims) / sizeof(kHeadDims[0]));

// "d128" when d == dv, else "d192x128".
std::string head_dims_label(const HeadDims& hd);

// Runs GetParam() through expect_case_passes; collects the closest approach to the error bar over a suite
// and prints it once at the end.
class NamedCaseTest : public ::testing::TestWithParam<NamedCase> {
 protected:
  static void TearDownTestSuite();
  void Check();

 private:
  // Shared by every suite deriving from this class; gtest runs suites one after another and each
  // suite's TearDownTestSuite resets them.
  static int cases_;
  static double closest_ratio_;
  static double largest_rel_rms_;
  static std::string closest_name_;
};

}  // namespace fp8attn_test
