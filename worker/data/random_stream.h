// The counter-based random streams of the generated workloads
// (worker/data/generators.h, worker/data/ctr_data.h): every random quantity
// is a pure function of (seed, tag, index) through SplitMix64, never of a
// standard-library distribution, so generated data does not depend on the
// rank count, the compiler or the standard library (only on libm's
// exp/log/cos, which agree on glibc).
//
// Thread-compatible: a Stream is a value; the functions keep no state.
#ifndef PS_WORKER_DATA_RANDOM_STREAM_H_
#define PS_WORKER_DATA_RANDOM_STREAM_H_

#include <cmath>
#include <cstdint>
#include <numbers>

namespace ps {

// SplitMix64's finalizer: a bijective 64-bit mix.
inline uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

inline constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

// A SplitMix64 stream keyed by (seed, tag, index): counter-based, so any
// sample can be generated without generating the ones before it. Distinct
// tags keep the streams of different quantities independent even when
// their indices coincide.
class Stream {
 public:
  Stream(uint64_t seed, uint64_t tag, uint64_t index)
      : state_(Mix(Mix(seed + kGolden) ^ Mix(tag * kGolden + index))) {}

  uint64_t Next() {
    state_ += kGolden;
    return Mix(state_);
  }
  // Uniform in [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Standard normal by Box-Muller (one value per call, for simplicity).
  double Normal() {
    const double u1 = 1.0 - Uniform();  // (0, 1]: log is finite
    const double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  uint64_t state_;
};

// Draws from a Zipf law over 1..n (k has weight 1 / k^exponent) in constant
// time and memory for any n, by rejection-inversion (Hoermann and
// Derflinger, "Rejection-inversion to generate variates from monotone
// discrete distributions", 1996): invert the integral H of the continuous
// density h(x) = x^-exponent over [k - 1/2, k + 1/2) cells and accept the
// cell's k, or reject, with a test that is exact for every k; fewer than
// one draw in a few is rejected.
//
// Thread-compatible: constant after construction.
class ZipfSampler {
 public:
  // REQUIRES: n >= 1, exponent > 0 and finite.
  ZipfSampler(uint64_t n, double exponent)
      : n_(n),
        exponent_(exponent),
        integral_first_(H(1.5) - 1.0),
        integral_last_(H(static_cast<double>(n) + 0.5)),
        squeeze_(2.0 - HInverse(H(2.5) - h(2.0))) {}

  // A value in 1..n, from `stream`'s uniforms.
  uint64_t Sample(Stream& stream) const {
    for (;;) {
      const double u = integral_last_ + stream.Uniform() * (integral_first_ - integral_last_);
      const double x = HInverse(u);
      double k = std::floor(x + 0.5);
      if (k < 1) k = 1;
      if (k > static_cast<double>(n_)) k = static_cast<double>(n_);
      if (k - x <= squeeze_ || u >= H(k + 0.5) - h(k)) return static_cast<uint64_t>(k);
    }
  }

 private:
  // log(1 + t) / t and (exp(t) - 1) / t, accurate near t = 0 (exponent 1).
  static double Log1pOver(double t) {
    return std::abs(t) > 1e-8 ? std::log1p(t) / t : 1.0 - t / 2.0 + t * t / 3.0;
  }
  static double Expm1Over(double t) {
    return std::abs(t) > 1e-8 ? std::expm1(t) / t : 1.0 + t / 2.0 + t * t / 6.0;
  }
  // The density, its integral (x^(1 - e) - 1) / (1 - e), and the inverse.
  double h(double x) const { return std::exp(-exponent_ * std::log(x)); }
  double H(double x) const {
    const double log_x = std::log(x);
    return Expm1Over((1.0 - exponent_) * log_x) * log_x;
  }
  double HInverse(double y) const {
    return std::exp(Log1pOver((1.0 - exponent_) * y) * y);
  }

  const uint64_t n_;
  const double exponent_;
  const double integral_first_, integral_last_;
  const double squeeze_;
};

}  // namespace ps

#endif  // PS_WORKER_DATA_RANDOM_STREAM_H_
