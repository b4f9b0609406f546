// Parameterized suites over named harness Cases (see case_suite.h).
#include "case_suite.h"

#include <cstdio>

namespace fp8attn_test {

void PrintTo(const NamedCase& nc, std::ostream* os) { *os << nc.c.describe(); }

std::string case_name(const ::testing::TestParamInfo<NamedCase>& info) { return info.param.name; }

std::string head_dims_label(const HeadDims& hd) {
  return hd.d == hd.dv ? "d" + std::to_string(hd.d) : "d" + std::to_string(hd.d) + "x" + std::to_string(hd.dv);
}

int NamedCaseTest::cases_ = 0;
double NamedCaseTest::closest_ratio_ = 0;
double NamedCaseTest::largest_rel_rms_ = 0;
std::string NamedCaseTest::closest_name_;

void NamedCaseTest::TearDownTestSuite() {
  if (cases_ == 0) return;
  std::printf("[  summary ] %d cases checked; closest to the bar: %s at %.0f%% of it; largest rel RMS %.3f%%\n",
              cases_, closest_name_.c_str(), 100 * closest_ratio_, 100 * largest_rel_rms_);
  cases_ = 0;
  closest_ratio_ = largest_rel_rms_ = 0;
}

void NamedCaseTest::Check() {
  Metrics m;
  expect_case_passes(GetParam().c, &m);
  if (m.checked_elements == 0) return;  // skipped, or nothing to compare
  ++cases_;
  const double ratio = m.bound > 0 ? m.max_abs_err / m.bound : 0;
  if (ratio >= closest_ratio_) {
    closest_ratio_ = ratio;
    closest_name_ = GetParam().name;
  }
  if (m.rel_rms > largest_rel_rms_) largest_rel_rms_ = m.rel_rms;
}

}  // namespace fp8attn_test
