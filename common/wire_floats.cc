#include "common/wire_floats.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>

namespace ps {

const char* WireTypeName(WireType type) {
  return NameOf(kWireTypeNames, type).data();  // the names are literals
}

namespace {

// The portable loops are built for AVX2 and for baseline x86-64, picked at
// load time (like the update loops of update_rule.cc); where the CPU has
// the conversion instructions (F16C, AVX512-BF16), the arrays use those.
[[gnu::target_clones("avx2", "default")]] void FloatsToBf16Portable(const float* __restrict in,
                                                                    size_t n,
                                                                    uint16_t* __restrict out) {
  for (size_t i = 0; i < n; ++i) out[i] = FloatToBf16(in[i]);
}

[[gnu::target_clones("avx2", "default")]] void Bf16ToFloatsPortable(const uint16_t* __restrict in,
                                                                    size_t n,
                                                                    float* __restrict out) {
  for (size_t i = 0; i < n; ++i) out[i] = Bf16ToFloat(in[i]);
}

#if defined(__x86_64__)
#define PS_AVX512_BF16 gnu::target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")

// vcvtneps2bf16 rounds to nearest even and quiets NaN as FloatToBf16 does,
// but flushes a subnormal input to zero: a run of 16 with a subnormal
// (vfpclassps) takes the portable rounding instead, so the results match
// FloatToBf16 bit for bit.
constexpr int kClassSubnormal = 0x20;
constexpr int kClassNotFinite = 0x01 | 0x08 | 0x10 | 0x80;  // QNaN, +Inf, -Inf, SNaN

[[PS_AVX512_BF16]] inline __m256i RoundToBf16(__m512 v) {
  return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
}

// (The zero-masked forms with every lane kept: the plain ones start from
// an undefined register, which g++ 12 warns of as maybe-uninitialized.)
[[PS_AVX512_BF16]] inline __m512 WidenBf16(__m256i h) {
  constexpr __mmask16 kAll = 0xffff;
  return _mm512_castsi512_ps(
      _mm512_maskz_slli_epi32(kAll, _mm512_maskz_cvtepu16_epi32(kAll, h), 16));
}

[[PS_AVX512_BF16]] void FloatsToBf16Hardware(const float* __restrict in, size_t n,
                                             uint16_t* __restrict out) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(in + i);
    if (_mm512_fpclass_ps_mask(v, kClassSubnormal) != 0) {
      for (size_t k = i; k < i + 16; ++k) out[k] = FloatToBf16(in[k]);
      continue;
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), RoundToBf16(v));
  }
  for (; i < n; ++i) out[i] = FloatToBf16(in[i]);
}

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

namespace {
std::atomic<bool> portable_only{false};  // SetConversionLoops(kPortable)
}  // namespace

void SetConversionLoops(ConversionLoops loops) {
  portable_only.store(loops == ConversionLoops::kPortable, std::memory_order_relaxed);
}

#if defined(__x86_64__)
namespace {
// Whether the loops may use F16C (with AVX2): the CPU has it (asked once).
bool HasF16c() {
  static const bool has = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2");
  return has && !portable_only.load(std::memory_order_relaxed);
}

// Whether they may use AVX512-BF16 (and the AVX-512 parts the loops use).
bool HasAvx512Bf16() {
  static const bool has =
      __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq");
  return has && !portable_only.load(std::memory_order_relaxed);
}
}  // namespace

void FloatsToBf16(const float* in, size_t n, uint16_t* out) {
  HasAvx512Bf16() ? FloatsToBf16Hardware(in, n, out) : FloatsToBf16Portable(in, n, out);
}

// (Widening bf16 is a shift: the AVX2 loop is as fast as AVX-512's, measured.)
void Bf16ToFloats(const uint16_t* in, size_t n, float* out) { Bf16ToFloatsPortable(in, n, out); }

void FloatsToF16(const float* in, size_t n, uint16_t* out) {
  HasF16c() ? FloatsToF16Hardware(in, n, out) : FloatsToF16Portable(in, n, out);
}

void F16ToFloats(const uint16_t* in, size_t n, float* out) {
  HasF16c() ? F16ToFloatsHardware(in, n, out) : F16ToFloatsPortable(in, n, out);
}
#else
void FloatsToBf16(const float* in, size_t n, uint16_t* out) { FloatsToBf16Portable(in, n, out); }
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

[[gnu::target_clones("avx2", "default")]] void Bf16FeedbackPortable(const float* __restrict g,
                                                                    float* __restrict r, size_t n,
                                                                    uint16_t* __restrict out) {
  FeedbackPass<FloatToBf16, Bf16ToFloat>(g, r, n, out);
}

#if defined(__x86_64__)
// FeedbackPass 16 values at a time with vcvtneps2bf16 (a run of 16 with a
// subnormal sum takes the portable pass, as FloatsToBf16Hardware does).
[[PS_AVX512_BF16]] void Bf16FeedbackHardware(const float* __restrict g, float* __restrict r,
                                             size_t n, uint16_t* __restrict out) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_add_ps(_mm512_loadu_ps(g + i), _mm512_loadu_ps(r + i));
    if (_mm512_fpclass_ps_mask(v, kClassSubnormal) != 0) {
      FeedbackPass<FloatToBf16, Bf16ToFloat>(g + i, r + i, 16, out + i);
      continue;
    }
    const __m256i q = RoundToBf16(v);
    const __mmask16 finite = static_cast<__mmask16>(~_mm512_fpclass_ps_mask(v, kClassNotFinite));
    _mm512_storeu_ps(r + i, _mm512_maskz_sub_ps(finite, v, WidenBf16(q)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), q);
  }
  FeedbackPass<FloatToBf16, Bf16ToFloat>(g + i, r + i, n - i, out + i);
}
#endif

void Bf16Feedback(const float* g, float* r, size_t n, uint16_t* out) {
#if defined(__x86_64__)
  if (HasAvx512Bf16()) return Bf16FeedbackHardware(g, r, n, out);
#endif
  Bf16FeedbackPortable(g, r, n, out);
}

[[gnu::target_clones("avx2", "default")]] void F16FeedbackPortable(const float* __restrict g,
                                                                   float* __restrict r, size_t n,
                                                                   uint16_t* __restrict out) {
  FeedbackPass<FloatToF16, F16ToFloat>(g, r, n, out);
}

#if defined(__x86_64__)
// FeedbackPass 8 values at a time with F16C (whose conversions are
// FloatToF16's and F16ToFloat's, subnormals included).
[[gnu::target("avx2,f16c")]] void F16FeedbackHardware(const float* __restrict g,
                                                      float* __restrict r, size_t n,
                                                      uint16_t* __restrict out) {
  const __m256i exponent = _mm256_set1_epi32(0x7f800000);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_add_ps(_mm256_loadu_ps(g + i), _mm256_loadu_ps(r + i));
    const __m128i q = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256i not_finite =
        _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(v), exponent), exponent);
    const __m256 residual = _mm256_sub_ps(v, _mm256_cvtph_ps(q));
    _mm256_storeu_ps(r + i, _mm256_andnot_ps(_mm256_castsi256_ps(not_finite), residual));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), q);
  }
  FeedbackPass<FloatToF16, F16ToFloat>(g + i, r + i, n - i, out + i);
}
#endif

void F16Feedback(const float* g, float* r, size_t n, uint16_t* out) {
#if defined(__x86_64__)
  if (HasF16c()) return F16FeedbackHardware(g, r, n, out);
#endif
  F16FeedbackPortable(g, r, n, out);
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
