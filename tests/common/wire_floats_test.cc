// bfloat16 and binary16 on the wire: every 16-bit pattern decodes to the
// value the formats define, representable values encode exactly, the rest
// round to nearest with ties to even, specials keep their kind, and error
// feedback keeps the applied sum of many pushes within one rounding step of
// the true sum.
#include "common/wire_floats.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/util/status_matchers.h"

namespace ps {
namespace {

// The value binary16 pattern h stands for, computed in double from the
// format's definition.
double F16Reference(uint16_t h) {
  const int sign = (h & 0x8000) ? -1 : 1;
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  if (e == 0x1f) {
    return m == 0 ? sign * std::numeric_limits<double>::infinity()
                  : std::numeric_limits<double>::quiet_NaN();
  }
  if (e == 0) return sign * std::ldexp(m, -24);
  return sign * std::ldexp(1024 + m, e - 25);
}

TEST(WireFloatsTest, EveryBinary16PatternDecodesToItsValue) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const double want = F16Reference(static_cast<uint16_t>(h));
    const float got = F16ToFloat(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << std::hex << h;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << std::hex << h;
      ASSERT_EQ(std::signbit(got), (h & 0x8000) != 0) << std::hex << h;
    }
  }
}

TEST(WireFloatsTest, EveryBfloat16PatternDecodesToTheTopHalfOfAFloat) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    ASSERT_EQ(std::bit_cast<uint32_t>(Bf16ToFloat(static_cast<uint16_t>(h))), h << 16);
  }
}

// Representable values come back exactly; NaN stays NaN (quiet), whatever
// its payload.
TEST(WireFloatsTest, RepresentableValuesEncodeExactly) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const auto p = static_cast<uint16_t>(h);
    const float f16 = F16ToFloat(p), bf16 = Bf16ToFloat(p);
    if (std::isnan(f16)) {
      EXPECT_TRUE(std::isnan(F16ToFloat(FloatToF16(f16)))) << std::hex << h;
    } else {
      ASSERT_EQ(FloatToF16(f16), p) << std::hex << h;
    }
    if (std::isnan(bf16)) {
      EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(bf16)))) << std::hex << h;
    } else {
      ASSERT_EQ(FloatToBf16(bf16), p) << std::hex << h;
    }
  }
}

// q is x rounded to nearest, ties to even, among the finite values and
// infinities of a 16-bit type (decode, the encoder itself): neither
// neighbour of q is nearer, and on a tie q's last bit is 0. Overflow goes
// to Inf past the largest value plus half an ulp.
void ExpectNearestEven(float x, uint16_t q, float (*decode)(uint16_t), uint16_t max_finite,
                       double overflow_at) {
  const double v = x;
  const double got = decode(q);
  if (std::fabs(v) >= overflow_at) {
    EXPECT_TRUE(std::isinf(got) && std::signbit(got) == std::signbit(x)) << x;
    return;
  }
  ASSERT_TRUE(std::isfinite(got)) << x;
  const uint16_t mag = q & 0x7fff;
  ASSERT_LE(mag, max_finite) << x;
  const double err = std::fabs(v - got);
  for (int step : {-1, 1}) {
    const int other = static_cast<int>(mag) + step;
    if (other < 0 || other > max_finite) continue;
    const double neighbour = std::copysign(
        static_cast<double>(decode(static_cast<uint16_t>(other))), static_cast<double>(x));
    const double other_err = std::fabs(v - neighbour);
    ASSERT_LE(err, other_err) << "x " << x << " rounded to " << got << ", " << neighbour
                              << " is nearer";
    if (err == other_err) {
      ASSERT_EQ(mag & 1, 0) << "x " << x << ": a tie goes to even";
    }
  }
}

TEST(WireFloatsTest, OtherValuesRoundToNearestEven) {
  std::mt19937 gen(11);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 300000; ++i) {
    // Random bit patterns cover every exponent, subnormals included.
    const float x = std::bit_cast<float>(bits(gen));
    if (std::isnan(x)) continue;
    ExpectNearestEven(x, FloatToBf16(x), Bf16ToFloat, 0x7f7f,
                      std::ldexp(256.0 - 0.5, 120));  // (2 - 2^-8) * 2^127 ... + half ulp
    ExpectNearestEven(x, FloatToF16(x), F16ToFloat, 0x7bff, 65520.0);
  }
  // Values near 1, where float32 has many values between two 16-bit ones.
  std::uniform_real_distribution<float> near_one(0.5f, 2.0f);
  for (int i = 0; i < 100000; ++i) {
    const float x = near_one(gen);
    ExpectNearestEven(x, FloatToBf16(x), Bf16ToFloat, 0x7f7f, std::ldexp(256.0 - 0.5, 120));
    ExpectNearestEven(x, FloatToF16(x), F16ToFloat, 0x7bff, 65520.0);
  }
}

TEST(WireFloatsTest, TiesBoundariesAndSpecials) {
  // bfloat16 keeps 7 mantissa bits: 1 + 2^-8 is halfway between 1 and
  // 1 + 2^-7 and goes to 1 (even); 1 + 3 * 2^-8 goes to 1 + 2^-6.
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + 0x1p-8f)), 1.0f);
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
  // binary16: 65504 is the largest; 65519 rounds to it, 65520 to Inf.
  EXPECT_EQ(F16ToFloat(FloatToF16(65519.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(F16ToFloat(FloatToF16(65520.0f))));
  EXPECT_TRUE(std::isinf(F16ToFloat(FloatToF16(-1e30f))));
  // Subnormals: 2^-25 ties to 0, a hair more is 2^-24, 3 * 2^-25 ties to 2^-23.
  EXPECT_EQ(F16ToFloat(FloatToF16(0x1p-25f)), 0.0f);
  EXPECT_EQ(F16ToFloat(FloatToF16(0x1.0002p-25f)), 0x1p-24f);
  EXPECT_EQ(F16ToFloat(FloatToF16(3 * 0x1p-25f)), 0x1p-23f);
  EXPECT_EQ(F16ToFloat(FloatToF16(0x1p-14f)), 0x1p-14f);  // the smallest normal
  // bfloat16 has float32's range: FLT_MAX rounds up to Inf, 1e38 stays finite.
  EXPECT_TRUE(std::isinf(Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::max()))));
  EXPECT_TRUE(std::isfinite(Bf16ToFloat(FloatToBf16(1e38f))));
  // Signs, zeros and specials.
  EXPECT_TRUE(std::signbit(F16ToFloat(FloatToF16(-0.0f))));
  EXPECT_TRUE(std::signbit(Bf16ToFloat(FloatToBf16(-0.0f))));
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float snan = std::numeric_limits<float>::signaling_NaN();
  for (float f : {inf, -inf}) {
    EXPECT_EQ(F16ToFloat(FloatToF16(f)), f);
    EXPECT_EQ(Bf16ToFloat(FloatToBf16(f)), f);
  }
  for (float f : {nan, -nan, snan}) {
    EXPECT_TRUE(std::isnan(F16ToFloat(FloatToF16(f))));
    EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(f))));
    // Quiet: the top mantissa bit is set.
    EXPECT_NE(FloatToF16(f) & 0x200, 0);
    EXPECT_NE(FloatToBf16(f) & 0x40, 0);
  }
}

// The array conversions, with the CPU's conversion instructions (F16C,
// AVX512-BF16, where it has them) and with the portable loops, give the
// one-value functions' bits: every 16-bit pattern, and float32 bit
// patterns of every kind, NaN payloads included.
class WireFloatsLoopsTest : public testing::TestWithParam<ConversionLoops> {
 protected:
  void SetUp() override { SetConversionLoops(GetParam()); }
  void TearDown() override { SetConversionLoops(ConversionLoops::kInstructions); }
};

INSTANTIATE_TEST_SUITE_P(Loops, WireFloatsLoopsTest,
                         testing::Values(ConversionLoops::kInstructions,
                                         ConversionLoops::kPortable),
                         [](const testing::TestParamInfo<ConversionLoops>& param) {
                           return param.param == ConversionLoops::kPortable
                                      ? std::string("Portable")
                                      : std::string("Instructions");
                         });

TEST_P(WireFloatsLoopsTest, ArrayConversionsGiveTheOneValueBits) {
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h <= 0xffff; ++h) all[h] = static_cast<uint16_t>(h);
  std::vector<float> f16(all.size()), bf16(all.size());
  F16ToFloats(all.data(), all.size(), f16.data());
  Bf16ToFloats(all.data(), all.size(), bf16.data());
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    ASSERT_EQ(std::bit_cast<uint32_t>(f16[h]),
              std::bit_cast<uint32_t>(F16ToFloat(static_cast<uint16_t>(h)))) << std::hex << h;
    ASSERT_EQ(std::bit_cast<uint32_t>(bf16[h]),
              std::bit_cast<uint32_t>(Bf16ToFloat(static_cast<uint16_t>(h)))) << std::hex << h;
  }
  std::mt19937 gen(13);
  std::uniform_int_distribution<uint32_t> bits;
  std::vector<float> in(200003);
  for (float& x : in) x = std::bit_cast<float>(bits(gen));
  in[0] = std::numeric_limits<float>::signaling_NaN();
  in[1] = -std::numeric_limits<float>::quiet_NaN();
  in[2] = 65519.0f;
  in[3] = 65520.0f;
  in[4] = 0x1p-25f;
  std::vector<uint16_t> to_f16(in.size()), to_bf16(in.size());
  FloatsToF16(in.data(), in.size(), to_f16.data());
  FloatsToBf16(in.data(), in.size(), to_bf16.data());
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(to_f16[i], FloatToF16(in[i])) << std::hex << std::bit_cast<uint32_t>(in[i]);
    ASSERT_EQ(to_bf16[i], FloatToBf16(in[i])) << std::hex << std::bit_cast<uint32_t>(in[i]);
  }
}

TEST(WireFloatsTest, ArraysMatchTheOneValueFunctions) {
  std::mt19937 gen(3);
  std::normal_distribution<float> n(0.0f, 100.0f);
  std::vector<float> in(1031);
  for (float& x : in) x = n(gen);
  in[7] = std::numeric_limits<float>::infinity();
  for (WireType type : {WireType::kF32, WireType::kBf16, WireType::kF16}) {
    SCOPED_TRACE(WireTypeName(type));
    std::vector<uint8_t> wire(in.size() * WireBytes(type));
    std::vector<float> back(in.size());
    EncodeFloats(type, in.data(), in.size(), wire.data());
    DecodeFloats(type, wire.data(), in.size(), back.data());
    for (size_t i = 0; i < in.size(); ++i) {
      const float want = type == WireType::kF32    ? in[i]
                         : type == WireType::kBf16 ? Bf16ToFloat(FloatToBf16(in[i]))
                                                   : F16ToFloat(FloatToF16(in[i]));
      ASSERT_EQ(back[i], want) << i;
    }
  }
}

// A gradient that plain rounding always rounds the same way: without
// feedback the applied sum drifts by N times the rounding error; with it,
// the applied sum stays within one rounding step of the true sum after
// every push.
TEST(WireFloatsTest, ErrorFeedbackKeepsTheAppliedSumWithinOneRoundingStep) {
  for (WireType type : {WireType::kBf16, WireType::kF16}) {
    SCOPED_TRACE(WireTypeName(type));
    const size_t n = 257;
    std::mt19937 gen(5);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> residual(n, 0.0f), g(n);
    std::vector<double> applied(n, 0.0), truth(n, 0.0), plain(n, 0.0);
    std::vector<uint16_t> wire(n);
    const int pushes = 2000;
    for (int t = 0; t < pushes; ++t) {
      for (size_t i = 0; i < n; ++i) {
        // Element 0: 1 plus 0.9 of half an ulp at 1 every time, which plain
        // rounding always rounds down.
        const float half_ulp = type == WireType::kBf16 ? 0x1p-8f : 0x1p-11f;
        g[i] = i == 0 ? 1.0f + 0.9f * half_ulp : u(gen) * (i % 3 == 0 ? 1e-3f : 1.0f);
      }
      ASSERT_OK(EncodeWithFeedback(type, g, residual, wire.data()));
      for (size_t i = 0; i < n; ++i) {
        const float sent = type == WireType::kBf16 ? Bf16ToFloat(wire[i]) : F16ToFloat(wire[i]);
        applied[i] += sent;
        truth[i] += g[i];
        plain[i] += type == WireType::kBf16 ? Bf16ToFloat(FloatToBf16(g[i]))
                                            : F16ToFloat(FloatToF16(g[i]));
      }
      for (size_t i = 0; i < n; ++i) {
        // One rounding step of a value of magnitude up to 2: an ulp at 2.
        const double step = type == WireType::kBf16 ? 0x1p-6 : 0x1p-9;
        ASSERT_LE(std::fabs(applied[i] - truth[i]), step)
            << "push " << t << " element " << i << ": applied " << applied[i] << ", true "
            << truth[i];
        // What is missing is exactly what the residual holds, to float32's
        // own rounding of g + r.
        ASSERT_NEAR(applied[i] + residual[i], truth[i], 1e-4 * (t + 1)) << i;
      }
    }
    // Without feedback element 0 loses its rounding error at every push.
    EXPECT_GT(std::fabs(plain[0] - truth[0]), 0.5) << "plain " << plain[0] << " true " << truth[0];
  }
}

// The feedback pass, with either loops, gives the bits of its one-value definition: v = g + r goes as
// round(v) and leaves r = v - round(v), 0 where v is not finite. Sums of
// every kind: subnormal ones (alone in a run and in runs of their own),
// NaN, Inf, ties; lengths that leave a tail.
TEST_P(WireFloatsLoopsTest, ErrorFeedbackArraysGiveTheOneValueBits) {
  for (WireType type : {WireType::kBf16, WireType::kF16}) {
    SCOPED_TRACE(WireTypeName(type));
    std::mt19937 gen(17);
    std::uniform_int_distribution<uint32_t> bits;
    const size_t n = 100003;
    std::vector<float> g(n), r(n);
    for (size_t i = 0; i < n; ++i) {
      g[i] = std::bit_cast<float>(bits(gen));
      r[i] = std::bit_cast<float>(bits(gen) & 0x807fffffu);  // a subnormal or zero residual
      if (type == WireType::kF16) {
        // Inside binary16's range, else the push is refused: magnitudes
        // from subnormal to 2^15, and the specials as they come.
        const uint32_t x = std::bit_cast<uint32_t>(g[i]);
        if ((x & 0x7f800000u) != 0x7f800000u) {
          g[i] = std::ldexp(std::bit_cast<float>((x & 0x807fffffu) | 0x3f800000u),
                            static_cast<int>(x % 44) - 29);
        }
      }
    }
    for (size_t i = 0; i < 32; ++i) r[i] = g[i] = 0x1p-140f * static_cast<float>(i);  // subnormals
    g[40] = std::numeric_limits<float>::quiet_NaN();
    g[41] = -std::numeric_limits<float>::infinity();
    g[42] = 1.0f + 0x1p-8f;  // a tie in bf16
    r[42] = 0.0f;
    std::vector<float> want_r = r, got_r = r;
    std::vector<uint16_t> want(n), got(n);
    for (size_t i = 0; i < n; ++i) {
      const float v = g[i] + want_r[i];
      want[i] = type == WireType::kBf16 ? FloatToBf16(v) : FloatToF16(v);
      const float back = type == WireType::kBf16 ? Bf16ToFloat(want[i]) : F16ToFloat(want[i]);
      want_r[i] = std::isfinite(v) ? v - back : 0.0f;
    }
    ASSERT_OK(EncodeWithFeedback(type, g, got_r, got.data()));
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(got[i], want[i]) << i << ": g " << g[i] << " r " << r[i];
      ASSERT_EQ(std::bit_cast<uint32_t>(got_r[i]), std::bit_cast<uint32_t>(want_r[i]))
          << i << ": g " << g[i] << " r " << r[i];
    }
  }
}

TEST(WireFloatsTest, ErrorFeedbackRefusesBinary16OverflowAndKeepsSpecials) {
  std::vector<float> g = {1.0f, 70000.0f, 2.0f}, residual = {0.25f, 0.0f, 0.5f};
  std::vector<uint16_t> wire(3, 0xabcd);
  const Status st = EncodeWithFeedback(WireType::kF16, g, residual, wire.data());
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("70000"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("bf16"), std::string::npos) << st.ToString();
  EXPECT_EQ(residual, (std::vector<float>{0.25f, 0.0f, 0.5f}));  // unchanged
  EXPECT_EQ(wire, (std::vector<uint16_t>(3, 0xabcd)));           // nothing written
  // bfloat16 takes it; NaN and Inf go as they are and reset their residuals.
  g = {70000.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()};
  residual = {0.0f, 3.0f, 3.0f};
  ASSERT_OK(EncodeWithFeedback(WireType::kBf16, g, residual, wire.data()));
  EXPECT_TRUE(std::isnan(Bf16ToFloat(wire[1])));
  EXPECT_TRUE(std::isinf(Bf16ToFloat(wire[2])));
  EXPECT_EQ(residual[1], 0.0f);
  EXPECT_EQ(residual[2], 0.0f);
  EXPECT_EQ(Bf16ToFloat(wire[0]) + residual[0], 70000.0f);
  // Sizes must match.
  std::vector<float> short_residual(2);
  EXPECT_EQ(EncodeWithFeedback(WireType::kBf16, g, short_residual, wire.data()).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps
