// VisionAttentionBf16 / VisionAttentionBf16Rows (attention.cc): --dtype bf16's vision attention on the AMX tiles,
// or with AVX512_BF16's VDPBF16PS where the tiles are off (arch/x86/amx.h).
#include "amx.h"

#if defined(MS_OCR_AMX)
#include <omp.h>

#include <immintrin.h>

#include <vector>

#include "../../attention.h"
#include "../../common.h"

namespace ms_ocr {
namespace {

// ---- AMX: the vision encoders' attention in bf16 on the tiles (VisionAttentionBf16, ...Rows) -------------------
// --dtype bf16 with the tiles on: q and k rounded to bf16, their dot products summed in fp32 on the tiles, times
// `scale` in fp32; the softmax in fp32 over each row (its max taken out, vexp), each probability rounded to bf16
// before it weights the values (rounded to bf16) on the tiles, and the sums divided by the total of the rounded
// probabilities. A thread takes one (batch, head) at a time: it packs that head's q, k and v (tiles read 64-byte
// rows: q as rows of head_dim padded to 32, k as the B operand of q k^T, v as the B operand of p v; zeros past the
// real keys and dims) into buffers it keeps between calls, then runs its blocks of 16 query rows: their scores
// against every key [16, T] (in L2), then the values. head_dim up to 96: 3 q tiles, two k tiles and two score
// tiles; then a p tile, a v tile and up to 6 output tiles of 16 dims. Figures: docs/native-kernels.md.
constexpr int64_t kAmxMaxDim = 96;

// bits of x rounded to bf16 (to nearest, ties to even; finite values), in the low half of each lane
inline vu round_bits(vf x) {
  vu u;
  std::memcpy(&u, &x, sizeof u);
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}
// bf16 bits in the low half of each lane (round_bits) as the floats they stand for; exact
inline vf bits_float(vu r) { return (vf)(r << 16); }

// x [n] rounded to bf16 (to nearest, ties to even; finite values) into out [n_pad], zeros past n; returns the sum
// of the rounded values.
inline float round_row(const float* x, int64_t n, uint16_t* out, int64_t n_pad) {
  vf total = {};
  int64_t j = 0;
  for (; j + kVL <= n; j += kVL) {
    const vu r = round_bits(vload(x + j));
    const vh hv = __builtin_convertvector(r, vh);
    std::memcpy(out + j, &hv, sizeof hv);
    total += bits_float(r);
  }
  float sum = vsum(total);
  for (; j < n; ++j) {
    out[j] = round_bf16(x[j]);
    sum += to_float(out[j]);
  }
  for (; j < n_pad; ++j) out[j] = 0;
  return sum;
}

// One block of 16 query rows (qp, packed; `rows` of them real) of one head against its packed k and v: out [rows,
// d] (row stride out_stride); st, pb, ob the thread's scratch ([16, t16] scores, [16, t32] probabilities, [16, db *
// 16] sums). The tiles set up (amx_begin).
__attribute__((target("amx-tile,amx-bf16"))) void amx_attn_task(
    const uint16_t* qp, const uint16_t* kp, const uint16_t* vp, int64_t dp, int64_t t16, int64_t t32, int64_t db,
    int64_t t, float scale, float* st, uint16_t* pb, float* ob, float* out, int64_t rows, int64_t d,
    int64_t out_stride) {
  const int64_t dsteps = dp / 32;
  // scores: tiles 0..dsteps-1 hold q's 16 rows (32 dims each)
  if (dsteps > 0) _tile_loadd(0, qp, dp * 2);
  if (dsteps > 1) _tile_loadd(1, qp + 32, dp * 2);
  if (dsteps > 2) _tile_loadd(2, qp + 64, dp * 2);
  // two blocks of keys at a time (tiles 3, 4 and scores 6, 7): two independent chains of tile products
  const int64_t kbs = t16 / 16;
  for (int64_t kb = 0; kb < kbs; kb += 2) {
    const bool two = kb + 1 < kbs;
    const uint16_t* kt = kp + kb * dsteps * 512;
    const uint16_t* kt2 = kt + dsteps * 512;
    _tile_zero(6);
    _tile_zero(7);
    _tile_loadd(3, kt, 64);
    if (two) _tile_loadd(4, kt2, 64);
    _tile_dpbf16ps(6, 0, 3);
    if (two) _tile_dpbf16ps(7, 0, 4);
    if (dsteps > 1) {
      _tile_loadd(3, kt + 512, 64);
      if (two) _tile_loadd(4, kt2 + 512, 64);
      _tile_dpbf16ps(6, 1, 3);
      if (two) _tile_dpbf16ps(7, 1, 4);
    }
    if (dsteps > 2) {
      _tile_loadd(3, kt + 1024, 64);
      if (two) _tile_loadd(4, kt2 + 1024, 64);
      _tile_dpbf16ps(6, 2, 3);
      if (two) _tile_dpbf16ps(7, 2, 4);
    }
    _tile_stored(6, st + kb * 16, t16 * 4);
    if (two) _tile_stored(7, st + kb * 16 + 16, t16 * 4);
  }
  // softmax rows in fp32; probabilities rounded to bf16 (zeros past the real keys)
  float inv[16];
  for (int64_t i = 0; i < 16; ++i) {
    float* si = st + i * t16;
    vf vmx = vset(-INFINITY);
    int64_t j = 0;
    for (; j + kVL <= t; j += kVL) vmx = vmax(vmx, vload(si + j));
    float mx = -INFINITY;
    for (int l = 0; l < kVL; ++l) mx = vmx[l] > mx ? vmx[l] : mx;
    for (; j < t; ++j) mx = si[j] > mx ? si[j] : mx;
    mx *= scale;  // scale > 0
    const vf vs = vset(scale), vm = vset(mx);
    for (j = 0; j + kVL <= t; j += kVL) vstore(si + j, vexp(vload(si + j) * vs - vm));
    for (; j < t; ++j) si[j] = std::exp(si[j] * scale - mx);
    inv[i] = 1.f / round_row(si, t, pb + i * t32, t32);
  }
  // values: tile 0 a block of p (16 rows x 32 keys), 1 a block of v, 2.. the db output tiles of 16 dims
  // tile numbers are part of the instruction: constants only
  _tile_zero(2);
  if (db > 1) _tile_zero(3);
  if (db > 2) _tile_zero(4);
  if (db > 3) _tile_zero(5);
  if (db > 4) _tile_zero(6);
  if (db > 5) _tile_zero(7);  // else tile 7 holds blocks of v
  for (int64_t ks = 0; ks < t32 / 32; ++ks) {
    _tile_loadd(0, pb + ks * 32, t32 * 2);
    const uint16_t* vt = vp + ks * db * 512;
    if (db <= 5) {  // v blocks alternate between tiles 1 and 7: a load need not wait for the product before
      _tile_loadd(1, vt, 64);
      _tile_dpbf16ps(2, 0, 1);
      if (db > 1) { _tile_loadd(7, vt + 512, 64); _tile_dpbf16ps(3, 0, 7); }
      if (db > 2) { _tile_loadd(1, vt + 1024, 64); _tile_dpbf16ps(4, 0, 1); }
      if (db > 3) { _tile_loadd(7, vt + 1536, 64); _tile_dpbf16ps(5, 0, 7); }
      if (db > 4) { _tile_loadd(1, vt + 2048, 64); _tile_dpbf16ps(6, 0, 1); }
    } else {
      _tile_loadd(1, vt, 64); _tile_dpbf16ps(2, 0, 1);
      _tile_loadd(1, vt + 512, 64); _tile_dpbf16ps(3, 0, 1);
      _tile_loadd(1, vt + 1024, 64); _tile_dpbf16ps(4, 0, 1);
      _tile_loadd(1, vt + 1536, 64); _tile_dpbf16ps(5, 0, 1);
      _tile_loadd(1, vt + 2048, 64); _tile_dpbf16ps(6, 0, 1);
      _tile_loadd(1, vt + 2560, 64); _tile_dpbf16ps(7, 0, 1);
    }
  }
  const int64_t ld = db * 16;
  _tile_stored(2, ob, ld * 4);
  if (db > 1) _tile_stored(3, ob + 16, ld * 4);
  if (db > 2) _tile_stored(4, ob + 32, ld * 4);
  if (db > 3) _tile_stored(5, ob + 48, ld * 4);
  if (db > 4) _tile_stored(6, ob + 64, ld * 4);
  if (db > 5) _tile_stored(7, ob + 80, ld * 4);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t e2 = 0; e2 < d; ++e2) out[i * out_stride + e2] = ob[i * ld + e2] * inv[i];
}

// ---- AVX512_BF16: the same attention with vdpbf16ps (VisionAttentionBf16 where the tiles are off) ---------------
// What it computes is what the tiles compute (above): q, k, v and the probabilities rounded to bf16, sums in fp32,
// the softmax in fp32 (each sum's order differs). A CPU with AVX512_BF16 and no AMX (AMD Zen 4 and later; Intel
// Cooper Lake) multiplies pairs of bf16 with VDPBF16PS: each instruction 16 lanes x 2 products into 16 fp32
// sums, half the instructions of the fp32 kernel's FMAs per product. Lanes are query rows (blocks of 32 rows,
// two vectors): the scores of 8 keys at a time take a key's pair of dims as a broadcast against q packed as
// [D / 2][32 rows][2]; the values take a pair of keys' values of one dim as a broadcast against the
// probabilities packed as [T / 2][32 rows][2] (two keys' probabilities of a row side by side), 8 dims at a time.
// A thread takes one head at a time and keeps its buffers between calls, as the tiles' kernel does. D a multiple
// of 8 up to 256.
constexpr int64_t kDpRows = 32;       // query rows per block (two vectors of 16 lanes)
constexpr int64_t kDpMaxDim = 256;
constexpr int64_t kDpKeyPairs = 64;   // key pairs per chunk of the values (the chunk's probabilities stay in L1)

#define MS_OCR_DPBF16_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// st[j][32] for the JR keys k[j * d ..] = the rows' dot products with them; qp [d / 2][32][2]
template <int JR>
MS_OCR_DPBF16_FN inline void dp_scores_tile(const uint16_t* qp, const uint16_t* k, int64_t d, float* st) {
  __m512 a[JR][2];
  for (int j = 0; j < JR; ++j) a[j][0] = a[j][1] = _mm512_setzero_ps();
  for (int64_t e = 0; e < d / 2; ++e) {
    const __m512bh q0 = (__m512bh)_mm512_loadu_si512(qp + e * 64);
    const __m512bh q1 = (__m512bh)_mm512_loadu_si512(qp + e * 64 + 32);
    for (int j = 0; j < JR; ++j) {
      uint32_t pair;
      std::memcpy(&pair, k + j * d + 2 * e, 4);
      const __m512bh kb = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
      a[j][0] = _mm512_dpbf16_ps(a[j][0], q0, kb);
      a[j][1] = _mm512_dpbf16_ps(a[j][1], q1, kb);
    }
  }
  for (int j = 0; j < JR; ++j) {
    _mm512_storeu_ps(st + j * kDpRows, a[j][0]);
    _mm512_storeu_ps(st + j * kDpRows + 16, a[j][1]);
  }
}

// acc[e][32] += sum over key pairs [p0, p1) of pp[pair][32][2] . vp[pair][e][2] for the 8 dims e0.. (vp: a pair of
// keys' values of each dim side by side, [T / 2][d][2])
MS_OCR_DPBF16_FN inline void dp_values_tile(const uint16_t* pp, const uint16_t* vp, int64_t d, int64_t e0,
                                            int64_t p0, int64_t p1, float* acc) {
  __m512 a[8][2];
  for (int e = 0; e < 8; ++e) {
    a[e][0] = _mm512_loadu_ps(acc + (e0 + e) * kDpRows);
    a[e][1] = _mm512_loadu_ps(acc + (e0 + e) * kDpRows + 16);
  }
  for (int64_t jp = p0; jp < p1; ++jp) {
    const __m512bh w0 = (__m512bh)_mm512_loadu_si512(pp + jp * 64);
    const __m512bh w1 = (__m512bh)_mm512_loadu_si512(pp + jp * 64 + 32);
    const uint16_t* vj = vp + (jp * d + e0) * 2;
    for (int e = 0; e < 8; ++e) {
      uint32_t pair;
      std::memcpy(&pair, vj + 2 * e, 4);
      const __m512bh vb = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
      a[e][0] = _mm512_dpbf16_ps(a[e][0], w0, vb);
      a[e][1] = _mm512_dpbf16_ps(a[e][1], w1, vb);
    }
  }
  for (int e = 0; e < 8; ++e) {
    _mm512_storeu_ps(acc + (e0 + e) * kDpRows, a[e][0]);
    _mm512_storeu_ps(acc + (e0 + e) * kDpRows + 16, a[e][1]);
  }
}

MS_OCR_DPBF16_FN void dp_scores(const uint16_t* qp, const uint16_t* kr, int64_t t, int64_t d, float* st) {
  int64_t j = 0;
  for (; j + 8 <= t; j += 8) dp_scores_tile<8>(qp, kr + j * d, d, st + j * kDpRows);
  for (; j < t; ++j) dp_scores_tile<1>(qp, kr + j * d, d, st + j * kDpRows);
}

MS_OCR_DPBF16_FN void dp_values(const uint16_t* pp, const uint16_t* vp, int64_t pairs, int64_t d, float* acc) {
  for (int64_t p0 = 0; p0 < pairs; p0 += kDpKeyPairs) {
    const int64_t p1 = p0 + kDpKeyPairs < pairs ? p0 + kDpKeyPairs : pairs;
    for (int64_t e0 = 0; e0 < d; e0 += 8) dp_values_tile(pp, vp, d, e0, p0, p1, acc);
  }
}

// One block of `rows` (<= 32) query rows of one head: out [rows, d] (row stride out_stride). qp [d / 2][32][2]
// (the rows' q, rounded, zeros past `rows`), kr [t][d] (k rounded), vp [t / 2 rounded up][d][2] (v rounded, key
// pairs interleaved, zeros past t); st [t][32], pp [pairs][32][2] and acc [d][32] the thread's scratch.
void dp_attn_task(const uint16_t* qp, const uint16_t* kr, const uint16_t* vp, int64_t t, int64_t d, float scale,
                  float* st, uint16_t* pp, float* acc, float* out, int64_t rows, int64_t out_stride) {
  constexpr int kV = static_cast<int>(kDpRows / kVL);  // vectors of rows
  dp_scores(qp, kr, t, d, st);
  // softmax down the columns (each lane a row) in fp32: exp(s * scale - max * scale)
  vf mx[kV], sum[kV];
  for (int r = 0; r < kV; ++r) {
    mx[r] = vset(-INFINITY);
    sum[r] = vf{};
  }
  for (int64_t j = 0; j < t; ++j)
    for (int r = 0; r < kV; ++r) mx[r] = vmax(mx[r], vload(st + j * kDpRows + r * kVL));
  const vf vs = vset(scale);
  for (int r = 0; r < kV; ++r) mx[r] = mx[r] * vs;  // scale > 0
  // probabilities rounded to bf16, two keys' side by side in each 32-bit lane; their sum in fp32
  const int64_t pairs = (t + 1) / 2;
  for (int64_t jp = 0; jp < pairs; ++jp) {
    const int64_t j = 2 * jp;
    for (int r = 0; r < kV; ++r) {
      const vu lo = round_bits(vexp(vload(st + j * kDpRows + r * kVL) * vs - mx[r]));
      const vu hi = j + 1 < t ? round_bits(vexp(vload(st + (j + 1) * kDpRows + r * kVL) * vs - mx[r])) : vu{};
      sum[r] += bits_float(lo) + bits_float(hi);
      const vu packed = lo | (hi << 16);
      std::memcpy(pp + jp * 64 + r * kVL * 2, &packed, sizeof packed);
    }
  }
  float inv[kDpRows];
  for (int r = 0; r < kV; ++r) vstore(inv + r * kVL, vset(1.f) / sum[r]);
  std::memset(acc, 0, sizeof(float) * d * kDpRows);
  dp_values(pp, vp, pairs, d, acc);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t e = 0; e < d; ++e) out[i * out_stride + e] = acc[e * kDpRows + i] * inv[i];
}

// q [B, H, S, D], k, v [B, H, T, D] fp32 (D a multiple of 8, at most kDpMaxDim), scale [1] -> out as
// attention_bf16 writes it.
int attention_dpbf16(const float* q, const float* k, const float* v, float scale, float* out, int64_t b,
                     int64_t h, int64_t s, int64_t t, int64_t d, bool rows_out) {
  const int64_t heads = b * h, pairs = (t + 1) / 2;
  g_vision_attention_calls.fetch_add(1);
  const int threads = static_cast<int>(heads < g_threads ? heads : g_threads);
#pragma omp parallel num_threads(threads)
  {
    thread_local std::vector<uint16_t> kr, vp, qp, pp, row;
    thread_local std::vector<float> st, acc;
    kr.resize(t * d); vp.resize(pairs * d * 2); qp.resize(d / 2 * kDpRows * 2); pp.resize(pairs * kDpRows * 2);
    row.resize(2 * d); st.resize(t * kDpRows); acc.resize(d * kDpRows);
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < heads; ++bh) {
      const float *qh = q + bh * s * d, *kh = k + bh * t * d, *vh = v + bh * t * d;
      for (int64_t key = 0; key < t; ++key) round_row(kh + key * d, d, kr.data() + key * d, d);
      uint32_t* v32 = reinterpret_cast<uint32_t*>(vp.data());
      for (int64_t jp = 0; jp < pairs; ++jp) {
        round_row(vh + 2 * jp * d, d, row.data(), d);
        if (2 * jp + 1 < t) round_row(vh + (2 * jp + 1) * d, d, row.data() + d, d);
        else std::memset(row.data() + d, 0, d * 2);
        for (int64_t e = 0; e < d; ++e)
          v32[jp * d + e] = static_cast<uint32_t>(row[e]) | static_cast<uint32_t>(row[d + e]) << 16;
      }
      uint32_t* q32 = reinterpret_cast<uint32_t*>(qp.data());
      for (int64_t r0 = 0; r0 < s; r0 += kDpRows) {
        const int64_t rows = s - r0 < kDpRows ? s - r0 : kDpRows;
        std::memset(qp.data(), 0, qp.size() * 2);
        for (int64_t i = 0; i < rows; ++i) {
          round_row(qh + (r0 + i) * d, d, row.data(), d);
          const uint32_t* src = reinterpret_cast<const uint32_t*>(row.data());
          for (int64_t e = 0; e < d / 2; ++e) q32[e * kDpRows + i] = src[e];
        }
        const HeadRows o = head_rows(out, bh, r0, h, s, d, rows_out);
        dp_attn_task(qp.data(), kr.data(), vp.data(), t, d, scale, st.data(), pp.data(), acc.data(), o.at, rows,
                     o.stride);
      }
    }
  }
  return 0;
}

}  // namespace

// q [B, H, S, D], k, v [B, H, T, D] fp32 (as many kv heads as query heads), scale [1] -> out [B, H, S, D] or,
// rows_out, [B, S, H * D]: on the tiles (D <= kAmxMaxDim), else with VDPBF16PS (attention_dpbf16: D a multiple of
// 8 up to kDpMaxDim). 1 when neither is on for these shapes.
int attention_bf16(int nparam, void** params, int* ndims, int64_t** shapes, bool rows_out) {
  if (nparam != 5 || ndims[0] != 4 || ndims[1] != 4 || ndims[2] != 4) return 1;
  const int64_t b = shapes[0][0], h = shapes[0][1], s = shapes[0][2], d = shapes[0][3], t = shapes[1][2];
  if (d < 1 || t < 1 || s < 1 || shapes[1][0] != b || shapes[1][1] != h || shapes[1][3] != d) return 1;
  const float *q = static_cast<const float*>(params[0]), *k = static_cast<const float*>(params[1]),
              *v = static_cast<const float*>(params[2]);
  const float scale = static_cast<const float*>(params[3])[0];
  float* out = static_cast<float*>(params[4]);
  if (!g_amx || d > kAmxMaxDim) {
    if (!g_dpbf16 || d % 8 != 0 || d > kDpMaxDim) return 1;
    return attention_dpbf16(q, k, v, scale, out, b, h, s, t, d, rows_out);
  }
  const int64_t dp = (d + 31) / 32 * 32, db = (d + 15) / 16, s16 = (s + 15) / 16 * 16;
  const int64_t t16 = (t + 15) / 16 * 16, t32 = (t + 31) / 32 * 32, heads = b * h;
  const int64_t qsz = s16 * dp, ksz = t16 / 16 * (dp / 32) * 512, vsz = t32 / 32 * db * 512;
  g_vision_attention_calls.fetch_add(1);
  const int threads = static_cast<int>(heads < g_threads ? heads : g_threads);
  // a head per task: its q, k and v packed by the thread that then runs its row blocks (in that core's cache);
  // buffers kept per thread between calls (fresh pages for each call cost ~15 % in page faults)
#pragma omp parallel num_threads(threads)
  {
    thread_local std::vector<uint16_t> qp, kp, vp, pb, row, pair;
    thread_local std::vector<float> st, ob;
    qp.resize(qsz); kp.resize(ksz); vp.resize(vsz); pb.resize(16 * t32); row.resize(dp); pair.resize(2 * db * 16);
    st.resize(16 * t16); ob.resize(16 * db * 16);
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < heads; ++bh) {
      const float *qh = q + bh * s * d, *kh = k + bh * t * d, *vh = v + bh * t * d;
      uint16_t *qo = qp.data(), *ko = kp.data(), *vo = vp.data();
      for (int64_t i = 0; i < s16; ++i) {
        if (i < s) round_row(qh + i * d, d, qo + i * dp, dp);
        else std::memset(qo + i * dp, 0, dp * 2);
      }
      // k: block (key block kb, dims step ds) = [16 dim pairs][16 keys][2], a key's dims pairs 64 bytes apart
      std::memset(ko, 0, ksz * 2);
      for (int64_t key = 0; key < t; ++key) {
        round_row(kh + key * d, d, row.data(), dp);
        const int64_t kb = key / 16, j = key % 16;
        for (int64_t ds = 0; ds < dp / 32; ++ds) {
          uint32_t* blk = reinterpret_cast<uint32_t*>(ko + (kb * (dp / 32) + ds) * 512);
          const uint32_t* src = reinterpret_cast<const uint32_t*>(row.data() + ds * 32);
          for (int64_t i = 0; i < 16; ++i) blk[i * 16 + j] = src[i];
        }
      }
      // v: block (key step ks, dims block c) = [16 key pairs][16 dims][2]: two keys' dims interleaved
      std::memset(vo, 0, vsz * 2);
      for (int64_t key = 0; key < t; key += 2) {
        round_row(vh + key * d, d, pair.data(), db * 16);
        if (key + 1 < t) round_row(vh + (key + 1) * d, d, pair.data() + db * 16, db * 16);
        else std::memset(pair.data() + db * 16, 0, db * 16 * 2);
        const int64_t ks = key / 32, i = key % 32 / 2;
        for (int64_t c = 0; c < db; ++c) {
          uint16_t* blk = vo + (ks * db + c) * 512 + i * 32;
          for (int64_t j = 0; j < 16; ++j) {
            blk[j * 2] = pair[c * 16 + j];
            blk[j * 2 + 1] = pair[db * 16 + c * 16 + j];
          }
        }
      }
      amx_begin();
      for (int64_t r0 = 0; r0 < s; r0 += 16) {
        const int64_t rows = s - r0 < 16 ? s - r0 : 16;
        const HeadRows o = head_rows(out, bh, r0, h, s, d, rows_out);
        amx_attn_task(qo + r0 * dp, ko, vo, dp, t16, t32, db, t, scale, st.data(), pb.data(), ob.data(), o.at,
                      rows, d, o.stride);
      }
      amx_end();
    }
  }
  return 0;
}

}  // namespace ms_ocr
#endif  // MS_OCR_AMX
