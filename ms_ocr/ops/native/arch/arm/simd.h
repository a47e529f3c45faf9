// The aarch64 bodies of the vector layer's per-ISA operations (listed in simd.h, which includes this file): NEON
// (the widened bf16 load is ushll #16, FMA is fmla, the horizontal sum faddv); the int8 load and the tail load take
// the portable bodies.
#pragma once

#if defined(__ARM_NEON)
#include <arm_neon.h>
#endif

namespace ms_ocr {

inline vf vload(const bf16* p) {
#if defined(__ARM_NEON)
  return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
#else
  return portable::load_bf16(p);
#endif
}

inline vf vload(const int8_t* p) { return portable::load_int8(p); }

inline vf vfma(vf a, vf b, vf c) {
#if defined(__ARM_NEON)
  return vfmaq_f32(c, a, b);
#else
  return portable::fma(a, b, c);
#endif
}

inline vf vload_tail(const float* p, int64_t n) { return portable::load_tail(p, n); }

inline float vsum(vf v) {
#if defined(__ARM_NEON)
  return vaddvq_f32(v);
#else
  return portable::sum(v);
#endif
}

inline void in_register(vf& v) { __asm__("" : "+w"(v)); }

}  // namespace ms_ocr
