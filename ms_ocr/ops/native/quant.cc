// --quantize int8: the load-time quantisation of weights (ms_ocr_quantize_rows) and their dequantisation for the
// prefill graphs' products (DequantQ8). The decode step's int8 products are in gemv.h (MatMulTQ8, DecodeLayer,
// MoeExperts).
#include <omp.h>

#include "gemv.h"

namespace ms_ocr {
namespace {

// One run of --quantize int8 (ms_ocr_quantize_rows): the run's scale max |w| / 127 and its values divided by it,
// rounded to nearest even by adding and taking away 1.5 * 2^23 (exact for |x| < 2^22; np.rint's rounding),
// clipped to +-127.
template <typename W>
inline void quantize_run(const W* w, int64_t len, int8_t* q, float* scale_out) {
  vf peak_v = {};
  int64_t i = 0;
  for (; i + kVL <= len; i += kVL) peak_v = vmax(peak_v, vabs(vload(w + i)));
  float peak = 0.f;
  for (int l = 0; l < kVL; ++l) peak = peak_v[l] > peak ? peak_v[l] : peak;
  for (; i < len; ++i) peak = std::fabs(to_float(w[i])) > peak ? std::fabs(to_float(w[i])) : peak;
  float scale = peak / 127.f;
  if (scale == 0.f) scale = 1.f;
  *scale_out = scale;
  constexpr float kMagic = 12582912.f;  // 1.5 * 2^23
  const vf vs = vset(scale), magic = vset(kMagic), hi = vset(127.f), lo = vset(-127.f);
  for (i = 0; i + kVL <= len; i += kVL) {
    vf x = vload(w + i) / vs;
    x = (x + magic) - magic;
    const vq b = __builtin_convertvector(__builtin_convertvector(vmin(vmax(x, lo), hi), vi), vq);
    std::memcpy(q + i, &b, sizeof b);
  }
  for (; i < len; ++i) {
    float x = to_float(w[i]) / scale;
    x = (x + kMagic) - kMagic;
    q[i] = static_cast<int8_t>(x > 127.f ? 127.f : (x < -127.f ? -127.f : x));
  }
}

}  // namespace
}  // namespace ms_ocr

using namespace ms_ocr;

extern "C" {

// DequantQ8: q [N, K] int8, scale [N] or [N, K / G] -> w [N, K] = q * scale, fp32 or (an output of dtype bfloat16,
// for products in bf16) rounded to bf16, nearest-even (the prefill graphs' products over int8 weights: one
// layer's copy at a time, as for bf16 weights).
int DequantQ8(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,
              void* extra) {
  (void)stream; (void)extra;
  if (nparam != 3 || ndims[0] != 2 || !is_int8(dtypes[0])) return 1;
  const int64_t n = shapes[0][0], k = shapes[0][1];
  const int64_t group = q8_group(ndims[1], shapes[1], n, k);
  if (group < 0) return 1;
  const int8_t* q = static_cast<const int8_t*>(params[0]);
  const float* scale = static_cast<const float*>(params[1]);
  const int64_t ng = group ? k / group : 1, width = group ? group : k;  // scales per row, columns per scale
  if (is_bf16(dtypes[2])) {
    uint16_t* w = static_cast<uint16_t*>(params[2]);
#pragma omp parallel for num_threads(n * k >= (1 << 16) ? g_threads : 1) schedule(static)
    for (int64_t r = 0; r < n * ng; ++r)  // r: a row's run of `width` columns under one scale
      for (int64_t i = r * width; i < (r + 1) * width; ++i) w[i] = round_bf16(static_cast<float>(q[i]) * scale[r]);
    return 0;
  }
  float* w = static_cast<float*>(params[2]);
#pragma omp parallel for num_threads(n * k >= (1 << 16) ? g_threads : 1) schedule(static)
  for (int64_t r = 0; r < n * ng; ++r) {
    const vf s = vset(scale[r]);
    int64_t i = r * width;
    for (; i + kVL <= (r + 1) * width; i += kVL) vstore(w + i, vload(q + i) * s);
    for (; i < (r + 1) * width; ++i) w[i] = static_cast<float>(q[i]) * scale[r];
  }
  return 0;
}

// ms_ocr_quantize_rows: --quantize int8's load-time quantisation (models/quantize.py quantize_rows, which it
// matches bit for bit): w [N, K] (fp32, or bfloat16 words when `bf16` is set) -> q [N, K] int8 and scales
// [N * K / run], one per run of `run` columns (K: one per row): scale = max |w| / 127 (1 where that is 0),
// q = w / scale rounded to nearest, ties to even, clipped to +-127. Every thread takes whole runs. Returns 0, or 1
// when `run` does not divide K.
int ms_ocr_quantize_rows(const void* src, int bf16_src, int64_t n, int64_t k, int64_t run, int8_t* q,
                         float* scales) {
  if (n < 0 || k < 1 || run < 1 || k % run) return 1;
  const int64_t runs = n * (k / run);
#pragma omp parallel for num_threads(runs * run >= (1 << 16) ? g_threads : 1) schedule(static)
  for (int64_t r = 0; r < runs; ++r) {
    if (bf16_src)
      quantize_run(static_cast<const bf16*>(src) + r * run, run, q + r * run, scales + r);
    else
      quantize_run(static_cast<const float*>(src) + r * run, run, q + r * run, scales + r);
  }
  return 0;
}

}  // extern "C"
