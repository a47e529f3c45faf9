// ViTHeads, LayerNormRows and RmsNormRows: the element-wise work around a layer's products (ops/rope.py,
// ops/norm.py), one pass each instead of MindSpore's chains of small CPU kernels.
#include <omp.h>

#include <vector>

#include "common.h"

using namespace ms_ocr;

namespace {

// The rows of a row-wise norm's input x [..., C] (operand 0) whose operands 1 .. vectors are its [C] weight (and
// bias): the row count, and C in `c`; -1 where the shapes do not fit.
int64_t norm_rows(const int* ndims, int64_t* const* shapes, int vectors, int64_t& c) {
  if (ndims[0] < 1) return -1;
  c = shapes[0][ndims[0] - 1];
  if (c < 1) return -1;
  for (int i = 1; i <= vectors; ++i)
    if (ndims[i] != 1 || shapes[i][0] != c) return -1;
  int64_t rows = 1;
  for (int i = 0; i < ndims[0] - 1; ++i) rows *= shapes[0][i];
  return rows;
}

// The sum over x[0 .. c) of f(x[j]) (f takes a vf and a float alike): kVL lanes of fp32 vectors, their horizontal
// sum, then the tail one by one — a row-wise norm's reductions (LayerNormRows' mean and variance, RmsNormRows' squares)
template <typename F>
inline float row_sum(const float* x, int64_t c, F f) {
  vf acc{};
  int64_t j = 0;
  for (; j + kVL <= c; j += kVL) acc += f(vload(x + j));
  float sum = vsum(acc);
  for (; j < c; ++j) sum += f(x[j]);
  return sum;
}

}  // namespace

extern "C" {

// ViTHeads: a ViT layer's q, k, v projections (without their biases) -> the biased, heads-first q, k, v of the
// attention, q and k rotated: yq, yk, yv [N, H * D] fp32, their biases qb, kb, vb [H * D], the rope tables cos,
// sin [..., N, D] -> q, k, v [1, H, N, D], with t = y + b, q = t * cos + rotate_half(t) * sin (rotate_half(t) =
// concat(-t[D/2:], t[:D/2])), v = t. One pass instead of the bias adds, head transposes and the rope's slices,
// products and concats (~12.5 of a PaddleOCR-VL layer's 30 ms before its attention at 512 rows, bf16 products,
// 2026-11-28). Each value is rounded as the composed ops round it (no fused multiply-adds: the same bits).
__attribute__((optimize("fp-contract=off"))) int ViTHeads(int nparam, void** params, int* ndims, int64_t** shapes,
                                                          const char** dtypes, void* stream, void* extra) {
  (void)stream; (void)extra; (void)dtypes;
  if (nparam != 11 || ndims[0] != 2 || ndims[6] < 2 || ndims[7] != ndims[6]) return 1;
  const int64_t n = shapes[0][0], c = shapes[0][1], d = shapes[6][ndims[6] - 1];
  if (d < 2 || d % 2 != 0 || c % d != 0) return 1;
  for (int i = 0; i < ndims[6]; ++i)  // one table of [n, d] each (leading axes of size 1)
    if (shapes[6][i] != shapes[7][i] || shapes[6][i] != (i == ndims[6] - 1 ? d : i == ndims[6] - 2 ? n : 1)) return 1;
  for (int i = 1; i < 3; ++i)
    if (ndims[i] != 2 || shapes[i][0] != n || shapes[i][1] != c) return 1;
  for (int i = 3; i < 6; ++i)
    if (ndims[i] != 1 || shapes[i][0] != c) return 1;
  const int64_t h = c / d, half = d / 2;
  const float* cos_t = static_cast<const float*>(params[6]);
  const float* sin_t = static_cast<const float*>(params[7]);
#pragma omp parallel num_threads(n >= 16 ? g_threads : 1)
  {
    std::vector<float> t(d);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < n; ++r) {
      const float* cr = cos_t + r * d;
      const float* sr = sin_t + r * d;
      for (int which = 0; which < 3; ++which) {
        const float* y = static_cast<const float*>(params[which]) + r * c;
        const float* b = static_cast<const float*>(params[3 + which]);
        float* out = static_cast<float*>(params[8 + which]);
        for (int64_t hh = 0; hh < h; ++hh) {
          float* o = out + (hh * n + r) * d;
          const float* yh = y + hh * d;
          const float* bh = b + hh * d;
          if (which == 2) {
            for (int64_t e = 0; e < d; ++e) o[e] = yh[e] + bh[e];
            continue;
          }
          for (int64_t e = 0; e < d; ++e) t[e] = yh[e] + bh[e];
          for (int64_t e = 0; e < half; ++e) {
            const float a = t[e] * cr[e], m = t[e + half] * sr[e];
            o[e] = a - m;
          }
          for (int64_t e = half; e < d; ++e) {
            const float a = t[e] * cr[e], m = t[e - half] * sr[e];
            o[e] = a + m;
          }
        }
      }
    }
  }
  return 0;
}

// LayerNormRows: x [..., C] fp32, w, b [C] fp32, eps [1] -> y = (x - mean) / sqrt(var + eps) * w + b over each row
// of C, two passes (the mean, then the variance of x - mean), sums in fp32 vectors. MindSpore's CPU LayerNorm took
// 2-4 ms for a PaddleOCR-VL ViT layer's 512 x 1,152 block (two per layer), 2026-11-28.
int LayerNormRows(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,
                  void* extra) {
  (void)stream; (void)extra; (void)dtypes;
  int64_t c = 0;
  const int64_t rows = nparam == 5 ? norm_rows(ndims, shapes, 2, c) : -1;
  if (rows < 0) return 1;
  const float* x = static_cast<const float*>(params[0]);
  const float* w = static_cast<const float*>(params[1]);
  const float* b = static_cast<const float*>(params[2]);
  const float eps = static_cast<const float*>(params[3])[0];
  float* y = static_cast<float*>(params[4]);
#pragma omp parallel for num_threads(rows >= 16 ? g_threads : 1) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * c;
    float* yr = y + r * c;
    const float mean = row_sum(xr, c, [](auto v) { return v; }) / static_cast<float>(c);
    const vf mv = vset(mean);
    const float sq = row_sum(xr, c, [mean](auto v) { return (v - mean) * (v - mean); });
    const float rstd = 1.f / std::sqrt(sq / static_cast<float>(c) + eps);
    const vf rv = vset(rstd);
    int64_t j = 0;
    for (; j + kVL <= c; j += kVL) vstore(yr + j, (vload(xr + j) - mv) * rv * vload(w + j) + vload(b + j));
    for (; j < c; ++j) yr[j] = (xr[j] - mean) * rstd * w[j] + b[j];
  }
  return 0;
}

// RmsNormRows: x [..., C] fp32, w [C] fp32, eps [1] -> y = w * (x / sqrt(mean(x^2) + eps)) over each row of C (the
// decoders' RMSNorm, and their per-head q/k norms over rows of the head size), the squares summed in fp32 vectors.
// MindSpore's composed form (Mul, ReduceMean, Add, Rsqrt, Mul, Mul) took 4.0 ms for a prefill's 896 x 1,024 block on
// an Intel Xeon model 167, 2 threads (2026-12-07).
int RmsNormRows(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,
                void* extra) {
  (void)stream; (void)extra; (void)dtypes;
  int64_t c = 0;
  const int64_t rows = nparam == 4 && ndims[2] == 1 ? norm_rows(ndims, shapes, 1, c) : -1;
  if (rows < 0) return 1;
  const float* x = static_cast<const float*>(params[0]);
  const float* w = static_cast<const float*>(params[1]);
  const float eps = static_cast<const float*>(params[2])[0];
  float* y = static_cast<float*>(params[3]);
#pragma omp parallel for num_threads(rows >= 16 ? g_threads : 1) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * c;
    float* yr = y + r * c;
    const float inv = 1.f / std::sqrt(row_sum(xr, c, [](auto v) { return v * v; }) / static_cast<float>(c) + eps);
    const vf iv = vset(inv);
    int64_t j = 0;
    for (; j + kVL <= c; j += kVL) vstore(yr + j, vload(w + j) * (vload(xr + j) * iv));
    for (; j < c; ++j) yr[j] = w[j] * (xr[j] * inv);
  }
  return 0;
}

}  // extern "C"
