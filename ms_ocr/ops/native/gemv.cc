// MatMulT, MatMulTBf16, MatMulTQ8: a decode step's products of at most 8 rows against a very large weight (the VLMs'
// heads; ops/linear.py matmul_t), the matrix-vector kernels of gemv.h over the decode team.
#include <atomic>

#include "gemv.h"
#include "team.h"

namespace ms_ocr {
namespace {

template <int M, typename W>
void gemv(const float* x, const W* w, float* y, int64_t out, int64_t in) {
  team_rows(out, 32 * kBlockRows<kPassRows<M>>,
            [&](int64_t o, int64_t o1) { gemv_rows_m<M, W>(x, w, y, out, in, o, o1); });
}

// int8 with group scales (scale [out, in / group])
template <int M>
void gemv_g(const float* x, const int8_t* w, const float* scale, float* y, int64_t out, int64_t in, int64_t group) {
  team_rows(out, 32 * kBlockRowsG<kPassRows<M>>,
            [&](int64_t o, int64_t o1) { gemv_rows_g<M>(x, w, scale, y, out, in, group, o, o1); });
}
using GemvGFn = void (*)(const float*, const int8_t*, const float*, float*, int64_t, int64_t, int64_t);
constexpr GemvGFn kGemvG[] = {nullptr, gemv_g<1>, gemv_g<2>, gemv_g<3>, gemv_g<4>,
                              gemv_g<5>, gemv_g<6>, gemv_g<7>, gemv_g<8>};

template <typename W>
using GemvFn = void (*)(const float*, const W*, float*, int64_t, int64_t);
template <typename W>
constexpr GemvFn<W> kGemv[] = {nullptr, gemv<1, W>, gemv<2, W>, gemv<3, W>, gemv<4, W>,
                               gemv<5, W>, gemv<6, W>, gemv<7, W>, gemv<8, W>};

}  // namespace
}  // namespace ms_ocr

using namespace ms_ocr;

extern "C" {

// MatMulT: x [M, K] (M <= 8), w [N, K] (fp32 or bfloat16) -> y [M, N] = x w^T (fp32), for the decode step's
// matrix-vector products.
int MatMulT(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream, void* extra) {
  (void)stream; (void)extra;
  if (nparam != 3 || ndims[0] != 2 || ndims[1] != 2) return 1;
  const int64_t m = shapes[0][0], k = shapes[0][1], n = shapes[1][0];
  if (m < 1 || m > 8 || shapes[1][1] != k) return 1;
  g_matmul_t_calls.fetch_add(1);
  const float* x = static_cast<const float*>(params[0]);
  float* y = static_cast<float*>(params[2]);
  if (is_bf16(dtypes[1]))
    kGemv<bf16>[m](x, static_cast<const bf16*>(params[1]), y, n, k);
  else
    kGemv<float>[m](x, static_cast<const float*>(params[1]), y, n, k);
  return 0;
}

// MatMulT with --dtype bf16's products: a bf16 w on the tiles where AMX is on (activations rounded to bf16), else
// MatMulT's
int MatMulTBf16(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,
                void* extra) {
  if (nparam != 3 || ndims[0] != 2 || ndims[1] != 2 || !g_amx || !is_bf16(dtypes[1]) ||
      shapes[0][0] < kTileMinRows)
    return MatMulT(nparam, params, ndims, shapes, dtypes, stream, extra);
  const int64_t m = shapes[0][0], k = shapes[0][1], n = shapes[1][0];
  if (m < 1 || m > 8 || shapes[1][1] != k) return 1;
  g_matmul_t_calls.fetch_add(1);
  const bf16* w = static_cast<const bf16*>(params[1]);
  float* y = static_cast<float*>(params[2]);
  TileRows tr;
  tr.set(static_cast<const float*>(params[0]), static_cast<int>(m), k);
  const float* x = tr.rows.data();
  constexpr int64_t kChunk = 256;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::atomic<int64_t> next{0};
  team_run(chunks > 1 ? g_threads : 1, [&](const TeamCtx&) {
#if defined(MS_OCR_AMX)
    if (tr.tiles() != nullptr) amx_begin();
#endif
    for (int64_t c = next.fetch_add(1); c < chunks; c = next.fetch_add(1)) {
      const int64_t o = c * kChunk, o1 = o + kChunk < n ? o + kChunk : n;
      int64_t rest = o;
#if defined(MS_OCR_AMX)
      if (tr.tiles() != nullptr) {
        rest = o + (o1 - o) / 32 * 32;
        amx_rows(tr.tiles(), static_cast<int>(m), w, y, n, k, o, rest);
      }
#endif
      if (rest < o1) kGemvRows<bf16>[m](x, w, y, n, k, rest, o1);
    }
#if defined(MS_OCR_AMX)
    if (tr.tiles() != nullptr) amx_end();
#endif
  });
  return 0;
}

// MatMulTQ8: x [M, K] (M <= 8), q [N, K] int8, scale [N] or [N, K / G] fp32 -> y [M, N] = x (q * scale)^T:
// weight-only int8, one scale per row or per group of G columns.
int MatMulTQ8(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,
              void* extra) {
  (void)stream; (void)extra;
  if (nparam != 4 || ndims[0] != 2 || ndims[1] != 2 || !is_int8(dtypes[1])) return 1;
  const int64_t m = shapes[0][0], k = shapes[0][1], n = shapes[1][0];
  const int64_t group = q8_group(ndims[2], shapes[2], n, k);
  if (m < 1 || m > 8 || shapes[1][1] != k || group < 0) return 1;
  g_matmul_t_calls.fetch_add(1);
  const float* x = static_cast<const float*>(params[0]);
  const int8_t* q = static_cast<const int8_t*>(params[1]);
  const float* scale = static_cast<const float*>(params[2]);
  float* y = static_cast<float*>(params[3]);
  if (group) {
    kGemvG[m](x, q, scale, y, n, k, group);
    return 0;
  }
  kGemv<int8_t>[m](x, q, y, n, k);
  scale_rows(y, scale, static_cast<int>(m), n, 0, n);
  return 0;
}

}  // extern "C"
