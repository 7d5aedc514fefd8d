#include "common/wire_floats.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>

namespace ps {

const char* WireTypeName(WireType type) {
  return NameOf(kWireTypeNames, type).data();  // the names are literals
}

// The loops below are built for AVX2 and for baseline x86-64, picked at
// load time (like the update loops of update_rule.cc).
[[gnu::target_clones("avx2", "default")]] void FloatsToBf16(const float* __restrict in, size_t n,
                                                            uint16_t* __restrict out) {
  for (size_t i = 0; i < n; ++i) out[i] = FloatToBf16(in[i]);
}

[[gnu::target_clones("avx2", "default")]] void Bf16ToFloats(const uint16_t* __restrict in,
                                                            size_t n, float* __restrict out) {
  for (size_t i = 0; i < n; ++i) out[i] = Bf16ToFloat(in[i]);
}

namespace {

#if defined(__x86_64__)
// binary16 with the F16C instructions (vcvtps2ph rounds to nearest even,
// quiets NaN and saturates to Inf as FloatToF16 does), 8 values at a time.
[[gnu::target("avx2,f16c")]] void FloatsToF16Hardware(const float* __restrict in, size_t n,
                                                      uint16_t* __restrict out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = FloatToF16(in[i]);
}

[[gnu::target("avx2,f16c")]] void F16ToFloatsHardware(const uint16_t* __restrict in, size_t n,
                                                      float* __restrict out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = F16ToFloat(in[i]);
}
#endif

[[gnu::target_clones("avx2", "default")]] void FloatsToF16Portable(const float* __restrict in,
                                                                   size_t n,
                                                                   uint16_t* __restrict out) {
  for (size_t i = 0; i < n; ++i) out[i] = FloatToF16(in[i]);
}

[[gnu::target_clones("avx2", "default")]] void F16ToFloatsPortable(const uint16_t* __restrict in,
                                                                   size_t n,
                                                                   float* __restrict out) {
  for (size_t i = 0; i < n; ++i) out[i] = F16ToFloat(in[i]);
}

}  // namespace

#if defined(__x86_64__)
namespace {
// Whether this CPU has F16C (and AVX2), asked once.
bool HasF16c() {
  static const bool has = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2");
  return has;
}
}  // namespace

void FloatsToF16(const float* in, size_t n, uint16_t* out) {
  HasF16c() ? FloatsToF16Hardware(in, n, out) : FloatsToF16Portable(in, n, out);
}

void F16ToFloats(const uint16_t* in, size_t n, float* out) {
  HasF16c() ? F16ToFloatsHardware(in, n, out) : F16ToFloatsPortable(in, n, out);
}
#else
void FloatsToF16(const float* in, size_t n, uint16_t* out) { FloatsToF16Portable(in, n, out); }
void F16ToFloats(const uint16_t* in, size_t n, float* out) { F16ToFloatsPortable(in, n, out); }
#endif

void EncodeFloats(WireType type, const float* in, size_t n, void* out) {
  switch (type) {
    case WireType::kF32:
      if (n > 0) std::memcpy(out, in, n * sizeof(float));
      return;
    case WireType::kBf16:
      return FloatsToBf16(in, n, static_cast<uint16_t*>(out));
    case WireType::kF16:
      return FloatsToF16(in, n, static_cast<uint16_t*>(out));
  }
}

void DecodeFloats(WireType type, const void* in, size_t n, float* out) {
  switch (type) {
    case WireType::kF32:
      if (n > 0) std::memcpy(out, in, n * sizeof(float));
      return;
    case WireType::kBf16:
      return Bf16ToFloats(static_cast<const uint16_t*>(in), n, out);
    case WireType::kF16:
      return F16ToFloats(static_cast<const uint16_t*>(in), n, out);
  }
}

namespace {

// Whether a float is finite, as a bit test the loops vectorize.
inline bool Finite(float v) {
  return (std::bit_cast<uint32_t>(v) & 0x7f800000u) != 0x7f800000u;
}

// One pass: v = g + r, out = round(v), r = v - round(v) (0 where v is not
// finite).
template <uint16_t (*Round)(float), float (*Back)(uint16_t)>
inline void FeedbackPass(const float* __restrict g, float* __restrict r, size_t n,
                         uint16_t* __restrict out) {
  for (size_t i = 0; i < n; ++i) {
    const float v = g[i] + r[i];
    const uint16_t q = Round(v);
    r[i] = std::bit_cast<float>(SelectBits(Finite(v), std::bit_cast<uint32_t>(v - Back(q)), 0u));
    out[i] = q;
  }
}

[[gnu::target_clones("avx2", "default")]] void Bf16Feedback(const float* __restrict g,
                                                            float* __restrict r, size_t n,
                                                            uint16_t* __restrict out) {
  FeedbackPass<FloatToBf16, Bf16ToFloat>(g, r, n, out);
}

[[gnu::target_clones("avx2", "default")]] void F16Feedback(const float* __restrict g,
                                                           float* __restrict r, size_t n,
                                                           uint16_t* __restrict out) {
  FeedbackPass<FloatToF16, F16ToFloat>(g, r, n, out);
}

// Whether any g + r is finite and at least `limit` (> 0) in magnitude: the
// largest finite magnitude as bits (their order is the floats' order).
[[gnu::target_clones("avx2", "default")]] bool AnyAtLeast(const float* __restrict g,
                                                          const float* __restrict r, size_t n,
                                                          float limit) {
  uint32_t largest = 0;
  for (size_t i = 0; i < n; ++i) {
    const float v = g[i] + r[i];
    const uint32_t magnitude = SelectBits(Finite(v), std::bit_cast<uint32_t>(v) & 0x7fffffffu, 0u);
    largest = std::max(largest, magnitude);
  }
  return largest >= std::bit_cast<uint32_t>(limit);
}

// binary16's overflow threshold: 65504 plus half an ulp rounds to Inf.
constexpr float kF16Overflow = 65520.0f;

}  // namespace

Status EncodeWithFeedback(WireType type, std::span<const float> gradient,
                          std::span<float> residual, void* out) {
  const size_t n = gradient.size();
  if (residual.size() != n) {
    return InvalidArgumentError("error feedback: " + std::to_string(residual.size()) +
                                " residuals for " + std::to_string(n) + " values");
  }
  auto* q = static_cast<uint16_t*>(out);
  switch (type) {
    case WireType::kF32:
      EncodeFloats(type, gradient.data(), n, out);
      return Status::Ok();
    case WireType::kBf16:
      Bf16Feedback(gradient.data(), residual.data(), n, q);
      return Status::Ok();
    case WireType::kF16:
      break;
  }
  // A finite value beyond binary16's range is refused before anything
  // changes (a quick pass: no value is written).
  if (AnyAtLeast(gradient.data(), residual.data(), n, kF16Overflow)) {
    size_t i = 0;
    while (!(Finite(gradient[i] + residual[i]) &&
             std::fabs(gradient[i] + residual[i]) >= kF16Overflow)) {
      ++i;
    }
    return OutOfRangeError("value " + std::to_string(gradient[i] + residual[i]) + " (index " +
                           std::to_string(i) + ", with its residual) is beyond fp16's range "
                           "(largest 65504); push in bf16, which has float32's range, or scale "
                           "the loss down");
  }
  F16Feedback(gradient.data(), residual.data(), n, q);
  return Status::Ok();
}

}  // namespace ps
