// The activations the kernels share: the two GELUs of ops/activation.py (GeluTanh / GeluErf in activation.cc, and
// GemmBf16's epilogues) and SiLU-gating (DecodeLayer, MoeExperts).
// GELU: the tanh approximation x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)); the exact form
// 0.5 (x + |x| (1 - erfc(|x| / sqrt 2))) with Abramowitz & Stegun 7.1.26 for erfc (|error| <= 1.5e-7).
#pragma once

#include "common.h"
#include "team.h"

namespace ms_ocr {

constexpr float kGeluTanhScale = 1.5957691216057308f;  // 2 sqrt(2 / pi)
constexpr float kErfcP = 0.3275911f, kErfcC0 = 0.254829592f, kErfcC1 = -0.284496736f, kErfcC2 = 1.421413741f,
                kErfcC3 = -1.453152027f, kErfcC4 = 1.061405429f, kInvSqrt2 = 0.7071067811865476f;

inline float gelu_scalar(float x, bool erf_form) {
  if (!erf_form) return x / (1.f + std::exp(-kGeluTanhScale * (x + 0.044715f * x * x * x)));
  const float a = std::fabs(x) * kInvSqrt2, t = 1.f / (1.f + kErfcP * a);
  const float q = t * (kErfcC0 + t * (kErfcC1 + t * (kErfcC2 + t * (kErfcC3 + t * kErfcC4)))) * std::exp(-a * a);
  return 0.5f * (x + std::fabs(x) * (1.f - q));
}

template <bool kErf>
inline vf gelu_vec(vf v) {
  const vf one = vset(1.f);
  if (!kErf) return v / (one + vexp(vset(-kGeluTanhScale) * (vset(0.044715f) * (v * v * v) + v)));
  const vf av = vabs(v), a = av * vset(kInvSqrt2);
  const vf t = one / (vset(kErfcP) * a + one);
  vf p = t * vset(kErfcC4) + vset(kErfcC3);
  p = t * p + vset(kErfcC2);
  p = t * p + vset(kErfcC1);
  p = t * p + vset(kErfcC0);
  const vf q = (t * p) * vexp(-(a * a));
  return vset(0.5f) * (av * (one - q) + v);
}

template <bool kErf>
void gelu_range(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + kVL <= n; i += kVL) vstore(y + i, gelu_vec<kErf>(vload(x + i)));
  for (; i < n; ++i) y[i] = gelu_scalar(x[i], kErf);
}

// x <- silu(g) * u = g / (1 + e^-g) * u
inline void silu_mul(const float* g, const float* u, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + kVL <= n; i += kVL) {
    const vf gv = vload(g + i);
    vstore(out + i, gv / (vset(1.f) + vexp(-gv)) * vload(u + i));
  }
  for (; i < n; ++i) out[i] = g[i] / (1.f + std::exp(-g[i])) * u[i];
}

// g[i] = silu(g[i]) * u[i] for i < n over the team, a contiguous kVL-aligned share per thread (so each element's
// arithmetic is the same whatever the split), then the team's barrier.
inline void team_silu_mul(float* g, const float* u, int64_t n, const TeamCtx& team) {
  const auto [lo, hi] = team_share(n, kVL, team);
  silu_mul(g + lo, u + lo, g + lo, hi - lo);
  team.sync();
}

}  // namespace ms_ocr
