// The x86 bodies of the vector layer's per-ISA operations (listed in simd.h, which includes this file): AVX-512 and
// AVX2 intrinsics; an SSE2 build (x86-64-v2) takes the portable bodies.
#pragma once

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

namespace ms_ocr {

inline vf vload(const bf16* p) {
#if defined(__AVX512F__)
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
#elif defined(__AVX2__)
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
#else
  return portable::load_bf16(p);
#endif
}

inline vf vload(const int8_t* p) {
#if defined(__AVX512F__)
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#elif defined(__AVX2__)
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
#else
  return portable::load_int8(p);
#endif
}

inline vf vfma(vf a, vf b, vf c) {
#if defined(__AVX512F__)
  return _mm512_fmadd_ps(a, b, c);
#elif defined(__AVX2__)
  return _mm256_fmadd_ps(a, b, c);
#else
  return portable::fma(a, b, c);
#endif
}

inline vf vload_tail(const float* p, int64_t n) {
#if defined(__AVX512F__)
  return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1u), p);
#elif defined(__AVX2__)
  const vi lanes = {0, 1, 2, 3, 4, 5, 6, 7};
  return _mm256_maskload_ps(p, (__m256i)(lanes < static_cast<int32_t>(n)));
#else
  return portable::load_tail(p, n);
#endif
}

inline float vsum(vf v) {
#if defined(__AVX512F__)
  return _mm512_reduce_add_ps(v);
#elif defined(__AVX2__)
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
#else
  return portable::sum(v);
#endif
}

inline void in_register(vf& v) {
#if defined(__x86_64__) && defined(__AVX512F__)
  __asm__("" : "+v"(v));
#elif defined(__x86_64__) && defined(__SSE2__)
  __asm__("" : "+x"(v));
#else
  (void)v;
#endif
}

}  // namespace ms_ocr
