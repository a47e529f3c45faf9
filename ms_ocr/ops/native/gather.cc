// GatherRows, InterpRows, WidenBf16: rows of fp32 or bf16 tables read into fp32 (embedding lookups, a ViT's
// position table resampled, bf16 weights widened for fp32 graphs; ops/linear.py).
#include <omp.h>

#include "common.h"

namespace ms_ocr {
namespace {

// o = sum_k w[k] * table[idx[k]] over one output row of c values (indices outside [0, p) skipped)
template <typename T>
void interp_row(const T* table, int64_t p, int64_t c, const int32_t* idx, const float* w, int64_t taps, float* o) {
  for (int64_t j = 0; j < c; ++j) o[j] = 0.f;
  for (int64_t k = 0; k < taps; ++k) {
    if (idx[k] < 0 || idx[k] >= p) continue;
    const T* row = table + idx[k] * c;
    const vf a = vset(w[k]);
    int64_t j = 0;
    for (; j + kVL <= c; j += kVL) vstore(o + j, vfma(a, vload(row + j), vload(o + j)));
    for (; j < c; ++j) o[j] = w[k] * to_float(row[j]) + o[j];
  }
}

}  // namespace
}  // namespace ms_ocr

using namespace ms_ocr;

extern "C" {

// GatherRows: rows ids of a table, widened to fp32: table [V, ...] (bfloat16 or fp32; a row is everything after
// the first axis), ids (any shape, int32 or int64) -> out [ids..., ...] fp32. The embedding lookup of a bf16 table
// kept in bf16 (MindSpore's CPU Gather has no bfloat16 kernel), and the selected experts of a bf16 expert stack
// [E, I, H]; an id outside [0, V) gives a zero row.
int GatherRows(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,
               void* extra) {
  (void)stream; (void)extra;
  if (nparam != 3 || ndims[0] < 2) return 1;
  const int64_t v = shapes[0][0];
  int64_t h = 1;
  for (int i = 1; i < ndims[0]; ++i) h *= shapes[0][i];
  int64_t n = 1;
  for (int i = 0; i < ndims[1]; ++i) n *= shapes[1][i];
  const bool wide_ids = dtypes[1] != nullptr && std::strcmp(dtypes[1], "int64") == 0;
  const bool bf = is_bf16(dtypes[0]);
  float* out = static_cast<float*>(params[2]);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t id = wide_ids ? static_cast<const int64_t*>(params[1])[r] : static_cast<const int32_t*>(params[1])[r];
    float* o = out + r * h;
    if (id < 0 || id >= v) {
      std::memset(o, 0, h * sizeof(float));
    } else if (bf) {
      const bf16* row = static_cast<const bf16*>(params[0]) + id * h;
      for (int64_t j = 0; j < h; ++j) o[j] = to_float(row[j]);
    } else {
      std::memcpy(o, static_cast<const float*>(params[0]) + id * h, h * sizeof(float));
    }
  }
  return 0;
}

// InterpRows: out[r] = sum_k w[r][k] * table[idx[r][k]], the taps in order (an index outside [0, P) adds nothing):
// a learned position table resampled to an image's patch grid (bilinear: 4 taps per patch) without the [N, K, C]
// gathered rows and products a composed gather-multiply-sum keeps in a CPU graph (0.34 GB for PaddleOCR-VL's
// 3,996 patches). Inputs: table [P, C] fp32 or bfloat16, idx [N, K] int32, w [N, K] fp32. Output [N, C] fp32.
int InterpRows(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,
               void* extra) {
  (void)stream; (void)extra;
  if (nparam != 4 || ndims[0] != 2 || ndims[1] != 2 || ndims[2] != 2) return 1;
  const int64_t p = shapes[0][0], c = shapes[0][1], n = shapes[1][0], taps = shapes[1][1];
  if (shapes[2][0] != n || shapes[2][1] != taps) return 1;
  const bool bf = is_bf16(dtypes[0]);
  const int32_t* idx = static_cast<const int32_t*>(params[1]);
  const float* w = static_cast<const float*>(params[2]);
  float* out = static_cast<float*>(params[3]);
#pragma omp parallel for num_threads(n >= 64 ? g_threads : 1) schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    if (bf)
      interp_row(static_cast<const bf16*>(params[0]), p, c, idx + r * taps, w + r * taps, taps, out + r * c);
    else
      interp_row(static_cast<const float*>(params[0]), p, c, idx + r * taps, w + r * taps, taps, out + r * c);
  }
  return 0;
}

// WidenBf16: x (any shape, bfloat16) -> the same values in fp32, for graphs that compute in fp32 over weights
// kept in bf16 (prefill layers, vision layers): vector widening on every thread, where MindSpore's CPU Cast from
// bfloat16 converts one element at a time (measured 11.8 ms for 3M elements vs ~1 ms here).
int WidenBf16(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,
              void* extra) {
  (void)stream; (void)extra;
  if (nparam != 2 || !is_bf16(dtypes[0])) return 1;
  int64_t n = 1;
  for (int i = 0; i < ndims[0]; ++i) n *= shapes[0][i];
  const bf16* x = static_cast<const bf16*>(params[0]);
  float* y = static_cast<float*>(params[1]);
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for num_threads(chunks > 1 ? g_threads : 1) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t i1 = (c + 1) * kChunk < n ? (c + 1) * kChunk : n;
    int64_t i = c * kChunk;
    for (; i + kVL <= i1; i += kVL) vstore(y + i, vload(x + i));
    for (; i < i1; ++i) y[i] = to_float(x[i]);
  }
  return 0;
}

}  // extern "C"
