// Values on the wire in fewer bytes (WireType, common/options.h): bfloat16
// (the top half of a float32:
// its 8 exponent bits, 7 of its mantissa) and IEEE 754 binary16 (5 exponent
// bits, 10 mantissa bits, subnormals). Shards keep float32 values and
// optimizer state; a table's `wire` settings (common/options.h) convert a
// pull's values on the shard and a push's on the worker, here.
//
// Conversions to the 16-bit types round to nearest, ties to even: a value
// that the type represents is kept exactly. NaN stays NaN (quiet, its sign
// and top payload bits kept) and Inf stays Inf; a finite value beyond the
// type's range becomes Inf (bfloat16 covers float32's range; binary16 ends
// at 65504). From the 16-bit types to float32 is exact (a binary16 NaN
// comes back quiet).
//
// Loops over plain arrays with no branches the compiler cannot turn into
// selects, so they vectorize (benchmarks/convert_bench measures them
// against memcpy of the float32 bytes).
#ifndef PS_COMMON_WIRE_FLOATS_H_
#define PS_COMMON_WIRE_FLOATS_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/options.h"
#include "common/status.h"

namespace ps {

// "fp32", "bf16", "fp16" (kWireTypeNames).
const char* WireTypeName(WireType type);
// Bytes of one value on the wire: 4 or 2.
inline size_t WireBytes(WireType type) { return type == WireType::kF32 ? 4 : 2; }

// c ? a : b as bit operations, which the compiler vectorizes where a
// conditional would stop it.
inline uint32_t SelectBits(bool c, uint32_t a, uint32_t b) {
  const uint32_t mask = 0u - static_cast<uint32_t>(c);
  return (a & mask) | (b & ~mask);
}

// One value.
inline uint16_t FloatToBf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const bool nan = (x & 0x7fffffffu) > 0x7f800000u;
  // Ties to even: add just under half an ulp, plus one when the kept part
  // is odd. A carry into the exponent is the correct rounding (up to Inf).
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>(SelectBits(nan, (x >> 16) | 0x40u, rounded));
}

inline float Bf16ToFloat(uint16_t h) { return std::bit_cast<float>(uint32_t{h} << 16); }

inline uint16_t FloatToF16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7fffffffu;
  // Normal binary16 (|f| >= 2^-14): rebias the exponent, round at bit 13
  // (ties to even: just under half, plus one when the kept part is odd).
  const uint32_t normal = (a + 0xfffu + ((a >> 13) & 1u) - (uint32_t{127 - 15} << 23)) >> 13;
  // Subnormal binary16 (|f| < 2^-14): adding 0.5, whose ulp is 2^-24 (the
  // binary16 subnormal step), makes the FPU round |f| to a multiple of
  // 2^-24, ties to even; the multiple is then the sum's low bits.
  const uint32_t subnormal =
      std::bit_cast<uint32_t>(std::bit_cast<float>(a) + 0.5f) - std::bit_cast<uint32_t>(0.5f);
  uint32_t out = SelectBits(a >= 0x38800000u, normal, subnormal);
  out = SelectBits(a >= 0x477ff000u, 0x7c00u, out);                           // >= 65520: Inf
  out = SelectBits(a > 0x7f800000u, 0x7e00u | ((a >> 13) & 0x3ffu), out);  // NaN, quiet
  return static_cast<uint16_t>(sign | out);
}

inline float F16ToFloat(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t em = h & 0x7fffu;
  // Normal and subnormal alike: the 15 bits as the bottom of a float32's
  // exponent and mantissa, scaled by 2^112 (exact: a power of two).
  const float finite = std::bit_cast<float>(em << 13) * 0x1p112f;
  // Inf, or NaN made quiet (as the F16C instruction does).
  const uint32_t special =
      0x7f800000u | ((em & 0x3ffu) << 13) | SelectBits(em > 0x7c00u, 0x400000u, 0u);
  return std::bit_cast<float>(sign |
                             SelectBits(em >= 0x7c00u, special, std::bit_cast<uint32_t>(finite)));
}

// Which loops the array conversions and the error feedback below run: the
// CPU's conversion instructions where it has them (F16C for binary16,
// AVX512-BF16 for bfloat16; the default), or the portable loops (built for
// AVX2 and baseline x86-64) everywhere. Both give the same bits; tests and
// convert_bench set it to check and to measure the two side by side.
enum class ConversionLoops { kInstructions, kPortable };
void SetConversionLoops(ConversionLoops loops);

// Arrays: out[i] = the conversion of in[i], for n values.
void FloatsToBf16(const float* in, size_t n, uint16_t* out);
void Bf16ToFloats(const uint16_t* in, size_t n, float* out);
void FloatsToF16(const float* in, size_t n, uint16_t* out);
void F16ToFloats(const uint16_t* in, size_t n, float* out);

// Writes n values in `type` to out (n * WireBytes(type) bytes), and reads
// them back (kF32: a copy).
void EncodeFloats(WireType type, const float* in, size_t n, void* out);
void DecodeFloats(WireType type, const void* in, size_t n, float* out);

// Error feedback for pushes in a 16-bit type: what rounding left out of one
// push is added to the next (Seide et al., 1-bit SGD; Karimireddy et al.,
// arXiv 1901.09847), so that the updates a shard applies sum, over many
// pushes, to the true gradients: after any number of pushes the applied
// sum and the true sum differ by the residual alone, less than one
// rounding step of the last value.
//
// Encode(g, r) with the residual r of those positions: v = g + r, sends
// round(v) and keeps r = v - round(v). A non-finite v is sent as it is
// (the shard refuses it, as a float32 push) and resets r to 0.
//
// OutOfRange (nothing written, residuals unchanged) when a finite value
// would become Inf in the type (binary16 beyond 65504), naming the value.
Status EncodeWithFeedback(WireType type, std::span<const float> gradient,
                          std::span<float> residual, void* out);

}  // namespace ps

#endif  // PS_COMMON_WIRE_FLOATS_H_
