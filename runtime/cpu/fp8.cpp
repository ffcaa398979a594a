#include "runtime/cpu/fp8.h"

#include <algorithm>
#include <cmath>

namespace trainer::cpu {

uint8_t fp8_e4m3_from_float(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const float a = std::fabs(f);
  if (a >= kFp8E4m3Max) return sign | 0x7e;  // saturate (infinities too)
  if (a == 0.0f) return sign;
  // Quantum 2^(e-3) for a in [2^e, 2^(e+1)), e >= -6; subnormals share the quantum 2^-9. All the
  // scaling is by powers of two, so nearbyint (round to nearest even) sees the exact quotient.
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): a in [2^(e-1), 2^e)
  const int exponent = std::max(e - 1, -6);
  const auto q = static_cast<int>(std::nearbyint(std::ldexp(a, 3 - exponent)));  // 0 ... 16
  if (exponent == -6 && q < 8) return sign | static_cast<uint8_t>(q);            // subnormal
  const int biased = q == 16 ? exponent + 8 : exponent + 7;  // q == 16: rounded up to 2^(e+1)
  const int mantissa = q == 16 ? 0 : q - 8;
  return sign | static_cast<uint8_t>((biased << 3) | mantissa);
}

float float_from_fp8_e4m3(uint8_t bits) {
  const float sign = (bits & 0x80) ? -1.0f : 1.0f;
  const int biased = (bits >> 3) & 0xf, mantissa = bits & 0x7;
  if (biased == 0xf && mantissa == 0x7) return std::nanf("");
  if (biased == 0) return sign * std::ldexp(static_cast<float>(mantissa), -9);
  return sign * std::ldexp(static_cast<float>(8 + mantissa), biased - 10);
}

namespace {

// 448 / amax, or `fallback` when amax is 0 or not finite.
float scale_for(float amax, float fallback) {
  return amax > 0.0f && std::isfinite(amax) ? kFp8E4m3Max / amax : fallback;
}

}  // namespace

float fp8_call_scale(const float* s, float amax) {
  const float scale = s[kFp8AmaxHistory];
  return scale == 0.0f ? scale_for(amax, 1.0f) : scale;
}

void fp8_push_amax(float* s, float amax) {
  float* history = s;
  float& scale = s[kFp8AmaxHistory];
  std::copy_backward(history, history + kFp8AmaxHistory - 1, history + kFp8AmaxHistory);
  history[0] = amax;
  float top = 0.0f;  // fmax skips NaN, as the device's fmaxf does
  for (int i = 0; i < kFp8AmaxHistory; ++i) top = std::fmax(top, history[i]);
  scale = scale_for(top, scale == 0.0f ? 1.0f : scale);
  s[kFp8AmaxHistory + 1] = 1.0f / scale;
}

}  // namespace trainer::cpu
