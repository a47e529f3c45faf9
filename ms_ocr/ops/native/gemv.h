// Matrix-vector products, the decode kernels' building block (MatMulT in gemv.cc, DecodeLayer, MoeExperts):
// y[m, o] = sum_i x[m, i] W[o, i] for a range of weight rows o against all M (<= 8) activation rows, W fp32, bf16 or
// int8 with scales per row or per group of columns.
//
// R weight rows at a time against all M activation rows. Memory bound: each weight row is read once, and R
// concurrent row streams keep more reads in flight than the hardware prefetcher alone (measured with AVX-512: 2
// rows ~29 GB/s, 8 rows ~41 GB/s). While a block is multiplied, the next block of the range (R rows, contiguous) is
// prefetched into L2, a share of its cache lines per step: the layers' rows of 1,024 (2 KB in bf16) end before the
// hardware prefetcher has ramped up on each (docs/journal/native-kernels.md, "Prefetching the next block").
// W: float or bf16 (widened as loaded; the same arithmetic in the same order, so the same result as its fp32 copy).
// With several activation rows the R weight vectors of a step are loaded first and each row's activation vector
// once, held in a register for its R products (in_register): left to itself GCC folds the activation loads into
// the FMAs, one load per product, and the loads, not the FMAs, bound the loop (8 rows: 24 loads per 24 FMAs;
// ~75 GFLOP/s against ~130-200 with the loads hoisted, docs/journal/native-kernels.md "Several rows"). Each
// output's products and sums are the same, in the same order, whatever M and R: bit-identical to the one-row kernel.
#pragma once

#include <cstdint>
#include <vector>

#include "arch/x86/amx.h"
#include "common.h"

namespace ms_ocr {

// One vector step of a block of R weight rows at column i: sums[r][m] += w0[r, i..] * x[m, i..], the next block's
// share of cache lines prefetched first (kLines of them, from `next` on, none at or past `end`).
template <int M, int R, typename W, int64_t kLines>
inline void gemv_step(const float* x, const W* w0, int64_t in, int64_t i, vf (&sums)[R][M], uintptr_t& next,
                      uintptr_t end) {
  if (R > 1)
    for (int64_t l = 0; l < kLines; ++l, next += 64)
      if (next < end) __builtin_prefetch(reinterpret_cast<const void*>(next), 0, 1);
  if constexpr (M == 1) {
    const vf xv = vload(x + i);
    for (int r = 0; r < R; ++r) sums[r][0] = vfma(vload(w0 + r * in + i), xv, sums[r][0]);
  } else {
    vf wv[R];
    for (int r = 0; r < R; ++r) wv[r] = vload(w0 + r * in + i);
    for (int m = 0; m < M; ++m) {
      vf xv = vload(x + m * in + i);
      in_register(xv);
      for (int r = 0; r < R; ++r) sums[r][m] = vfma(wv[r], xv, sums[r][m]);
    }
  }
}

template <int M, int R, typename W>
int64_t gemv_block(const float* x, const W* w, float* y, int64_t out, int64_t in, int64_t o, int64_t o1) {
  const int64_t full = in - in % kVL;
  constexpr int64_t kLines = (R * kVL * static_cast<int64_t>(sizeof(W)) + 63) / 64;  // next block's lines per step
  // addresses as integers: the last block's "next block" lies past the weight, where no pointer may point
  const uintptr_t end = reinterpret_cast<uintptr_t>(w + o1 * in);
  for (; o + R <= o1; o += R) {
    const W* w0 = w + o * in;
    uintptr_t next = reinterpret_cast<uintptr_t>(w0) + R * in * sizeof(W);
    vf acc[R][M] = {};
    for (int64_t i = 0; i < full; i += kVL) gemv_step<M, R, W, kLines>(x, w0, in, i, acc, next, end);
    if (full < in) {
      vf xv[M];
      for (int m = 0; m < M; ++m) xv[m] = vload_tail(x + m * in + full, in - full);
      for (int r = 0; r < R; ++r) {
        const vf wv = vload_tail(w0 + r * in + full, in - full);
        for (int m = 0; m < M; ++m) acc[r][m] = vfma(wv, xv[m], acc[r][m]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int m = 0; m < M; ++m) y[m * out + o + r] = vsum(acc[r][m]);
  }
  return o;
}

// Weight rows per block: R * M accumulators, R weight vectors and one activation vector stay within the vector
// registers (one row: R accumulators, the activation and the weight loads folded into the FMAs). Measured per M
// on the Zen 4 (AVX-512) and its x86-64-v3 build (docs/journal/native-kernels.md, "Several rows").
template <int M>
constexpr int kBlockRows = kVRegs >= 32 ? (M <= 2 ? 8 : M == 3 ? 7 : M == 4 ? 6 : 4)
                                        : (M == 1 ? 8 : M == 2 ? 5 : M <= 4 ? 3 : 2);
// More activation rows than this go in two passes over each range of weight rows, the first kSplitRows rows and
// then the rest (the range, <= 96 rows, is read again from L2): 8 rows as 4 + 4 ran 1.0-1.3x (AVX-512) and
// 1.8-2.2x (AVX2, where 8 rows left room for one weight row a block) faster than in one pass.
constexpr int kMaxPassRows = 6;
constexpr int kSplitRows = 4;
// the activation rows of the first (or only) pass of an M-row product
template <int M>
constexpr int kPassRows = M > kMaxPassRows ? kSplitRows : M;

// Rows [o, o1) of y [m, out] = x [m, in] w [out, in]^T: blocks of kBlockRows weight rows, then single rows.
template <int M, typename W>
void gemv_rows_m(const float* x, const W* w, float* y, int64_t out, int64_t in, int64_t o, int64_t o1) {
  if constexpr (kPassRows<M> < M) {
    gemv_rows_m<kPassRows<M>, W>(x, w, y, out, in, o, o1);
    gemv_rows_m<M - kPassRows<M>, W>(x + kPassRows<M> * in, w, y + kPassRows<M> * out, out, in, o, o1);
  } else {
    const int64_t rest = gemv_block<M, kBlockRows<M>, W>(x, w, y, out, in, o, o1);
    gemv_block<M, 1, W>(x, w, y, out, in, rest, o1);
  }
}

// ---- int8 with a scale per group of a row's columns (--quantize int8-g32 / int8-g64) ----------------------
// y[m, o] = sum_g scale[o, g] * (x[m, group g] . q[o, group g]): each group's products are summed in registers of
// their own (tmp) and added to the row's sum times the group's scale, llama.cpp's Q8_0 arithmetic with fp32
// activations. `group` is a multiple of kVL that divides `in` (models/quantize.py only makes such groups), so a
// group is whole vectors. R rows a block: R * M sums, R * M group sums, R weight vectors and an activation vector
// in the vector registers.
template <int M>
constexpr int kBlockRowsG = (kVRegs - 1) / (2 * M + 1) > 8 ? 8 : (kVRegs - 1) / (2 * M + 1) < 1 ? 1
                                                                : (kVRegs - 1) / (2 * M + 1);

template <int M, int R>
int64_t gemv_block_g(const float* x, const int8_t* w, const float* scale, float* y, int64_t out, int64_t in,
                     int64_t group, int64_t o, int64_t o1) {
  const int64_t ng = in / group;
  constexpr int64_t kLines = (R * kVL + 63) / 64;  // the next block's cache lines per step (see gemv_block)
  const uintptr_t end = reinterpret_cast<uintptr_t>(w + o1 * in);
  for (; o + R <= o1; o += R) {
    const int8_t* w0 = w + o * in;
    uintptr_t next = reinterpret_cast<uintptr_t>(w0) + R * in;
    vf acc[R][M] = {};
    for (int64_t g = 0; g < ng; ++g) {
      vf tmp[R][M] = {};
      for (int64_t i = g * group; i < (g + 1) * group; i += kVL)
        gemv_step<M, R, int8_t, kLines>(x, w0, in, i, tmp, next, end);
      for (int r = 0; r < R; ++r) {
        const vf s = vset(scale[(o + r) * ng + g]);
        for (int m = 0; m < M; ++m) acc[r][m] = vfma(tmp[r][m], s, acc[r][m]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int m = 0; m < M; ++m) y[m * out + o + r] = vsum(acc[r][m]);
  }
  return o;
}

// Rows [o, o1) of y [m, out] = x [m, in] (q * group scales)^T: blocks of kBlockRowsG rows, then single rows;
// more activation rows than kMaxPassRows in two passes, as gemv_rows_m.
template <int M>
void gemv_rows_g(const float* x, const int8_t* w, const float* scale, float* y, int64_t out, int64_t in,
                 int64_t group, int64_t o, int64_t o1) {
  if constexpr (kPassRows<M> < M) {
    gemv_rows_g<kPassRows<M>>(x, w, scale, y, out, in, group, o, o1);
    gemv_rows_g<M - kPassRows<M>>(x + kPassRows<M> * in, w, scale, y + kPassRows<M> * out, out, in, group, o, o1);
  } else {
    const int64_t rest = gemv_block_g<M, kBlockRowsG<M>>(x, w, scale, y, out, in, group, o, o1);
    gemv_block_g<M, 1>(x, w, scale, y, out, in, group, rest, o1);
  }
}

// The row-range kernels by M (index 1..8)
using GemvRowsGFn = void (*)(const float*, const int8_t*, const float*, float*, int64_t, int64_t, int64_t, int64_t,
                             int64_t);
constexpr GemvRowsGFn kGemvRowsG[] = {nullptr, gemv_rows_g<1>, gemv_rows_g<2>, gemv_rows_g<3>, gemv_rows_g<4>,
                                      gemv_rows_g<5>, gemv_rows_g<6>, gemv_rows_g<7>, gemv_rows_g<8>};
template <typename W>
using GemvRowsFn = void (*)(const float*, const W*, float*, int64_t, int64_t, int64_t, int64_t);
template <typename W>
constexpr GemvRowsFn<W> kGemvRows[] = {nullptr, gemv_rows_m<1, W>, gemv_rows_m<2, W>, gemv_rows_m<3, W>,
                                       gemv_rows_m<4, W>, gemv_rows_m<5, W>, gemv_rows_m<6, W>, gemv_rows_m<7, W>,
                                       gemv_rows_m<8, W>};

// ---- a product's weight operand -----------------------------------------------------------------------------
// fp32, bfloat16 words, or int8 with one fp32 scale per row (weight-only int8: row o of the product is
// scale[o] * (x . q[o])) or per group of columns.
struct Weight {
  const void* p;
  bool bf16;
  const float* scale = nullptr;  // int8 when set: [out] (one per row) or [out, in / group]
  int64_t group = 0;             // columns per scale (0: one scale per row)
};

// y[r * out + i] *= scale[i] for the m rows, outputs [o, o1)
inline void scale_rows(float* y, const float* scale, int m, int64_t out, int64_t o, int64_t o1) {
  for (int r = 0; r < m; ++r)
    for (int64_t i = o; i < o1; ++i) y[r * out + i] *= scale[i];
}

// The columns per scale of an int8 matrix [n, k] with scales of shape `sshape` (`sdims` dimensions): [n] one per
// row (0), [n, g] groups of k / g columns, a multiple of the vector width (16 floats, the widest build's); -1
// when the shapes do not fit.
inline int64_t q8_group(int sdims, const int64_t* sshape, int64_t n, int64_t k) {
  if (sdims == 1) return sshape[0] == n ? 0 : -1;
  if (sdims != 2 || sshape[0] != n || sshape[1] < 1 || k % sshape[1] != 0) return -1;
  const int64_t group = k / sshape[1];
  return group % 16 == 0 ? group : -1;
}

// ---- --dtype bf16's products on the AMX tiles (arch/x86/amx.cc) ------------------------------------------------
// Decode steps of fewer rows stay on the fp32 kernels (arch/x86/amx.cc): MatMulTBf16 and DecodeLayerBf16
constexpr int64_t kTileMinRows = 2;

// A product's activation rows x [m, k] (m <= 16) rounded to bf16: widened back to fp32 (rows, for the matrix-vector
// kernel where the tiles do not serve: outputs past whole blocks of 32, k not a multiple of 32) and, k a multiple
// of 32, packed as the tiles' B operand (packed: [k / 32][16 column pairs][16 rows][2], zeros past m).
struct TileRows {
  std::vector<float> rows;
  std::vector<uint16_t> packed;

  void set(const float* x, int m, int64_t k) {
    rows.resize(static_cast<size_t>(m * k));
    for (int64_t i = 0; i < m * k; ++i) rows[i] = to_float(round_bf16(x[i]));
    packed.clear();
    if (k % 32 != 0) return;
    packed.assign(static_cast<size_t>(k / 32 * 512), 0);
    for (int64_t b = 0; b < k / 32; ++b)
      for (int r = 0; r < m; ++r) {
        const float* xr = x + r * k + b * 32;
        uint16_t* t = packed.data() + b * 512 + r * 2;
        for (int i = 0; i < 16; ++i) {
          t[i * 32] = round_bf16(xr[2 * i]);
          t[i * 32 + 1] = round_bf16(xr[2 * i + 1]);
        }
      }
  }
  const uint16_t* tiles() const { return packed.empty() ? nullptr : packed.data(); }
};

// One product y [m, out] = x [m, in] w^T (+ res [m, out] when given) of a group run by the decode layer's
// parallel_products, or one of MoeExperts' chunks; px: x packed for the tiles (TileRows; x then its rows rounded to
// bf16) when a bf16 weight's product takes them (DecodeLayerBf16).
struct Product {
  const float* x;
  Weight w;
  float* y;
  int64_t out, in;
  const float* res;
  const uint16_t* px = nullptr;
};

// Rows [o, o1) of a product with m activation rows, by the weight's kind.
inline void product_rows(const Product& p, int m, int64_t o, int64_t o1) {
  if (p.w.scale && p.w.group) {
    kGemvRowsG[m](p.x, static_cast<const int8_t*>(p.w.p), p.w.scale, p.y, p.out, p.in, p.w.group, o, o1);
  } else if (p.w.scale) {
    kGemvRows<int8_t>[m](p.x, static_cast<const int8_t*>(p.w.p), p.y, p.out, p.in, o, o1);
    scale_rows(p.y, p.w.scale, m, p.out, o, o1);
  } else if (p.w.bf16) {
    int64_t rest = o;  // outputs past the tiles' whole blocks of 32
#if defined(MS_OCR_AMX)
    if (p.px != nullptr) {
      rest = o + (o1 - o) / 32 * 32;
      amx_rows(p.px, m, static_cast<const bf16*>(p.w.p), p.y, p.out, p.in, o, rest);
    }
#endif
    if (rest < o1) kGemvRows<bf16>[m](p.x, static_cast<const bf16*>(p.w.p), p.y, p.out, p.in, rest, o1);
  } else {
    kGemvRows<float>[m](p.x, static_cast<const float*>(p.w.p), p.y, p.out, p.in, o, o1);
  }
  if (p.res)
    for (int r = 0; r < m; ++r)
      for (int64_t i = o; i < o1; ++i) p.y[r * p.out + i] += p.res[r * p.out + i];
}

}  // namespace ms_ocr
