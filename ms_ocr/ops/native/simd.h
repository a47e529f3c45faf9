// The vector layer every kernel is written over (the role of ggml's simd-mappings.h): `vf`, a GCC/Clang vector of
// kVL floats as wide as the build's widest SIMD level (the table below: 64 bytes with AVX-512, 32 with AVX2+FMA, 16
// with aarch64 NEON or x86 SSE2; 16 elsewhere, where the compiler lowers it to scalar code), the register count the
// kernels size their tiles from, and the operations a vector type has no operator for. Arithmetic is the vector
// operators (`a * b + c` becomes an FMA through -ffp-contract=fast, which the build passes); the operations whose
// best form differs per ISA (the bf16 and int8 loads, FMA, the masked tail load, the horizontal sum, holding a value
// in a register) have their bodies in arch/x86/simd.h and arch/arm/simd.h, and the portable bodies below serve
// every other level.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__AVX512F__)
#define MS_OCR_VBYTES 64
#define MS_OCR_VREGS 32
#define MS_OCR_ISA "avx512"
#elif defined(__AVX2__) && defined(__FMA__)
#define MS_OCR_VBYTES 32
#define MS_OCR_VREGS 16
#define MS_OCR_ISA "avx2"
#elif defined(__aarch64__) && defined(__ARM_NEON)
#define MS_OCR_VBYTES 16
#define MS_OCR_VREGS 32
#define MS_OCR_ISA "neon"
#elif defined(__SSE2__)
#define MS_OCR_VBYTES 16
#define MS_OCR_VREGS 16
#define MS_OCR_ISA "sse2"
#else
#define MS_OCR_VBYTES 16
#define MS_OCR_VREGS 16
#define MS_OCR_ISA "scalar"
#endif

namespace ms_ocr {

constexpr int kVL = MS_OCR_VBYTES / 4;  // floats per vector
constexpr int kVRegs = MS_OCR_VREGS;     // vector registers the tiles may fill
typedef float vf __attribute__((vector_size(MS_OCR_VBYTES)));
typedef int32_t vi __attribute__((vector_size(MS_OCR_VBYTES)));

typedef uint16_t bf16;  // a bfloat16's bits
typedef uint16_t vh __attribute__((vector_size(MS_OCR_VBYTES / 2)));  // kVL bfloat16s
typedef uint32_t vu __attribute__((vector_size(MS_OCR_VBYTES)));
typedef int8_t vq __attribute__((vector_size(MS_OCR_VBYTES / 4)));  // kVL int8s

inline vf vload(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
// kVL bfloat16s widened to floats: zero-extend and shift into the high half; exact. The arch loads spell out the
// one instruction pair each level has (vpmovzxwd from memory + vpslld; NEON shll #16): GCC 12 lowers the
// generic __builtin_convertvector, at AVX2 and AVX-512 alike, to two half-width zero-extends, a byte shift and
// an insert per vector, which made the bf16 decode products shuffle-bound (Zen 3, the head's one-row product:
// 10.7 ms in bf16 against 12.3 ms in fp32; 7.9 ms with this load).
inline vf widen(vh h) { return (vf)(__builtin_convertvector(h, vu) << 16); }

// The portable bodies of the per-ISA operations (declared below for every level; the arch headers take these where
// a level has no better form).
namespace portable {
inline vf load_bf16(const bf16* p) {
  vh h;
  std::memcpy(&h, p, sizeof h);
  return widen(h);
}
inline vf load_int8(const int8_t* p) {
  vq q;
  std::memcpy(&q, p, sizeof q);
  return __builtin_convertvector(q, vf);
}
inline vf fma(vf a, vf b, vf c) { return a * b + c; }
inline vf load_tail(const float* p, int64_t n) {
  vf v = {};
  for (int64_t i = 0; i < n; ++i) v[i] = p[i];
  return v;
}
inline float sum(vf v) {
  float s = 0.f;
  for (int i = 0; i < kVL; ++i) s += v[i];
  return s;
}
}  // namespace portable

}  // namespace ms_ocr

// Per ISA, in namespace ms_ocr:
//   vf vload(const bf16*)             kVL bfloat16s widened (exact)
//   vf vload(const int8_t*)           kVL int8s (weight-only int8, --quantize int8) as floats: sign-extend and
//                                     convert; exact (the scale is applied to each dot product afterwards)
//   vf vfma(vf a, vf b, vf c)         a * b + c with one rounding, spelled as the ISA's FMA: contraction alone is not
//                                     enough where results must not depend on the build's -mtune (GCC's Zen tuning
//                                     splits an FMA whose accumulator is a loop's only dependency chain into a
//                                     multiply and an add, so the same loop over fp32 and bf16 weights rounded
//                                     differently)
//   vf vload_tail(const float*, n)    the first n (< kVL) floats at p, the other lanes zero; never reads past p + n
//   float vsum(vf)                    the horizontal sum
//   void in_register(vf&)             makes the compiler hold v in a vector register from here on (an empty asm that
//                                     "changes" it), so that it cannot fold the load that produced v into each
//                                     instruction using it
#if defined(__x86_64__) || defined(__i386__)
#include "arch/x86/simd.h"
#elif defined(__aarch64__)
#include "arch/arm/simd.h"
#else
namespace ms_ocr {
inline vf vload(const bf16* p) { return portable::load_bf16(p); }
inline vf vload(const int8_t* p) { return portable::load_int8(p); }
inline vf vfma(vf a, vf b, vf c) { return portable::fma(a, b, c); }
inline vf vload_tail(const float* p, int64_t n) { return portable::load_tail(p, n); }
inline float vsum(vf v) { return portable::sum(v); }
inline void in_register(vf& v) { (void)v; }
}  // namespace ms_ocr
#endif

namespace ms_ocr {

inline float to_float(bf16 b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline float to_float(float f) { return f; }
// fp32 -> bf16 rounded to nearest, ties to even (NaN stays NaN), as torch / MindSpore convert.
inline uint16_t round_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline void vstore(float* p, vf v) { std::memcpy(p, &v, sizeof v); }
inline vf vset(float a) { return a - vf{}; }  // (not vf{} + a: 0 + a is no identity for a = -0)
inline vf vmax(vf a, vf b) { return a > b ? a : b; }
inline vf vmin(vf a, vf b) { return a < b ? a : b; }
inline vf vabs(vf a) { return (vf)((vi)a & 0x7fffffff); }

inline vf vload_tail(const bf16* p, int64_t n) {
  vh h = {};
  for (int64_t i = 0; i < n; ++i) h[i] = p[i];
  return widen(h);
}
inline vf vload_tail(const int8_t* p, int64_t n) {
  vf v = {};
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(p[i]);
  return v;
}

// e^x (Cephes' expf polynomial; ~1 ulp), lanes clamped to [-87.3, 88]: the softmaxes, SiLU and the GELUs.
inline vf vexp(vf x) {
  x = vmin(vmax(x, vset(-87.3f)), vset(88.f));
  const vf magic = vset(12582912.f);  // 1.5 * 2^23: adding it rounds to an integer (to nearest)
  const vf fx = (x * vset(1.44269504088896341f) + magic) - magic;
  vf r = x - fx * vset(0.693359375f);
  r = r - fx * vset(-2.12194440e-4f);
  vf p = vset(1.9875691500E-4f);
  p = p * r + vset(1.3981999507E-3f);
  p = p * r + vset(8.3334519073E-3f);
  p = p * r + vset(4.1665795894E-2f);
  p = p * r + vset(1.6666665459E-1f);
  p = p * r + vset(5.0000001201E-1f);
  const vf y = (p * r) * r + (r + vset(1.f));
  const vi e = (__builtin_convertvector(fx, vi) + 127) << 23;  // 2^fx, fx in [-126, 127]
  return y * (vf)e;
}

// a . b over n floats (b fp32, bf16 or int8), kVL lanes of FMAs then the horizontal sum
template <typename B>
float dot(const float* a, const B* b, int64_t n) {
  vf acc = {};
  int64_t i = 0;
  for (; i + kVL <= n; i += kVL) acc = vfma(vload(a + i), vload(b + i), acc);
  if (i < n) acc = vfma(vload_tail(a + i, n - i), vload_tail(b + i, n - i), acc);
  return vsum(acc);
}

}  // namespace ms_ocr
