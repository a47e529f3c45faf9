// VisionAttention / VisionAttentionRows / CausalAttention: softmax attention of whole blocks of query rows
// (ops/attention.py): the vision encoders' unmasked attention and the prompt's causal attention in the prefill
// layers. VisionAttentionBf16(Rows), the same in bf16 on the AMX tiles or with AVX512_BF16, is x86 code
// (arch/x86/attention_bf16.cc).
#include <omp.h>

#include <vector>

#include "arch/x86/amx.h"
#include "attention.h"
#include "common.h"

namespace ms_ocr {
namespace {

// ---- bidirectional attention (vision encoders) -------------------------------------------------------------
// One task = kAttnRows query rows of one (batch, head): their scores against every key are kept transposed,
// st[j][i] (key j, row i), so that q (packed [D][kAttnRows], scaled) and the keys and values are all read in
// their natural layouts: the scores are kJR-key x kAttnRows-row register tiles of broadcast-and-FMA, the output
// kJD-dim x kAttnRows-row tiles, with no lanes wasted on head dims that are not multiples of the vector width.
// The rows' scores (T x kAttnRows floats) stay in L2; the softmax runs down the columns, all rows at once; the
// output accumulates over chunks of keys. Tiles: AVX-512 2 x 16 rows, 8 keys / 8 dims; AVX2 2 x 8 rows,
// 6 keys / 4 dims (16 registers); NEON 4 x 4 rows, 6 keys / 4 dims.

constexpr int kMR = kVL >= 8 ? 2 : 4;  // vectors of rows per tile
constexpr int kAttnRows = kMR * kVL;
constexpr int kJR = kVRegs >= 32 ? (kMR == 2 ? 8 : 6) : (kMR == 2 ? 6 : 2);  // keys per score tile
constexpr int kJD = kVRegs >= 32 ? (kMR == 2 ? 8 : 4) : (kMR == 2 ? 4 : 2);  // dims per output tile (divides 8)
constexpr int64_t kAttnKeyChunk = 128;

template <int JR>
inline void attn_scores_tile(const float* k, const float* qt, float* st, int64_t d) {
  vf a[JR][kMR] = {};
  for (int64_t e = 0; e < d; ++e) {
    vf qv[kMR];
    for (int r = 0; r < kMR; ++r) qv[r] = vload(qt + e * kAttnRows + r * kVL);
    for (int j = 0; j < JR; ++j) {
      const vf kv = vset(k[j * d + e]);
      for (int r = 0; r < kMR; ++r) a[j][r] = kv * qv[r] + a[j][r];
    }
  }
  for (int j = 0; j < JR; ++j)
    for (int r = 0; r < kMR; ++r) vstore(st + j * kAttnRows + r * kVL, a[j][r]);
}

// acc[e][i] += sum_{j in [j0, j1)} v[j][e] p[j][i] for the kJD dims e of one group
inline void attn_values_tile(const float* v, const float* st, float* acc, int64_t d, int64_t j0, int64_t j1) {
  vf a[kJD][kMR];
  for (int e = 0; e < kJD; ++e)
    for (int r = 0; r < kMR; ++r) a[e][r] = vload(acc + e * kAttnRows + r * kVL);
  for (int64_t j = j0; j < j1; ++j) {
    vf pv[kMR];
    for (int r = 0; r < kMR; ++r) pv[r] = vload(st + j * kAttnRows + r * kVL);
    const float* vj = v + j * d;
    for (int e = 0; e < kJD; ++e) {
      const vf vv = vset(vj[e]);
      for (int r = 0; r < kMR; ++r) a[e][r] = vv * pv[r] + a[e][r];
    }
  }
  for (int e = 0; e < kJD; ++e)
    for (int r = 0; r < kMR; ++r) vstore(acc + e * kAttnRows + r * kVL, a[e][r]);
}

// out[i][e] for the task's rows: softmax(q k^T * scale) v; qt = q^T * scale [d][kAttnRows] (rows past `rows`
// zero); st [t][kAttnRows] and acc [d][kAttnRows] scratch. diag >= 0: causal, row i sees keys j <= diag + i only
// (the caller passes t = diag + rows, so the scores above the diagonal are all in the last kAttnRows keys).
void attn_task(const float* qt, const float* k, const float* v, float* out, int64_t rows, int64_t t, int64_t d,
               float* st, float* acc, int64_t diag = -1, int64_t out_stride = 0) {
  if (out_stride == 0) out_stride = d;
  int64_t j = 0;
  for (; j + kJR <= t; j += kJR) attn_scores_tile<kJR>(k + j * d, qt, st + j * kAttnRows, d);
  for (; j < t; ++j) attn_scores_tile<1>(k + j * d, qt, st + j * kAttnRows, d);
  if (diag >= 0)
    for (j = diag + 1; j < t; ++j)
      for (int64_t i = 0; i < j - diag && i < kAttnRows; ++i) st[j * kAttnRows + i] = -INFINITY;
  vf mx[kMR], sum[kMR];
  for (int r = 0; r < kMR; ++r) {
    mx[r] = vset(-INFINITY);
    sum[r] = vf{};
  }
  for (j = 0; j < t; ++j)
    for (int r = 0; r < kMR; ++r) mx[r] = vmax(mx[r], vload(st + j * kAttnRows + r * kVL));
  for (j = 0; j < t; ++j)
    for (int r = 0; r < kMR; ++r) {
      const vf e = vexp(vload(st + j * kAttnRows + r * kVL) - mx[r]);
      vstore(st + j * kAttnRows + r * kVL, e);
      sum[r] += e;
    }
  float inv[kAttnRows];
  for (int r = 0; r < kMR; ++r) vstore(inv + r * kVL, vset(1.f) / sum[r]);
  for (int64_t i = 0; i < d * kAttnRows; ++i) acc[i] = 0.f;
  for (int64_t j0 = 0; j0 < t; j0 += kAttnKeyChunk) {
    const int64_t j1 = j0 + kAttnKeyChunk < t ? j0 + kAttnKeyChunk : t;
    for (int64_t g = 0; g < d; g += kJD) attn_values_tile(v + g, st, acc + g * kAttnRows, d, j0, j1);
  }
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t e = 0; e < d; ++e) out[i * out_stride + e] = acc[e * kAttnRows + i] * inv[i];
}


// VisionAttention / CausalAttention: softmax(q k^T * scale [+ causal mask]) v. Inputs: q [B, H, S, D], k, v
// [B, Hkv, T, D] (H a multiple of Hkv: head h reads kv head h / (H / Hkv); D a multiple of 8, at most 256), scale
// [1]. Output [B, H, S, D]. VisionAttention: every key visible. CausalAttention (T >= S, the queries are the last S
// positions): query row i sees keys j <= T - S + i; each 32-row tile reads only the keys its last row sees and
// masks the triangle above the diagonal, so no [S, T] scores or probabilities are ever written.
// VisionAttentionRows: VisionAttention written as rows, [B, S, H * D] (head h's D values of row i at i * H * D +
// h * D): the layout the out projection reads, without the [B, H, S, D] -> [B, S, H, D] transpose.
int attention_entry(int nparam, void** params, int* ndims, int64_t** shapes, bool causal, bool rows_out = false) {
  if (nparam != 5 || ndims[0] != 4 || ndims[1] != 4 || ndims[2] != 4) return 1;
  const int64_t b = shapes[0][0], h = shapes[0][1], s = shapes[0][2], d = shapes[0][3];
  const int64_t hkv = shapes[1][1], t = shapes[1][2];
  if (d % 8 != 0 || d > 256 || t < 1 || shapes[1][0] != b || hkv < 1 || h % hkv != 0 || shapes[1][3] != d) return 1;
  if (causal && t < s) return 1;
  const float *q = static_cast<const float*>(params[0]), *k = static_cast<const float*>(params[1]),
              *v = static_cast<const float*>(params[2]);
  const float scale = static_cast<const float*>(params[3])[0];
  float* out = static_cast<float*>(params[4]);
  const int64_t blocks = (s + kAttnRows - 1) / kAttnRows, tasks = b * h * blocks, rep = h / hkv, offset = t - s;
  g_vision_attention_calls.fetch_add(1);
#pragma omp parallel num_threads(tasks > 1 ? g_threads : 1)
  {
    std::vector<float> qt(d * kAttnRows), st(t * kAttnRows), acc(d * kAttnRows);
    // head-major: the threads work on the same head's keys and values at the same time (shared cache)
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t bh = task / blocks, r0 = (task % blocks) * kAttnRows;
      const int64_t kvh = (bh / h) * hkv + (bh % h) / rep;
      const int64_t rows = s - r0 < kAttnRows ? s - r0 : kAttnRows;
      const float* qb = q + (bh * s + r0) * d;
      for (int64_t e = 0; e < d; ++e)
        for (int64_t i = 0; i < kAttnRows; ++i) qt[e * kAttnRows + i] = i < rows ? qb[i * d + e] * scale : 0.f;
      const int64_t diag = causal ? offset + r0 : -1;
      const HeadRows o = head_rows(out, bh, r0, h, s, d, rows_out);
      attn_task(qt.data(), k + kvh * t * d, v + kvh * t * d, o.at, rows, causal ? diag + rows : t, d, st.data(),
                acc.data(), diag, o.stride);
    }
  }
  return 0;
}

}  // namespace
}  // namespace ms_ocr

using namespace ms_ocr;

extern "C" {

int VisionAttention(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,
                    void* extra) {
  (void)stream; (void)extra; (void)dtypes;
  return attention_entry(nparam, params, ndims, shapes, false);
}
int VisionAttentionRows(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,
                        void* extra) {
  (void)stream; (void)extra; (void)dtypes;
  return attention_entry(nparam, params, ndims, shapes, false, true);
}
int CausalAttention(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,
                    void* extra) {
  (void)stream; (void)extra; (void)dtypes;
  return attention_entry(nparam, params, ndims, shapes, true);
}

// VisionAttention / VisionAttentionRows in bf16 (--dtype bf16 where the AMX tiles or AVX512_BF16 are on;
// ops/attention.py): 1 where neither is on for these shapes
int VisionAttentionBf16(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,
                        void* extra) {
  (void)stream; (void)extra; (void)dtypes;
#if defined(MS_OCR_AMX)
  return attention_bf16(nparam, params, ndims, shapes, false);
#else
  (void)nparam; (void)params; (void)ndims; (void)shapes;
  return 1;
#endif
}
int VisionAttentionBf16Rows(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes,
                            void* stream, void* extra) {
  (void)stream; (void)extra; (void)dtypes;
#if defined(MS_OCR_AMX)
  return attention_bf16(nparam, params, ndims, shapes, true);
#else
  (void)nparam; (void)params; (void)ndims; (void)shapes;
  return 1;
#endif
}

}  // extern "C"
