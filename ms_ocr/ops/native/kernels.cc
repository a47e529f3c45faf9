// CPU kernels for MindSpore Custom(func_type="aot") operators, built on first use by ms_ocr/ops/native/__init__.py.
//
// Entry points follow MindSpore's AOT CPU ABI: params holds the inputs then the outputs; ndims/shapes/dtypes
// describe each. Every kernel computes in fp32 and reads contiguous (row-major) tensors; the decode kernels'
// weights (MatMulT's w, DecodeLayer's weights) may instead be bfloat16 (dtype "bfloat16", raw 16-bit words),
// widened to fp32 in registers (bits << 16: exact), so a bf16 weight gives bit for bit the result of the same
// weight widened to fp32 beforehand, at half the bytes read. The kernels: MatMulT (a decode
// step's products against a very large weight, ops/linear.py), DecodeLayer (a dense decoder layer of a decode
// step, ops/decode_layer.py), VisionAttention (unmasked attention, ops/attention.py), GeluTanh / GeluErf
// (ops/activation.py), GemmBf16 (a product in bf16 with fp32 accumulation through MindSpore's own oneDNN,
// ops/linear.py; --dtype bf16 on CPUs with bf16 dot products).
//
// One source for every ISA: the kernels are written over `vf`, a GCC/Clang vector of kVL floats whose width is
// the build's widest SIMD level (64 bytes with AVX-512, 32 with AVX2+FMA, 16 with aarch64 NEON or x86 SSE2;
// 16 elsewhere, where the compiler lowers it to scalar code), and their register tiles are sized from the
// register count. Only the few operations a vector type has no operator for (horizontal sum, masked tail
// load, the bf16 load, FMA) have per-ISA bodies. FMAs come from contraction (-ffp-contract=fast, set by the build),
// except in the products whose fp32 and bf16 forms must agree bit for bit, which call vfma.
#include <dlfcn.h>
#include <omp.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#define MS_OCR_VBYTES 64
#define MS_OCR_VREGS 32
#define MS_OCR_ISA "avx512"
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define MS_OCR_VBYTES 32
#define MS_OCR_VREGS 16
#define MS_OCR_ISA "avx2"
#elif defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
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

namespace {

// ---- the vector layer ---------------------------------------------------------------------------------------

constexpr int kVL = MS_OCR_VBYTES / 4;  // floats per vector
constexpr int kVRegs = MS_OCR_VREGS;     // vector registers the tiles may fill
typedef float vf __attribute__((vector_size(MS_OCR_VBYTES)));
typedef int32_t vi __attribute__((vector_size(MS_OCR_VBYTES)));

typedef uint16_t bf16;  // a bfloat16's bits
typedef uint16_t vh __attribute__((vector_size(MS_OCR_VBYTES / 2)));  // kVL bfloat16s
typedef uint32_t vu __attribute__((vector_size(MS_OCR_VBYTES)));

inline vf vload(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
// kVL bfloat16s widened to floats: zero-extend and shift into the high half; exact. The loads spell out the
// one instruction pair each level has (vpmovzxwd from memory + vpslld; NEON shll #16): GCC 12 lowers the
// generic __builtin_convertvector, at AVX2 and AVX-512 alike, to two half-width zero-extends, a byte shift and
// an insert per vector, which made the bf16 decode products shuffle-bound (Zen 3, the head's one-row product:
// 10.7 ms in bf16 against 12.3 ms in fp32; 7.9 ms with this load).
inline vf widen(vh h) { return (vf)(__builtin_convertvector(h, vu) << 16); }
inline vf vload(const bf16* p) {
#if defined(__AVX512F__)
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
#elif defined(__AVX2__)
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
#elif defined(__aarch64__) && defined(__ARM_NEON)
  return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
#else
  vh h;
  std::memcpy(&h, p, sizeof h);
  return widen(h);
#endif
}
// kVL int8s (weight-only int8, --quantize int8) as floats: sign-extend and convert; exact. The per-row scale is
// applied to each dot product afterwards (scale_rows).
typedef int8_t vq __attribute__((vector_size(MS_OCR_VBYTES / 4)));  // kVL int8s
inline vf vload(const int8_t* p) {
#if defined(__AVX512F__)
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#elif defined(__AVX2__)
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
#else
  vq q;
  std::memcpy(&q, p, sizeof q);
  return __builtin_convertvector(q, vf);
#endif
}
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
// makes the compiler hold v in a vector register from here on (an empty asm that "changes" it), so that it
// cannot fold the load that produced v into each instruction using it
inline void in_register(vf& v) {
#if defined(__x86_64__) && defined(__AVX512F__)
  __asm__("" : "+v"(v));
#elif defined(__x86_64__) && defined(__SSE2__)
  __asm__("" : "+x"(v));
#elif defined(__aarch64__)
  __asm__("" : "+w"(v));
#else
  (void)v;
#endif
}
// a * b + c with one rounding, spelled as the ISA's FMA: contraction alone is not enough where results must
// not depend on the build's -mtune (GCC's Zen tuning splits an FMA whose accumulator is a loop's only
// dependency chain into a multiply and an add, so the same loop over fp32 and bf16 weights rounded differently)
inline vf vfma(vf a, vf b, vf c) {
#if defined(__AVX512F__)
  return _mm512_fmadd_ps(a, b, c);
#elif defined(__AVX2__)
  return _mm256_fmadd_ps(a, b, c);
#elif defined(__aarch64__) && defined(__ARM_NEON)
  return vfmaq_f32(c, a, b);
#else
  return a * b + c;
#endif
}
inline vf vset(float a) { return a - vf{}; }  // (not vf{} + a: 0 + a is no identity for a = -0)
inline vf vmax(vf a, vf b) { return a > b ? a : b; }
inline vf vmin(vf a, vf b) { return a < b ? a : b; }
inline vf vabs(vf a) { return (vf)((vi)a & 0x7fffffff); }

// the first n (< kVL) floats at p, the other lanes zero; never reads past p + n
inline vf vload_tail(const float* p, int64_t n) {
#if defined(__AVX512F__)
  return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1u), p);
#elif defined(__AVX2__)
  const vi lanes = {0, 1, 2, 3, 4, 5, 6, 7};
  return _mm256_maskload_ps(p, (__m256i)(lanes < static_cast<int32_t>(n)));
#else
  vf v = {};
  for (int64_t i = 0; i < n; ++i) v[i] = p[i];
  return v;
#endif
}
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

inline float vsum(vf v) {
#if defined(__AVX512F__)
  return _mm512_reduce_add_ps(v);
#elif defined(__AVX2__)
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
#elif defined(__aarch64__) && defined(__ARM_NEON)
  return vaddvq_f32(v);
#else
  float s = 0.f;
  for (int i = 0; i < kVL; ++i) s += v[i];
  return s;
#endif
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

int g_threads = 1;
std::atomic<int64_t> g_matmul_t_calls{0};  // read by tests: which products took this kernel
std::atomic<int64_t> g_moe_experts_calls{0};
std::atomic<int64_t> g_decode_layer_calls{0};
std::atomic<int64_t> g_vision_attention_calls{0};
std::atomic<int64_t> g_gelu_calls{0};

template <typename B>
float dot(const float* a, const B* b, int64_t n) {
  vf acc = {};
  int64_t i = 0;
  for (; i + kVL <= n; i += kVL) acc = vfma(vload(a + i), vload(b + i), acc);
  if (i < n) acc = vfma(vload_tail(a + i, n - i), vload_tail(b + i, n - i), acc);
  return vsum(acc);
}

// out[j * stride + i] = dot(q + j * d, k_i, d) + bias_i for `count` query rows against the n key rows
// k_i = keys + rows[i] * d, bias_i = mask[rows[i]]: the scores of one attention group over the slots it sees.
// Two key rows at a time, four query rows each (eight independent accumulator chains: one row's four chains of
// d / kVL dependent FMAs left the loop bound by FMA latency); each dot's products and sums are those of dot(),
// in the same order (bit-identical).
constexpr int64_t kAhead = 8;  // key/value rows prefetched ahead of the attention loops

template <int J, typename KT>
inline void dots_pair(const float* q, const KT* k0, const KT* k1, int64_t d, float* out0, float* out1,
                      int64_t stride) {
  vf a0[J] = {}, a1[J] = {};
  int64_t i = 0;
  for (; i + kVL <= d; i += kVL) {
    const vf kv0 = vload(k0 + i), kv1 = vload(k1 + i);
    for (int j = 0; j < J; ++j) {
      const vf qv = vload(q + j * d + i);
      a0[j] = vfma(qv, kv0, a0[j]);
      a1[j] = vfma(qv, kv1, a1[j]);
    }
  }
  if (i < d) {
    const vf kv0 = vload_tail(k0 + i, d - i), kv1 = vload_tail(k1 + i, d - i);
    for (int j = 0; j < J; ++j) {
      const vf qv = vload_tail(q + j * d + i, d - i);
      a0[j] = vfma(qv, kv0, a0[j]);
      a1[j] = vfma(qv, kv1, a1[j]);
    }
  }
  for (int j = 0; j < J; ++j) {
    out0[j * stride] = vsum(a0[j]);
    out1[j * stride] = vsum(a1[j]);
  }
}

template <typename KT>
inline void attention_scores(const float* q, int64_t count, const KT* keys, const float* mask,
                             const int64_t* rows, int64_t n, int64_t d, float* out, int64_t stride) {
  for (int64_t j = 0; j < count; j += 4) {
    const int64_t jn = count - j < 4 ? count - j : 4;
    const float* qj = q + j * d;
    float* oj = out + j * stride;
    int64_t i = 0;
    for (; i + 2 <= n; i += 2) {
      const KT *k0 = keys + rows[i] * d, *k1 = keys + rows[i + 1] * d;
      if (i + kAhead + 1 < n) {
        const char *f0 = reinterpret_cast<const char*>(keys + rows[i + kAhead] * d),
                   *f1 = reinterpret_cast<const char*>(keys + rows[i + kAhead + 1] * d);
        for (int64_t l = 0; l < d * static_cast<int64_t>(sizeof(KT)); l += 64) {
          __builtin_prefetch(f0 + l, 0, 3);
          __builtin_prefetch(f1 + l, 0, 3);
        }
      }
      switch (jn) {
        case 4: dots_pair<4>(qj, k0, k1, d, oj + i, oj + i + 1, stride); break;
        case 3: dots_pair<3>(qj, k0, k1, d, oj + i, oj + i + 1, stride); break;
        case 2: dots_pair<2>(qj, k0, k1, d, oj + i, oj + i + 1, stride); break;
        default: dots_pair<1>(qj, k0, k1, d, oj + i, oj + i + 1, stride); break;
      }
      for (int64_t u = 0; u < jn; ++u) {
        oj[u * stride + i] += mask[rows[i]];
        oj[u * stride + i + 1] += mask[rows[i + 1]];
      }
    }
    for (; i < n; ++i)
      for (int64_t u = 0; u < jn; ++u) oj[u * stride + i] = dot(qj + u * d, keys + rows[i] * d, d) + mask[rows[i]];
  }
}

// out[j] = sum_i p[j * stride + i] * inv[j] * values_i + p[j * stride + n] * inv[j] * v_new (i < n in order,
// values_i = values + rows[i] * d) for `count` query rows: the attention-weighted sum of one group's value rows.
// The sums stay in registers, J rows x C vectors of columns at a time (one pass over the value rows per column
// block, each value row read once overall); the same FMAs in the same order as accumulating each row's sum in
// memory one value row at a time (bit-identical), without that loop's store per FMA.
template <int J, int C, typename KT>
inline void weighted_block(const float* p, int64_t stride, const float* inv, const KT* values,
                           const int64_t* rows, int64_t n, const float* v_new, int64_t d, int64_t e, float* out) {
  vf acc[J][C] = {};
  auto add = [&](const auto* row, int64_t i) {
    vf v[C];
    for (int c = 0; c < C; ++c) v[c] = vload(row + c * kVL);
    for (int j = 0; j < J; ++j) {
      const vf a = vset(p[j * stride + i] * inv[j]);
      for (int c = 0; c < C; ++c) acc[j][c] = vfma(a, v[c], acc[j][c]);
    }
  };
  for (int64_t i = 0; i < n; ++i) {
    if (i + kAhead < n)
      for (int64_t l = 0; l < C * kVL * static_cast<int64_t>(sizeof(KT)); l += 64)
        __builtin_prefetch(reinterpret_cast<const char*>(values + rows[i + kAhead] * d + e) + l, 0, 3);
    add(values + rows[i] * d + e, i);
  }
  add(v_new + e, n);  // the token's own value row, last
  for (int j = 0; j < J; ++j)
    for (int c = 0; c < C; ++c) vstore(out + j * d + e + c * kVL, acc[j][c]);
}

template <int J, typename KT>
inline void weighted_rows(const float* p, int64_t stride, const float* inv, const KT* values,
                          const int64_t* rows, int64_t n, const float* v_new, int64_t d, float* out) {
  constexpr int C = kVRegs >= 32 ? 4 : 2;
  int64_t e = 0;
  for (; e + C * kVL <= d; e += C * kVL) weighted_block<J, C>(p, stride, inv, values, rows, n, v_new, d, e, out);
  for (; e + kVL <= d; e += kVL) weighted_block<J, 1>(p, stride, inv, values, rows, n, v_new, d, e, out);
  for (; e < d; ++e)  // columns past the last full vector (head dims that are no multiple of kVL)
    for (int j = 0; j < J; ++j) {
      float acc = 0.f;
      for (int64_t i = 0; i <= n; ++i)
        acc = std::fma(p[j * stride + i] * inv[j], i < n ? to_float(values[rows[i] * d + e]) : v_new[e], acc);
      out[j * d + e] = acc;
    }
}

template <typename KT>
inline void attention_values(const float* p, int64_t count, int64_t stride, const float* inv, const KT* values,
                             const int64_t* rows, int64_t n, const float* v_new, int64_t d, float* out) {
  for (int64_t j = 0; j < count; j += 4) {
    const float *pj = p + j * stride, *ij = inv + j;
    float* oj = out + j * d;
    switch (count - j < 4 ? count - j : 4) {
      case 4: weighted_rows<4>(pj, stride, ij, values, rows, n, v_new, d, oj); break;
      case 3: weighted_rows<3>(pj, stride, ij, values, rows, n, v_new, d, oj); break;
      case 2: weighted_rows<2>(pj, stride, ij, values, rows, n, v_new, d, oj); break;
      default: weighted_rows<1>(pj, stride, ij, values, rows, n, v_new, d, oj); break;
    }
  }
}

// ---- matrix-vector products ---------------------------------------------------------------------------------
// y[m, o] = sum_i x[m, i] W[o, i] for rows o in [o0, o1): R weight rows at a time against all M (<= 8)
// activation rows. Memory bound: each weight row is read once, and R concurrent row streams keep more
// reads in flight than the hardware prefetcher alone (measured with AVX-512: 2 rows ~29 GB/s, 8 rows ~41 GB/s).
// While a block is multiplied, the next block of the range (R rows, contiguous) is prefetched into L2, a
// share of its cache lines per step: the layers' rows of 1,024 (2 KB in bf16) end before the hardware
// prefetcher has ramped up on each (docs/native-kernels.md, "Prefetching the next block").
// W: float or bf16 (widened as loaded; the same arithmetic in the same order, so the same result as its fp32 copy).
// With several activation rows the R weight vectors of a step are loaded first and each row's activation vector
// once, held in a register for its R products (in_register): left to itself GCC folds the activation loads into
// the FMAs, one load per product, and the loads, not the FMAs, bound the loop (8 rows: 24 loads per 24 FMAs;
// ~75 GFLOP/s against ~130-200 with the loads hoisted, docs/native-kernels.md "Several rows"). Each output's
// products and sums are the same, in the same order, whatever M and R: bit-identical to the one-row kernel.
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
// on the Zen 4 (AVX-512) and its x86-64-v3 build (docs/native-kernels.md, "Several rows").
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

using GemvRowsGFn = void (*)(const float*, const int8_t*, const float*, float*, int64_t, int64_t, int64_t, int64_t,
                             int64_t);
constexpr GemvRowsGFn kGemvRowsG[] = {nullptr, gemv_rows_g<1>, gemv_rows_g<2>, gemv_rows_g<3>, gemv_rows_g<4>,
                                      gemv_rows_g<5>, gemv_rows_g<6>, gemv_rows_g<7>, gemv_rows_g<8>};

// ---- the decode kernels' thread team ---------------------------------------------------------------------
// A decode step is ~20 kernel calls of ~1 ms, each with up to nine points where its threads wait for each
// other. libgomp spins only ~100 times at such a point once the process holds more OpenMP threads than CPUs
// (MindSpore launches some kernels from its own threads, each of which gets an OpenMP pool), then sleeps in the
// kernel: measured in a PaddleOCR-VL decode, ~88 sleeps per token per thread, and each DecodeLayer 0.3 ms slower
// than the same layer in a process of its own. The decode kernels (DecodeLayer, the head's MatMulT) therefore run
// on this team instead: g_threads - 1 workers that spin between jobs for up to kIdleSpin, then sleep, and a
// spinning barrier. The caller is thread 0. A call while the team is busy (another thread's kernel) runs alone.

inline void cpu_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

// A waiting team thread spins, then yields its CPU between checks (a partner may have lost its CPU to another
// process: the test suite runs two processes on two cores), and between jobs sleeps after kIdleSpin.
constexpr int kBarrierPauses = 1 << 11;
constexpr auto kIdleSpin = std::chrono::milliseconds(2);  // between jobs: covers a step's host work

template <typename Done>
inline void spin_until(Done done) {
  for (int i = 0; !done(); ++i) {
    if (i < kBarrierPauses) cpu_pause();
    else std::this_thread::yield();
  }
}

class SpinBarrier {
 public:
  explicit SpinBarrier(int n) : n_(n) {}
  void wait() {
    if (n_ <= 1) return;
    const int gen = gen_.load(std::memory_order_acquire);
    if (count_.fetch_add(1, std::memory_order_acq_rel) == n_ - 1) {
      count_.store(0, std::memory_order_relaxed);
      gen_.fetch_add(1, std::memory_order_release);
      return;
    }
    spin_until([&] { return gen_.load(std::memory_order_acquire) != gen; });
  }

 private:
  const int n_;
  std::atomic<int> count_{0}, gen_{0};
};

// A job's view of the team: this thread's index, the team size and the team's barrier.
struct TeamCtx {
  int tid, n;
  SpinBarrier* barrier;
  void sync() const { barrier->wait(); }
};

class SpinTeam {
 public:
  using Fn = void (*)(void*, const TeamCtx&);

  explicit SpinTeam(int size) : size_(size) {}

  static void start(const std::shared_ptr<SpinTeam>& team) {
    for (int tid = 1; tid < team->size_; ++tid) std::thread(work, team, tid).detach();
  }

  void stop() {
    stop_.store(true);
    epoch_.fetch_add(1);
    std::lock_guard<std::mutex> lk(m_);
    cv_.notify_all();
  }

  int size() const { return size_; }

  // Runs fn(ctx, team context) on min(n, size) threads (the caller is thread 0); false, without running it,
  // when another caller holds the team.
  bool run(int n, Fn fn, void* ctx) {
    if (busy_.exchange(true, std::memory_order_acquire)) return false;
    SpinBarrier barrier(n < size_ ? n : size_);
    fn_ = fn;
    ctx_ = ctx;
    barrier_ = &barrier;
    job_n_ = n < size_ ? n : size_;
    pending_.store(size_ - 1, std::memory_order_relaxed);
    epoch_.fetch_add(1);  // seq_cst: ordered before the sleepers_ load below (see work())
    if (sleepers_.load() > 0) {
      std::lock_guard<std::mutex> lk(m_);
      cv_.notify_all();
    }
    fn(ctx, TeamCtx{0, job_n_, &barrier});
    spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; });
    busy_.store(false, std::memory_order_release);
    return true;
  }

 private:
  static void work(std::shared_ptr<SpinTeam> t, int tid) {
    uint64_t seen = 0;  // the epoch the team starts at: a job run before this thread got here is still ahead
    for (;;) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 1; t->epoch_.load(std::memory_order_acquire) == seen; ++i) {
        if (i % 256) cpu_pause();
        else std::this_thread::yield();
        if (i % 1024 == 0 && std::chrono::steady_clock::now() - t0 > kIdleSpin) {
          std::unique_lock<std::mutex> lk(t->m_);
          t->sleepers_.fetch_add(1);  // seq_cst: a run() that misses it has already advanced epoch_
          t->cv_.wait(lk, [&] { return t->epoch_.load() != seen; });
          t->sleepers_.fetch_sub(1);
        }
      }
      seen = t->epoch_.load(std::memory_order_acquire);
      if (t->stop_.load()) return;
      if (tid < t->job_n_) t->fn_(t->ctx_, TeamCtx{tid, t->job_n_, t->barrier_});
      t->pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  const int size_;
  std::atomic<uint64_t> epoch_{0};
  std::atomic<int> pending_{0}, sleepers_{0};
  std::atomic<bool> busy_{false}, stop_{false};
  Fn fn_ = nullptr;
  void* ctx_ = nullptr;
  SpinBarrier* barrier_ = nullptr;
  int job_n_ = 1;
  std::mutex m_;
  std::condition_variable cv_;
};

std::mutex g_team_mutex;
std::shared_ptr<SpinTeam> g_team;

// The team of g_threads threads (made on first use, or again after the thread count changed). Like MindSpore's
// own runtime, it does not survive a fork: a forked child must not run kernels.
std::shared_ptr<SpinTeam> decode_team() {
  std::lock_guard<std::mutex> lk(g_team_mutex);
  if (!g_team || g_team->size() != g_threads) {
    if (g_team) g_team->stop();
    g_team = std::make_shared<SpinTeam>(g_threads);
    SpinTeam::start(g_team);
  }
  return g_team;
}

// Runs f(const TeamCtx&) on up to n threads of the decode team (alone when n is 1 or the team is busy).
template <typename F>
void team_run(int n, F&& f) {
  if (n > 1) {
    const auto team = decode_team();
    if (team->size() > 1 &&
        team->run(n, [](void* c, const TeamCtx& t) { (*static_cast<F*>(c))(t); }, &f))
      return;
  }
  SpinBarrier alone(1);
  f(TeamCtx{0, 1, &alone});
}


// Rows [0, out) of a product run over the team as rows(o, o1), in chunks of `chunk` rows handed out as threads
// ask: the calling thread may be niced below MindSpore's kernel threads (device.lower_launcher_priority), and a
// static split would wait for its half.
template <typename F>
void team_rows(int64_t out, int64_t chunk, F rows) {
  const int64_t chunks = (out + chunk - 1) / chunk;
  std::atomic<int64_t> next{0};
  team_run(chunks > 1 ? g_threads : 1, [&](const TeamCtx&) {
    for (int64_t c = next.fetch_add(1); c < chunks; c = next.fetch_add(1))
      rows(c * chunk, (c + 1) * chunk < out ? (c + 1) * chunk : out);
  });
}

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


// This thread's contiguous share [lo, hi) of `total` elements, shares a multiple of `align`.
inline std::pair<int64_t, int64_t> team_share(int64_t total, int64_t align, const TeamCtx& team) {
  const int64_t share = ((total + team.n - 1) / team.n + align - 1) / align * align;
  const int64_t lo = team.tid * share < total ? team.tid * share : total;
  return {lo, lo + share < total ? lo + share : total};
}

// ---- the fused decoder layer of one decode step ----------------------------------------------------------

// out = w * x / sqrt(mean(x^2) + eps)
void rms_norm(const float* x, const float* w, float* out, int64_t n, float eps) {
  const float inv = 1.f / std::sqrt(dot(x, x, n) / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = w[i] * (x[i] * inv);
}

// x <- x * cos + rotate_half(x) * sin, rotate_half(x) = concat(-x[D/2:], x[:D/2]) (the general form: XD-RoPE's
// halves differ too)
void rope(float* x, const float* cos, const float* sin, int64_t d) {
  const int64_t half = d / 2;
  float rot[512];
  for (int64_t i = 0; i < half; ++i) {
    rot[i] = -x[half + i];
    rot[half + i] = x[i];
  }
  for (int64_t i = 0; i < d; ++i) x[i] = x[i] * cos[i] + rot[i] * sin[i];
}

// x <- silu(g) * u = g / (1 + e^-g) * u
void silu_mul(const float* g, const float* u, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + kVL <= n; i += kVL) {
    const vf gv = vload(g + i);
    vstore(out + i, gv / (vset(1.f) + vexp(-gv)) * vload(u + i));
  }
  for (; i < n; ++i) out[i] = g[i] / (1.f + std::exp(-g[i])) * u[i];
}

// g[i] = silu(g[i]) * u[i] for i < n over the team, a contiguous kVL-aligned share per thread (so each element's
// arithmetic is the same whatever the split), then the team's barrier.
void team_silu_mul(float* g, const float* u, int64_t n, const TeamCtx& team) {
  const auto [lo, hi] = team_share(n, kVL, team);
  silu_mul(g + lo, u + lo, g + lo, hi - lo);
  team.sync();
}

// e[i] = exp(s[i] - mx) for i < n; returns the sum
float exp_sum(float* s, int64_t n, float mx) {
  vf acc = {};
  const vf m = vset(mx);
  int64_t i = 0;
  for (; i + kVL <= n; i += kVL) {
    const vf e = vexp(vload(s + i) - m);
    vstore(s + i, e);
    acc += e;
  }
  float sum = vsum(acc);
  for (; i < n; ++i) {
    s[i] = std::exp(s[i] - mx);
    sum += s[i];
  }
  return sum;
}

template <typename W>
using GemvRowsFn = void (*)(const float*, const W*, float*, int64_t, int64_t, int64_t, int64_t);
template <typename W>
constexpr GemvRowsFn<W> kGemvRows[] = {nullptr, gemv_rows_m<1, W>, gemv_rows_m<2, W>, gemv_rows_m<3, W>,
                                       gemv_rows_m<4, W>, gemv_rows_m<5, W>, gemv_rows_m<6, W>, gemv_rows_m<7, W>,
                                       gemv_rows_m<8, W>};

// A weight operand: fp32, bfloat16 words, or int8 with one fp32 scale per row (weight-only int8: row o of the
// product is scale[o] * (x . q[o])).
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

inline bool is_bf16(const char* dtype) { return dtype != nullptr && std::strcmp(dtype, "bfloat16") == 0; }
inline bool is_int8(const char* dtype) { return dtype != nullptr && std::strcmp(dtype, "int8") == 0; }

// ---- AMX: a decode step's products in bf16 on Intel's tile unit (DecodeLayerBf16, MatMulTBf16) ---------------
// With --dtype bf16 on a CPU with AMX-BF16 (Sapphire Rapids and later Xeons), a decode step's products against
// bf16 weights round the step's activation rows to bf16 and multiply them on the tiles with fp32 accumulation
// (TDPBF16PS): weight rows are the A tiles, loaded straight from the weight as it is stored (16 rows x 32
// columns a tile, no packing), the activation rows the B tile (packed once per product: pairs of columns
// interleaved, up to 16 rows, zeros past M), C = 16 outputs x 16 rows. One product costs what reading its
// weight costs whatever M is (measured, 2 threads, 8 rows: 16-18 GB/s against 20 for a bare read of the same
// weights, where the fp32 matrix-vector kernel's 8 rows are bound by FMAs), so a batched step of 8 sequences
// costs about what one sequence's step does. A single row stays on the fp32 kernel (no measurement showed the tiles
// faster for it; docs/native-kernels.md), so a sequence decoded alone gets the exact products and one decoded in a
// batch the rounded ones. Linux hands out the tile state only on request (arch_prctl), done once in
// ms_ocr_amx_init.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define MS_OCR_AMX 1
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

bool g_amx = false;  // ms_ocr_amx_init: the tiles are usable and turned on
bool g_dpbf16 = false;  // ms_ocr_dpbf16_init: the vision attention's AVX512_BF16 kernel is on
// Decode steps of fewer rows stay on the fp32 kernels (see above): MatMulTBf16 and DecodeLayerBf16
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

#if defined(MS_OCR_AMX)
struct alignas(64) TileConfig {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

// The tiles as amx_rows uses them (eight of 16 rows x 64 bytes), set up once per thread per kernel call
// (amx_begin) and given back at its end (amx_end): per 64-row chunk of a product they cost ~15 % of its speed.
// A constant in memory, not a local: GCC treats the configuration a local would hold as unread but for the fields
// it sets (ldtilecfg reads all 64 bytes), and left its other bytes as they were on the stack (#GP, seen at -O1).
constexpr TileConfig kTileConfig = {1, 0, {}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};
__attribute__((target("amx-tile"))) void amx_begin() { _tile_loadconfig(&kTileConfig); }
__attribute__((target("amx-tile"))) void amx_end() { _tile_release(); }

// y[r * out + o ..] for outputs [o, o1) (a multiple of 32 of them) and rows r < m = x w^T, x packed
// (TileRows), w [out, k] bf16; the tiles set up (amx_begin).
__attribute__((target("amx-tile,amx-bf16"))) void amx_rows(const uint16_t* px, int m, const bf16* w, float* y,
                                                            int64_t out, int64_t k, int64_t o, int64_t o1) {
  alignas(64) float c[2][256];
  const int64_t steps = k / 32, stride = k * 2;
  for (; o + 32 <= o1; o += 32) {
    const bf16 *w0 = w + o * k, *w1 = w0 + 16 * k;
    // the next block's 32 rows, a cache line of each per step (32 streams are more than the hardware prefetcher
    // follows: measured 15-26 GB/s without, 21-25 with, against 22-28 for a bare read of the same weights)
    const bool ahead = o + 64 <= o1;
    const bf16* next = w0 + 32 * k;
    _tile_zero(4);
    _tile_zero(5);
    for (int64_t q = 0; q < steps; ++q) {
      if (ahead)
        for (int64_t r = 0; r < 32; ++r) __builtin_prefetch(next + r * k + q * 32, 0, 1);
      _tile_loadd(2, px + q * 512, 64);
      _tile_loadd(0, w0 + q * 32, stride);
      _tile_loadd(1, w1 + q * 32, stride);
      _tile_dpbf16ps(4, 0, 2);
      _tile_dpbf16ps(5, 1, 2);
    }
    _tile_stored(4, c[0], 64);
    _tile_stored(5, c[1], 64);
    for (int h = 0; h < 2; ++h)
      for (int r = 0; r < m; ++r)
        for (int i = 0; i < 16; ++i) y[r * out + o + h * 16 + i] = c[h][i * 16 + r];
  }
}
#endif

// One product y [m, out] = x [m, in] w^T (+ res [m, out] when given) of a group run by parallel_products; px: x
// packed for the tiles (TileRows; x then its rows rounded to bf16) when a bf16 weight's product takes them
// (DecodeLayerBf16).
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

// Runs the products of a group over the team, in chunks of rows handed out on demand through `next` (the
// niced launcher thread takes fewer); ends with the team's barrier.
void parallel_products(int m, const Product* ps, int n, const TeamCtx& team, std::atomic<int64_t>& next) {
  // rows per chunk: 64, 128 on the tiles (their blocks of 32 rows prefetch the next block within a chunk)
  auto chunk = [&](int j) -> int64_t { return ps[j].px != nullptr ? 128 : 64; };
  int64_t first[4] = {0, 0, 0, 0};
  for (int j = 0; j < n; ++j) first[j + 1] = first[j] + (ps[j].out + chunk(j) - 1) / chunk(j);
  for (int64_t c = next.fetch_add(1); c < first[n]; c = next.fetch_add(1)) {
    int j = 0;
    while (c >= first[j + 1]) ++j;
    const Product& p = ps[j];
    const int64_t o = (c - first[j]) * chunk(j);
    product_rows(p, m, o, o + chunk(j) < p.out ? o + chunk(j) : p.out);
  }
  team.sync();
}

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

// ---- GELU -----------------------------------------------------------------------------------------------------
// The two forms of ops/activation.py in one pass: tanh approximation x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3));
// exact GELU 0.5 (x + |x| (1 - erfc(|x| / sqrt 2))) with Abramowitz & Stegun 7.1.26 for erfc (|error| <= 1.5e-7).
constexpr float kGeluTanhScale = 1.5957691216057308f;  // 2 sqrt(2 / pi)
constexpr float kErfcP = 0.3275911f, kErfcC0 = 0.254829592f, kErfcC1 = -0.284496736f, kErfcC2 = 1.421413741f,
                kErfcC3 = -1.453152027f, kErfcC4 = 1.061405429f, kInvSqrt2 = 0.7071067811865476f;

inline float gelu_scalar(float x, bool erf_form) {
  if (!erf_form) return x / (1.f + std::exp(-kGeluTanhScale * (x + 0.044715f * x * x * x)));
  const float a = std::fabs(x) * kInvSqrt2, t = 1.f / (1.f + kErfcP * a);
  const float q = t * (kErfcC0 + t * (kErfcC1 + t * (kErfcC2 + t * (kErfcC3 + t * kErfcC4)))) * std::exp(-a * a);
  return 0.5f * (x + std::fabs(x) * (1.f - q));
}

template <bool kErf>
inline vf gelu_vec(vf v) {
  const vf one = vset(1.f);
  if (!kErf) return v / (one + vexp(vset(-kGeluTanhScale) * (vset(0.044715f) * (v * v * v) + v)));
  const vf av = vabs(v), a = av * vset(kInvSqrt2);
  const vf t = one / (vset(kErfcP) * a + one);
  vf p = t * vset(kErfcC4) + vset(kErfcC3);
  p = t * p + vset(kErfcC2);
  p = t * p + vset(kErfcC1);
  p = t * p + vset(kErfcC0);
  const vf q = (t * p) * vexp(-(a * a));
  return vset(0.5f) * (av * (one - q) + v);
}

template <bool kErf>
void gelu_range(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + kVL <= n; i += kVL) vstore(y + i, gelu_vec<kErf>(vload(x + i)));
  for (; i < n; ++i) y[i] = gelu_scalar(x[i], kErf);
}

int gelu_entry(int nparam, void** params, int* ndims, int64_t** shapes, bool erf_form) {
  if (nparam != 2) return 1;
  int64_t n = 1;
  for (int i = 0; i < ndims[0]; ++i) n *= shapes[0][i];
  const float* x = static_cast<const float*>(params[0]);
  float* y = static_cast<float*>(params[1]);
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  g_gelu_calls.fetch_add(1);
#pragma omp parallel for num_threads(chunks > 1 ? g_threads : 1) schedule(dynamic, 4)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t i0 = c * kChunk, i1 = i0 + kChunk < n ? i0 + kChunk : n;
    if (erf_form)
      gelu_range<true>(x + i0, y + i0, i1 - i0);
    else
      gelu_range<false>(x + i0, y + i0, i1 - i0);
  }
  return 0;
}

}  // namespace

// ---- position-table resampling (InterpRows) ------------------------------------------------------------------

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

extern "C" {

// Threads the kernels use (set once from the runtime's thread count).
// The first parallel region creates the OpenMP pool of the calling thread, and the decode team its workers;
// their threads keep the priority they start with.
void ms_ocr_set_threads(int n) {
  g_threads = n > 0 ? n : 1;
#pragma omp parallel num_threads(g_threads)
  { }
  decode_team();
}
int64_t ms_ocr_matmul_t_calls() { return g_matmul_t_calls.load(); }

// The SIMD level this library was compiled for: "avx512", "avx2", "neon", "sse2" or "scalar".
const char* ms_ocr_isa_level() { return MS_OCR_ISA; }

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

// Turns the tiles on (on != 0: the CPU has AMX-TILE and AMX-BF16 and Linux grants this process the tile state)
// or off for DecodeLayerBf16, MatMulTBf16 and VisionAttentionBf16(Rows): 1 when on.
int ms_ocr_amx_init(int on) {
  g_amx = false;
#if defined(MS_OCR_AMX)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (on && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1) && (d >> 24 & 1)) {
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;  // ARCH_REQ_XCOMP_PERM, XTILEDATA
    g_amx = syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  }
#else
  (void)on;
#endif
  return g_amx ? 1 : 0;
}

// Turns the vision attention's AVX512_BF16 kernel (VisionAttentionBf16(Rows) where the tiles are off or the head
// dim is past theirs) on (on != 0 and the CPU has AVX512_BF16) or off: 1 when on.
int ms_ocr_dpbf16_init(int on) {
  g_dpbf16 = false;
#if defined(MS_OCR_AMX)
  g_dpbf16 = on && __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
#else
  (void)on;
#endif
  return g_dpbf16 ? 1 : 0;
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

int64_t ms_ocr_decode_layer_calls() { return g_decode_layer_calls.load(); }

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


// DecodeLayer: one dense pre-norm decoder layer (RMSNorm -> GQA attention with rope -> residual -> RMSNorm ->
// SiLU-gated MLP -> residual) for one new token per sequence over KV caches it only reads, as
// F.decoder_attention_decode + F.gated_mlp compose it (ms_ocr/ops/decode_layer.py describes the operands).
// Inputs: x [B, 1, H]; cos, sin [B|1, 1, 1, D]; mask [B|1, 1, 1, T] (additive); k_cache, v_cache [B, Hkv, T, D];
// input_layernorm [H]; q_proj [Hq*D, H]; k_proj, v_proj [Hkv*D, H]; (query/key norms [D] when qk-normed);
// o_proj [H, Hq*D]; post_attention_layernorm [H]; gate_proj, up_proj [I, H]; down_proj [H, I]; eps [1] (int8
// matrices with group scales: [2], eps and the group size).
// Outputs: x [B, 1, H] and this token's k, v [B, Hkv, 1, D].
}  // extern "C"

namespace {

// DecodeLayer's body; tiles: the bf16 weights' products on AMX (DecodeLayerBf16, when ms_ocr_amx_init turned it
// on), activations rounded to bf16.
int decode_layer_entry(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, bool tiles) {
  if (nparam < 19 || nparam > 22) return 1;
  // 20 / 22: int8 matrices, their scales packed in one input before eps
  const bool quant = nparam == 20 || nparam == 22, qk_norm = nparam >= 21;
  const int n_in = nparam - 3;
  auto in = [&](int i) { return static_cast<const float*>(params[i]); };
  // weights: fp32 or bfloat16 each (or int8 with scales: one per row, or with eps [2] = {eps, G} one per group of
  // G columns of a row); the norms' (small) vectors are widened once here, the products' matrices as they are read
  const float* scales = quant ? in(n_in - 2) : nullptr;
  const int64_t group = quant && shapes[n_in - 1][0] == 2 ? static_cast<int64_t>(in(n_in - 1)[1]) : 0;
  bool groups_fit = group % 16 == 0;
  auto wt = [&](int i) {
    if (!is_int8(dtypes[i])) return Weight{params[i], is_bf16(dtypes[i])};
    const float* s = scales;
    groups_fit = groups_fit && (group == 0 || shapes[i][1] % group == 0);
    scales += shapes[i][0] * (group ? shapes[i][1] / group : 1);
    return Weight{params[i], false, s, group};
  };
  if (quant ? (!is_int8(dtypes[7]) || ndims[n_in - 2] != 1) : is_int8(dtypes[7])) return 1;  // int8 needs scales
  std::vector<float> norm_bufs[4];
  auto vec = [&](int i, std::vector<float>& buf) {
    if (!is_bf16(dtypes[i])) return in(i);
    buf.resize(shapes[i][0]);
    for (int64_t j = 0; j < shapes[i][0]; ++j) buf[j] = to_float(static_cast<const bf16*>(params[i])[j]);
    return static_cast<const float*>(buf.data());
  };
  const float *x = in(0), *cos = in(1), *sin = in(2), *mask = in(3);
  // the caches: fp32, or bf16 (--kv-cache-dtype bf16: read widened, exact; this token's k and v are rounded to
  // bf16 before they are used, as the cache will hold them)
  const bool kv16 = is_bf16(dtypes[4]);
  if (kv16 != is_bf16(dtypes[5])) return 1;
  const void *kc = params[4], *vc = params[5];
  const Weight qw = wt(7), kw = wt(8), vw = wt(9);
  const int w = qk_norm ? 12 : 10;
  const Weight ow = wt(w), gw = wt(w + 2), uw = wt(w + 3), dw = wt(w + 4);
  tiles = tiles && shapes[0][0] >= kTileMinRows && qw.bf16 && ow.bf16 && gw.bf16 && uw.bf16 && dw.bf16;
  // every scale of the 7 matrices, and whole groups
  if (quant && (!groups_fit || scales != in(n_in - 2) + shapes[n_in - 2][0])) return 1;
  const float *inw = vec(6, norm_bufs[0]), *postw = vec(w + 1, norm_bufs[1]);
  const float *qnw = qk_norm ? vec(10, norm_bufs[2]) : nullptr, *knw = qk_norm ? vec(11, norm_bufs[3]) : nullptr;
  const float eps = in(n_in - 1)[0];
  float* x_out = static_cast<float*>(params[n_in]);
  float* k_out = static_cast<float*>(params[n_in + 1]);
  float* v_out = static_cast<float*>(params[n_in + 2]);
  if (ndims[0] != 3 || ndims[4] != 4 || shapes[0][1] != 1) return 1;
  const int64_t b = shapes[0][0], hidden = shapes[0][2], hkv = shapes[4][1], t = shapes[4][2], d = shapes[4][3];
  const int64_t hq = shapes[7][0] / d, inter = shapes[w + 2][0];
  if (b < 1 || b > 8 || d > 512 || hq % hkv != 0 || shapes[4][0] != b) return 1;
  const int64_t rep = hq / hkv;
  const int64_t rope_stride = shapes[1][0] == 1 ? 0 : d, mask_stride = shapes[3][0] == 1 ? 0 : t;
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  g_decode_layer_calls.fetch_add(1);

  // this token's k and v ([B, Hkv, 1, D] = [B, Hkv * D]) are computed in the output buffers themselves
  float *k = k_out, *v = v_out;
  std::vector<float> q(b * hq * d), attn(b * hq * d), x1(b * hidden), g(b * inter), u(b * inter);
  const int m = static_cast<int>(b);
  // the attention's tasks: split until there are two per thread (the launcher thread may be niced)
  int64_t splits = 1;
  while (b * hkv * splits < 2 * g_threads && rep % (splits * 2) == 0) splits *= 2;
  std::atomic<int64_t> next[5] = {};  // the work-sharing phases' next chunk / task
  team_run(g_threads, [&](const TeamCtx& team) {
    // each thread normalises the rows for itself (no barrier): h_own feeds its share of the products
    std::vector<float> h_own(b * hidden);
    for (int64_t r = 0; r < b; ++r) rms_norm(x + r * hidden, inw, h_own.data() + r * hidden, hidden, eps);
    // --dtype bf16 on the tiles: the rows a product group reads rounded to bf16 and packed, by each thread for
    // itself (x as it is when the tiles are off)
#if defined(MS_OCR_AMX)
    if (tiles) amx_begin();
#endif
    TileRows tr;
    auto rounded = [&](const float* rows, int64_t width) -> std::pair<const float*, const uint16_t*> {
      if (!tiles) return {rows, nullptr};
      tr.set(rows, m, width);
      return {tr.rows.data(), tr.tiles()};
    };
    {
      const auto [xh, ph] = rounded(h_own.data(), hidden);
      const Product ps[] = {{xh, qw, q.data(), hq * d, hidden, nullptr, ph},
                            {xh, kw, k, hkv * d, hidden, nullptr, ph},
                            {xh, vw, v, hkv * d, hidden, nullptr, ph}};
      parallel_products(m, ps, 3, team, next[0]);
    }
    if (team.tid == team.n - 1) {  // a worker, not the (possibly niced) launcher
      for (int64_t r = 0; r < b; ++r) {
        const float *c = cos + r * rope_stride, *s = sin + r * rope_stride;
        for (int64_t i = 0; i < hq; ++i) {
          float* qi = q.data() + (r * hq + i) * d;
          rope(qi, c, s, d);
          if (qk_norm) rms_norm(qi, qnw, qi, d, eps);
          for (int64_t j = 0; j < d; ++j) qi[j] *= scale;
        }
        for (int64_t i = 0; i < hkv; ++i) {
          float* ki = k + (r * hkv + i) * d;
          rope(ki, c, s, d);
          if (qk_norm) rms_norm(ki, knw, ki, d, eps);
          if (kv16) {
            float* vi = v + (r * hkv + i) * d;
            for (int64_t j = 0; j < d; ++j) {
              ki[j] = to_float(round_bf16(ki[j]));
              vi[j] = to_float(round_bf16(vi[j]));
            }
          }
        }
      }
    }
    team.sync();
    {
      // softmax over [q k_cache^T + mask, q k_new] and the matching sum of [v_cache, v_new]; slots the mask hides
      // (NEG_BIAS) would weigh exactly 0 and are skipped. One task = `per` query heads of one kv group of one
      // sequence (GQA): each cached key and value row is read once for all of them, while it is in L1, instead of
      // once per head; per head the dot products, softmax and sums are the same, in the same order, as one head
      // alone.
      const int64_t per = rep / splits, stride = t + 1, tasks = b * hkv * splits;
      std::vector<float> scores(stride * per), inv(per);
      std::vector<int64_t> seen(t);
      for (int64_t task = next[1].fetch_add(1); task < tasks; task = next[1].fetch_add(1)) {
        const int64_t r = task / (hkv * splits), gi = task / splits % hkv, h0 = gi * rep + task % splits * per;
        const int64_t g_kv = r * hkv + gi;
        const float* qs = q.data() + (r * hq + h0) * d;
        const int64_t at = g_kv * t * d;  // the group's first cache row
        const float* mrow = mask + r * mask_stride;
        int64_t n = 0;
        for (int64_t s = 0; s < t; ++s)
          if (mrow[s] > -1e38f) seen[n++] = s;
        // the group's scores, softmax and weighted values over its cache rows (fp32 or bf16: one instance each)
        auto attend = [&](const auto* keys, const auto* values) {
          attention_scores(qs, per, keys + at, mrow, seen.data(), n, d, scores.data(), stride);
          for (int64_t j = 0; j < per; ++j) {
            float* sj = scores.data() + j * stride;
            sj[n] = dot(qs + j * d, k + g_kv * d, d);
            float mx = sj[n];
            for (int64_t i = 0; i < n; ++i) mx = sj[i] > mx ? sj[i] : mx;
            inv[j] = 1.f / exp_sum(sj, n + 1, mx);
          }
          attention_values(scores.data(), per, stride, inv.data(), values + at, seen.data(), n, v + g_kv * d, d,
                           attn.data() + (r * hq + h0) * d);
        };
        if (kv16)
          attend(static_cast<const bf16*>(kc), static_cast<const bf16*>(vc));
        else
          attend(static_cast<const float*>(kc), static_cast<const float*>(vc));
      }
      team.sync();
    }
    {
      const auto [xa, pa] = rounded(attn.data(), hq * d);
      const Product ps[] = {{xa, ow, x1.data(), hidden, hq * d, x, pa}};
      parallel_products(m, ps, 1, team, next[2]);
    }
    for (int64_t r = 0; r < b; ++r) rms_norm(x1.data() + r * hidden, postw, h_own.data() + r * hidden, hidden, eps);
    {
      const auto [xh, ph] = rounded(h_own.data(), hidden);
      const Product ps[] = {{xh, gw, g.data(), inter, hidden, nullptr, ph},
                            {xh, uw, u.data(), inter, hidden, nullptr, ph}};
      parallel_products(m, ps, 2, team, next[3]);
    }
    team_silu_mul(g.data(), u.data(), b * inter, team);
    {
      const auto [xg, pg] = rounded(g.data(), inter);
      const Product ps[] = {{xg, dw, x_out, hidden, inter, x1.data(), pg}};
      parallel_products(m, ps, 1, team, next[4]);
    }
#if defined(MS_OCR_AMX)
    if (tiles) amx_end();
#endif
  });
  return 0;
}

}  // namespace

extern "C" {

int DecodeLayer(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,
                void* extra) {
  (void)stream; (void)extra;
  return decode_layer_entry(nparam, params, ndims, shapes, dtypes, false);
}
// DecodeLayer with --dtype bf16's products: on the tiles where AMX is on (else DecodeLayer's)
int DecodeLayerBf16(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,
                    void* extra) {
  (void)stream; (void)extra;
  return decode_layer_entry(nparam, params, ndims, shapes, dtypes, g_amx);
}

int64_t ms_ocr_moe_experts_calls() { return g_moe_experts_calls.load(); }

// MoeExperts: the routed experts of a DeepSeek MoE layer for a decode step's tokens (ms_ocr/nn/moe.py), reading
// only the selected experts' rows of the stacked weights, as they are stored (fp32, bf16 widened in registers, or
// int8 with scales): the composed path gathers the selected experts into fp32 copies first (for DeepSeek-OCR's
// six experts of 3 x 896 x 1280, 83 MB written and read again per layer and token).
// Inputs: h [T, H] fp32; ids [T, k] int32 (an id outside [0, E) adds nothing); w [T, k] fp32, the routing
// weights; gate, up [E, I, H] and down [E, H, I] stacks; for int8 stacks their scales after down: [E, N] (one
// per row) or [E, N, K / G] (one per group of G columns). Output y [T, H] fp32:
// y[t] = sum_j w[t, j] * down[e] (silu(gate[e] h[t]) * up[e] h[t]), e = ids[t, j], the j in order.
int MoeExperts(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,
               void* extra) {
  (void)stream; (void)extra;
  if (nparam != 7 && nparam != 10) return 1;
  const bool quant = nparam == 10;
  if (ndims[0] != 2 || ndims[1] != 2 || ndims[2] != 2 || ndims[3] != 3 || ndims[4] != 3 || ndims[5] != 3) return 1;
  const int64_t t = shapes[0][0], hidden = shapes[0][1], k = shapes[1][1];
  const int64_t e_count = shapes[3][0], inter = shapes[3][1];
  if (t < 1 || shapes[1][0] != t || shapes[2][0] != t || shapes[2][1] != k || shapes[3][2] != hidden) return 1;
  for (int i = 4; i <= 5; ++i)
    if (shapes[i][0] != e_count) return 1;
  if (shapes[4][1] != inter || shapes[4][2] != hidden || shapes[5][1] != hidden || shapes[5][2] != inter) return 1;
  // each stack: its bytes per weight, and (int8) its scales' layout
  int64_t elem[3], group[3] = {0, 0, 0};
  for (int i = 0; i < 3; ++i) {
    const int s = 3 + i;
    if (is_int8(dtypes[s]) != quant) return 1;
    elem[i] = quant ? 1 : is_bf16(dtypes[s]) ? 2 : 4;
    if (quant) {  // scales [E, N] or [E, N, ng]: per expert as MatMulTQ8's [N] or [N, ng]
      const int sd = ndims[6 + i];
      if (sd < 2 || shapes[6 + i][0] != e_count) return 1;
      group[i] = q8_group(sd - 1, shapes[6 + i] + 1, shapes[s][1], shapes[s][2]);
      if (group[i] < 0) return 1;
    }
  }
  const float* h = static_cast<const float*>(params[0]);
  const int32_t* ids = static_cast<const int32_t*>(params[1]);
  const float* w = static_cast<const float*>(params[2]);
  float* y = static_cast<float*>(params[nparam - 1]);
  // expert e of stack i (0 gate, 1 up, 2 down) as a product's weight
  auto expert = [&](int i, int64_t e) {
    const int s = 3 + i;
    const int64_t n = shapes[s][1], kk = shapes[s][2];
    Weight wt{static_cast<const char*>(params[s]) + e * n * kk * elem[i], elem[i] == 2};
    if (quant) {
      wt.scale = static_cast<const float*>(params[6 + i]) + e * n * (group[i] ? kk / group[i] : 1);
      wt.group = group[i];
    }
    return wt;
  };
  g_moe_experts_calls.fetch_add(1);
  const int64_t pairs = t * k;
  std::vector<float> g(pairs * inter), u(pairs * inter), yp(pairs * hidden);
  std::vector<char> used(pairs);
  for (int64_t p = 0; p < pairs; ++p) used[p] = ids[p] >= 0 && ids[p] < e_count;
  constexpr int64_t kChunk = 64;
  const int64_t in_chunks = (inter + kChunk - 1) / kChunk, out_chunks = (hidden + kChunk - 1) / kChunk;
  std::atomic<int64_t> next[2] = {};
  team_run(g_threads, [&](const TeamCtx& team) {
    // gate and up of every pair, chunks of rows handed out on demand
    for (int64_t c = next[0].fetch_add(1); c < pairs * 2 * in_chunks; c = next[0].fetch_add(1)) {
      const int64_t p = c / (2 * in_chunks), which = c / in_chunks % 2, o = c % in_chunks * kChunk;
      if (!used[p]) continue;
      const Product pr{h + p / k * hidden, expert(static_cast<int>(which), ids[p]), (which ? u : g).data() + p * inter,
                       inter, hidden, nullptr};
      product_rows(pr, 1, o, o + kChunk < inter ? o + kChunk : inter);
    }
    team.sync();
    team_silu_mul(g.data(), u.data(), pairs * inter, team);
    for (int64_t c = next[1].fetch_add(1); c < pairs * out_chunks; c = next[1].fetch_add(1)) {
      const int64_t p = c / out_chunks, o = c % out_chunks * kChunk;
      if (!used[p]) continue;
      const Product pr{g.data() + p * inter, expert(2, ids[p]), yp.data() + p * hidden, hidden, inter, nullptr};
      product_rows(pr, 1, o, o + kChunk < hidden ? o + kChunk : hidden);
    }
    team.sync();
    // the weighted sum per token, a share of the columns per thread
    const auto [lo, hi] = team_share(hidden, 1, team);
    for (int64_t r = 0; r < t; ++r) {
      float* yr = y + r * hidden;
      for (int64_t i = lo; i < hi; ++i) yr[i] = 0.f;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t p = r * k + j;
        if (!used[p]) continue;
        const float wj = w[p];
        const float* src = yp.data() + p * hidden;
        for (int64_t i = lo; i < hi; ++i) yr[i] += wj * src[i];
      }
    }
  });
  return 0;
}

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

// Where an attention writes head bh's query rows from r0 on, and the stride between them: out [B, H, S, D], or
// rows_out [B, S, H * D] (head h's D values of row i at i * H * D + h * D).
struct HeadRows {
  float* at;
  int64_t stride;
};
inline HeadRows head_rows(float* out, int64_t bh, int64_t r0, int64_t h, int64_t s, int64_t d, bool rows_out) {
  if (rows_out) return {out + ((bh / h * s + r0) * h + bh % h) * d, h * d};
  return {out + (bh * s + r0) * d, d};
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
int64_t ms_ocr_vision_attention_calls() { return g_vision_attention_calls.load(); }

}  // extern "C"

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

#if defined(MS_OCR_AMX)
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
#endif

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

#if defined(MS_OCR_AMX)
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
// attention_bf16_entry writes it.
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
#endif  // MS_OCR_AMX (x86-64, GCC >= 11)

// q [B, H, S, D], k, v [B, H, T, D] fp32 (as many kv heads as query heads), scale [1] -> out [B, H, S, D] or,
// rows_out, [B, S, H * D]: on the tiles (D <= kAmxMaxDim), else with VDPBF16PS (attention_dpbf16: D a multiple of
// 8 up to kDpMaxDim). 1 when neither is on for these shapes.
int attention_bf16_entry(int nparam, void** params, int* ndims, int64_t** shapes, bool rows_out) {
#if defined(MS_OCR_AMX)
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
#else
  (void)nparam; (void)params; (void)ndims; (void)shapes; (void)rows_out;
  return 1;
#endif
}

}  // namespace

extern "C" {

// VisionAttention / VisionAttentionRows in bf16 on the tiles (--dtype bf16 where AMX is on; ops/attention.py)
int VisionAttentionBf16(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,
                        void* extra) {
  (void)stream; (void)extra; (void)dtypes;
  return attention_bf16_entry(nparam, params, ndims, shapes, false);
}
int VisionAttentionBf16Rows(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes,
                            void* stream, void* extra) {
  (void)stream; (void)extra; (void)dtypes;
  return attention_bf16_entry(nparam, params, ndims, shapes, true);
}

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
  if (nparam != 5 || ndims[0] < 1 || ndims[1] != 1 || ndims[2] != 1) return 1;
  const int64_t c = shapes[0][ndims[0] - 1];
  if (c < 1 || shapes[1][0] != c || shapes[2][0] != c) return 1;
  int64_t rows = 1;
  for (int i = 0; i < ndims[0] - 1; ++i) rows *= shapes[0][i];
  const float* x = static_cast<const float*>(params[0]);
  const float* w = static_cast<const float*>(params[1]);
  const float* b = static_cast<const float*>(params[2]);
  const float eps = static_cast<const float*>(params[3])[0];
  float* y = static_cast<float*>(params[4]);
#pragma omp parallel for num_threads(rows >= 16 ? g_threads : 1) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * c;
    float* yr = y + r * c;
    vf acc{};
    int64_t j = 0;
    for (; j + kVL <= c; j += kVL) acc += vload(xr + j);
    float sum = vsum(acc);
    for (; j < c; ++j) sum += xr[j];
    const float mean = sum / static_cast<float>(c);
    const vf mv = vset(mean);
    acc = vf{};
    for (j = 0; j + kVL <= c; j += kVL) {
      const vf dv = vload(xr + j) - mv;
      acc += dv * dv;
    }
    float sq = vsum(acc);
    for (; j < c; ++j) sq += (xr[j] - mean) * (xr[j] - mean);
    const float rstd = 1.f / std::sqrt(sq / static_cast<float>(c) + eps);
    const vf rv = vset(rstd);
    for (j = 0; j + kVL <= c; j += kVL) vstore(yr + j, (vload(xr + j) - mv) * rv * vload(w + j) + vload(b + j));
    for (; j < c; ++j) yr[j] = (xr[j] - mean) * rstd * w[j] + b[j];
  }
  return 0;
}

// GeluTanh / GeluErf: x (any shape, fp32) -> GELU(x), the tanh approximation or the exact (erf) form.
int GeluTanh(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,
             void* extra) {
  (void)stream; (void)extra; (void)dtypes;
  return gelu_entry(nparam, params, ndims, shapes, false);
}
int GeluErf(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,
            void* extra) {
  (void)stream; (void)extra; (void)dtypes;
  return gelu_entry(nparam, params, ndims, shapes, true);
}
int64_t ms_ocr_gelu_calls() { return g_gelu_calls.load(); }

}  // extern "C"

namespace {

// ---- GemmBf16: products in bf16 through oneDNN ---------------------------------------------------------------
// oneDNN's dnnl_gemm_bf16bf16f32 (row-major C = alpha op(A) op(B) + beta C, bf16 operands, fp32 accumulation
// and output), from the libdnnl MindSpore's wheel ships, opened at run time (ms_ocr_load_dnnl). That library is
// built for a thread pool runtime and its plain gemm runs on the calling thread: the product is split into
// g_threads column (or row) slices, one sequential gemm each.
typedef int (*dnnl_gemm_bf16_fn)(char, char, int64_t, int64_t, int64_t, float, const uint16_t*, int64_t,
                                 const uint16_t*, int64_t, float, float*, int64_t);
dnnl_gemm_bf16_fn g_dnnl_gemm_bf16 = nullptr;
std::atomic<int64_t> g_gemm_bf16_calls{0};
// its fp32 gemm (row-major, same argument order), for the convolutions (Conv2dAffine)
typedef int (*dnnl_sgemm_fn)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                             int64_t, float, float*, int64_t);
dnnl_sgemm_fn g_dnnl_sgemm = nullptr;


}  // namespace

extern "C" {

// Opens oneDNN at `path` and finds its bf16 gemm: 0 on success.
int ms_ocr_load_dnnl(const char* path) {
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return 1;
  g_dnnl_gemm_bf16 = reinterpret_cast<dnnl_gemm_bf16_fn>(dlsym(handle, "dnnl_gemm_bf16bf16f32"));
  g_dnnl_sgemm = reinterpret_cast<dnnl_sgemm_fn>(dlsym(handle, "dnnl_sgemm"));
  return g_dnnl_gemm_bf16 == nullptr ? 2 : 0;
}

// Whether Conv2dAffine has its fp32 gemm (after ms_ocr_load_dnnl).
int ms_ocr_has_sgemm() { return g_dnnl_sgemm != nullptr; }

int64_t ms_ocr_gemm_bf16_calls() { return g_gemm_bf16_calls.load(); }

}  // extern "C"

namespace {

// What a GemmBf16 variant does to its output slice after the product, on the thread that computed it (the slice is
// still in that core's cache): y += b, then GELU (erf or tanh form) or y = res + y.
enum class Epilogue { kNone, kBias, kBiasGeluErf, kBiasGeluTanh, kBiasResidual };

void apply_epilogue(Epilogue ep, float* y, int64_t ldy, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                    const float* b, const float* res) {
  if (ep == Epilogue::kNone) return;
  for (int64_t r = r0; r < r1; ++r) {
    float* yr = y + r * ldy;
    for (int64_t j = c0; j < c1; ++j) yr[j] = yr[j] + b[j];
    if (ep == Epilogue::kBiasGeluErf) {
      gelu_range<true>(yr + c0, yr + c0, c1 - c0);
    } else if (ep == Epilogue::kBiasGeluTanh) {
      gelu_range<false>(yr + c0, yr + c0, c1 - c0);
    } else if (ep == Epilogue::kBiasResidual) {
      const float* rr = res + r * ldy;
      for (int64_t j = c0; j < c1; ++j) yr[j] = rr[j] + yr[j];
    }
  }
}

// GemmBf16 and its variants: x [M, K] (fp32, rounded to bf16 here, or bf16), w [N, K] (bf16; or a convolution's
// [N, C, kh, kw] read as [N, C * kh * kw], which MindSpore's CPU Reshape cannot flatten in bf16) [, b [N] fp32 [, res
// [M, N] fp32]] -> y [M, N] = x w^T (fp32): each product of bf16 values summed in fp32, then the epilogue.
int gemm_bf16_entry(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, Epilogue ep) {
  const int inputs = ep == Epilogue::kNone ? 2 : ep == Epilogue::kBiasResidual ? 4 : 3;
  if (g_dnnl_gemm_bf16 == nullptr || nparam != inputs + 1 || ndims[0] != 2 || ndims[1] < 2 || ndims[1] > 4 ||
      !is_bf16(dtypes[1]))
    return 1;
  const int64_t m = shapes[0][0], k = shapes[0][1], n = shapes[1][0];
  int64_t wk = 1;
  for (int d = 1; d < ndims[1]; ++d) wk *= shapes[1][d];
  if (wk != k || m < 1 || n < 1 || k < 1) return 1;
  if (inputs >= 3 && (ndims[2] != 1 || shapes[2][0] != n || is_bf16(dtypes[2]))) return 1;
  if (inputs == 4 && (ndims[3] != 2 || shapes[3][0] != m || shapes[3][1] != n || is_bf16(dtypes[3]))) return 1;
  const float* b = inputs >= 3 ? static_cast<const float*>(params[2]) : nullptr;
  const float* res = inputs == 4 ? static_cast<const float*>(params[3]) : nullptr;
  g_gemm_bf16_calls.fetch_add(1);
  const uint16_t* w = static_cast<const uint16_t*>(params[1]);
  float* y = static_cast<float*>(params[inputs]);
  const uint16_t* xb = static_cast<const uint16_t*>(params[0]);
  std::vector<uint16_t> rounded;
  if (!is_bf16(dtypes[0])) {
    const float* x = static_cast<const float*>(params[0]);
    rounded.resize(static_cast<size_t>(m * k));
#pragma omp parallel for num_threads(m * k >= (1 << 16) ? g_threads : 1) schedule(static)
    for (int64_t i = 0; i < m * k; ++i) rounded[i] = round_bf16(x[i]);
    xb = rounded.data();
  }
  // slices: along N (the weight's rows) unless M is the longer side; multiples of 64 keep the kernels' tiles whole
  const bool by_rows = m > n;
  const int64_t len = by_rows ? m : n;
  int parts = static_cast<int>(len / 64 < g_threads ? (len / 64 > 0 ? len / 64 : 1) : g_threads);
  const int64_t step = ((len + parts - 1) / parts + 63) / 64 * 64;
  parts = static_cast<int>((len + step - 1) / step);
  int failed = 0;
#pragma omp parallel for num_threads(parts) schedule(static) reduction(|| : failed)
  for (int t = 0; t < parts; ++t) {
    const int64_t a = t * step, cnt = (a + step < len ? step : len - a);
    int status = by_rows ? g_dnnl_gemm_bf16('N', 'T', cnt, n, k, 1.f, xb + a * k, k, w, k, 0.f, y + a * n, n)
                         : g_dnnl_gemm_bf16('N', 'T', m, cnt, k, 1.f, xb, k, w + a * k, k, 0.f, y + a, n);
    failed = failed || status != 0;
    if (status == 0) {
      if (by_rows)
        apply_epilogue(ep, y, n, a, a + cnt, 0, n, b, res);
      else
        apply_epilogue(ep, y, n, 0, m, a, a + cnt, b, res);
    }
  }
  return failed ? 1 : 0;
}

}  // namespace

extern "C" {

int GemmBf16(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,
             void* extra) {
  (void)stream; (void)extra;
  return gemm_bf16_entry(nparam, params, ndims, shapes, dtypes, Epilogue::kNone);
}
// x w^T + b
int GemmBf16Bias(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,
                 void* extra) {
  (void)stream; (void)extra;
  return gemm_bf16_entry(nparam, params, ndims, shapes, dtypes, Epilogue::kBias);
}
// GELU(x w^T + b), the exact (erf) form and the tanh approximation (GeluErf / GeluTanh's formulas)
int GemmBf16BiasGeluErf(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,
                        void* extra) {
  (void)stream; (void)extra;
  return gemm_bf16_entry(nparam, params, ndims, shapes, dtypes, Epilogue::kBiasGeluErf);
}
int GemmBf16BiasGeluTanh(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes,
                         void* stream, void* extra) {
  (void)stream; (void)extra;
  return gemm_bf16_entry(nparam, params, ndims, shapes, dtypes, Epilogue::kBiasGeluTanh);
}
// res + (x w^T + b): a residual branch's last product
int GemmBf16BiasResidual(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes,
                         void* stream, void* extra) {
  (void)stream; (void)extra;
  return gemm_bf16_entry(nparam, params, ndims, shapes, dtypes, Epilogue::kBiasResidual);
}

}  // extern "C"

// ---- Conv2dAffine: the layout models' convolutions with their batch norm, activation and residual --------------
// x [B, C, H, W], w [O, C / groups, kh, kw], scale [O], shift [O], geometry int32 [6] = (stride, padding, dilation,
// groups, activation: 0 none / 1 ReLU / 2 SiLU, residual: 0 none / 1 added after the activation / 2 before it)
// [, res [B, O, OH, OW]] -> y [B, O, OH, OW] = act(conv(x, w) * scale + shift (+ res)) (+ res), fp32, NCHW.
// A k x k convolution is the product of w [O, C k k] with the input's columns, built a tile of output pixels at a
// time into a buffer that stays in cache (the composed path, ops/conv.py, unfolds the whole map first: on the
// layout models' 200 x 200 and 100 x 100 maps those buffers were most of the graph's memory); a 1 x 1 convolution
// reads the input as it is. The products are oneDNN's fp32 gemm, one sequential call per tile on the kernels'
// threads; the epilogue runs on the tile while it is in cache. Depthwise convolutions (groups == C == O) are a
// direct loop along each output row.
namespace {

std::atomic<int64_t> g_conv_calls{0};

struct ConvGeom {
  int64_t b, c, h, w, o, kh, kw, oh, ow, stride, pad, dil, groups;
  int act, res_mode;
};

// The output columns [lo, hi] whose input column ow * stride + dx lies inside a row of `width` (hi < lo: none).
inline void conv_valid_columns(int64_t dx, int64_t stride, int64_t width, int64_t out_width, int64_t& lo,
                               int64_t& hi) {
  lo = dx >= 0 ? 0 : (-dx + stride - 1) / stride;
  const int64_t last = width - 1 - dx < 0 ? -1 : (width - 1 - dx) / stride;
  hi = last < out_width - 1 ? last : out_width - 1;
}

inline vf conv_act(vf v, int act) {
  if (act == 1) return vmax(v, vf{});
  if (act == 2) return v / (vset(1.f) + vexp(-v));
  return v;
}

// y[o, p0:p1] (rows of length ld) = act(y * scale + shift (+ res)) (+ res)
void conv_epilogue(const ConvGeom& g, float* y, const float* res, int64_t ld, int64_t o0, int64_t o1, int64_t p0,
                   int64_t p1, const float* scale, const float* shift) {
  for (int64_t o = o0; o < o1; ++o) {
    float* yr = y + o * ld;
    const float* rr = res != nullptr ? res + o * ld : nullptr;
    const vf s = vset(scale[o]), t = vset(shift[o]);
    int64_t p = p0;
    for (; p + kVL <= p1; p += kVL) {
      vf v = vload(yr + p) * s + t;
      if (g.res_mode == 2) v = v + vload(rr + p);
      v = conv_act(v, g.act);
      if (g.res_mode == 1) v = v + vload(rr + p);
      vstore(yr + p, v);
    }
    for (; p < p1; ++p) {
      vf v = vset(yr[p] * scale[o] + shift[o]);
      if (g.res_mode == 2) v = v + vset(rr[p]);
      v = conv_act(v, g.act);
      if (g.res_mode == 1) v = v + vset(rr[p]);
      yr[p] = v[0];
    }
  }
}

// cols [C kh kw, p1 - p0]: the input values under each tap for output pixels p0..p1 (zeros in the padding)
void conv_columns(const ConvGeom& g, const float* x, int64_t p0, int64_t p1, float* cols) {
  const int64_t t = p1 - p0;
  for (int64_t c = 0; c < g.c; ++c) {
    const float* xc = x + c * g.h * g.w;
    for (int64_t i = 0; i < g.kh; ++i) {
      for (int64_t j = 0; j < g.kw; ++j) {
        float* row = cols + ((c * g.kh + i) * g.kw + j) * t;
        const int64_t dy = i * g.dil - g.pad, dx = j * g.dil - g.pad;
        int64_t lo, hi;
        conv_valid_columns(dx, g.stride, g.w, g.ow, lo, hi);
        int64_t p = p0;
        while (p < p1) {
          const int64_t oh = p / g.ow, ow0 = p % g.ow;
          const int64_t ow1 = (p1 - p < g.ow - ow0) ? ow0 + (p1 - p) : g.ow;  // this output row's part of the tile
          float* dst = row + (p - p0);
          const int64_t ih = oh * g.stride + dy;
          if (ih < 0 || ih >= g.h) {
            std::memset(dst, 0, sizeof(float) * (ow1 - ow0));
          } else {
            const float* xr = xc + ih * g.w;
            for (int64_t ow = ow0; ow < ow1; ++ow) {
              if (ow < lo || ow > hi) {
                dst[ow - ow0] = 0.f;
              } else if (g.stride == 1) {  // a contiguous run of the input row
                const int64_t end = (hi + 1 < ow1) ? hi + 1 : ow1;
                std::memcpy(dst + (ow - ow0), xr + ow + dx, sizeof(float) * (end - ow));
                ow = end - 1;
              } else {
                dst[ow - ow0] = xr[ow * g.stride + dx];
              }
            }
          }
          p += ow1 - ow0;
        }
      }
    }
  }
}

int conv_dense(const ConvGeom& g, const float* x, const float* w, const float* scale, const float* shift,
               const float* res, float* y) {
  const int64_t k = g.c * g.kh * g.kw, pix = g.oh * g.ow;
  const bool pointwise = g.kh == 1 && g.kw == 1 && g.stride == 1 && g.pad == 0;
  // a tile's columns fill ~1 MB; whole rows of 16 pixels
  int64_t tile = (int64_t{1} << 18) / k;
  tile = tile < 64 ? 64 : (tile > 4096 ? 4096 : tile);
  tile = tile / 16 * 16;
  if (tile > pix) tile = pix;
  const int64_t tiles = (pix + tile - 1) / tile;
  int failed = 0;
  for (int64_t b = 0; b < g.b; ++b) {
    const float* xb = x + b * g.c * g.h * g.w;
    float* yb = y + b * g.o * pix;
    const float* rb = res != nullptr ? res + b * g.o * pix : nullptr;
#pragma omp parallel num_threads(tiles < g_threads ? static_cast<int>(tiles) : g_threads) reduction(|| : failed)
    {
      std::vector<float> cols(pointwise ? 0 : static_cast<size_t>(k * tile));
#pragma omp for schedule(static)
      for (int64_t t = 0; t < tiles; ++t) {
        const int64_t p0 = t * tile, p1 = (p0 + tile < pix) ? p0 + tile : pix;
        int status;
        if (pointwise) {
          status = g_dnnl_sgemm('N', 'N', g.o, p1 - p0, k, 1.f, w, k, xb + p0, pix, 0.f, yb + p0, pix);
        } else {
          conv_columns(g, xb, p0, p1, cols.data());
          status = g_dnnl_sgemm('N', 'N', g.o, p1 - p0, k, 1.f, w, k, cols.data(), p1 - p0, 0.f, yb + p0, pix);
        }
        failed = failed || status != 0;
        conv_epilogue(g, yb, rb, pix, 0, g.o, p0, p1, scale, shift);
      }
    }
  }
  return failed ? 1 : 0;
}

int conv_depthwise(const ConvGeom& g, const float* x, const float* w, const float* scale, const float* shift,
                   const float* res, float* y) {
  const int64_t pix = g.oh * g.ow;
#pragma omp parallel for num_threads(g_threads) schedule(static) collapse(2)
  for (int64_t b = 0; b < g.b; ++b) {
    for (int64_t c = 0; c < g.c; ++c) {
      const float* xc = x + (b * g.c + c) * g.h * g.w;
      const float* wc = w + c * g.kh * g.kw;
      float* yc = y + (b * g.c + c) * pix;
      for (int64_t oh = 0; oh < g.oh; ++oh) {
        float* yr = yc + oh * g.ow;
        std::memset(yr, 0, sizeof(float) * g.ow);
        for (int64_t i = 0; i < g.kh; ++i) {
          const int64_t ih = oh * g.stride + i * g.dil - g.pad;
          if (ih < 0 || ih >= g.h) continue;
          const float* xr = xc + ih * g.w;
          for (int64_t j = 0; j < g.kw; ++j) {
            const int64_t dx = j * g.dil - g.pad;
            int64_t lo, hi;
            conv_valid_columns(dx, g.stride, g.w, g.ow, lo, hi);
            const float wv = wc[i * g.kw + j];
            if (g.stride == 1) {
              const float* src = xr + dx;
              for (int64_t ow = lo; ow <= hi; ++ow) yr[ow] += wv * src[ow];
            } else {
              for (int64_t ow = lo; ow <= hi; ++ow) yr[ow] += wv * xr[ow * g.stride + dx];
            }
          }
        }
      }
      const float* rc = res != nullptr ? res + (b * g.c + c) * pix : nullptr;
      conv_epilogue(g, yc, rc, pix, 0, 1, 0, pix, scale + c, shift + c);
    }
  }
  return 0;
}

}  // namespace

extern "C" {

int64_t ms_ocr_conv_calls() { return g_conv_calls.load(); }

int Conv2dAffine(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,
                 void* extra) {
  (void)stream; (void)extra; (void)dtypes;
  if ((nparam != 6 && nparam != 7) || ndims[0] != 4 || ndims[1] != 4 || ndims[4] != 1 || shapes[4][0] != 6) return 1;
  const int32_t* geo = static_cast<const int32_t*>(params[4]);
  ConvGeom g{shapes[0][0], shapes[0][1], shapes[0][2], shapes[0][3], shapes[1][0], shapes[1][2], shapes[1][3],
             0, 0, geo[0], geo[1], geo[2], geo[3], geo[4], geo[5]};
  const bool has_res = nparam == 7;
  if (has_res != (g.res_mode != 0)) return 1;
  float* y = static_cast<float*>(params[nparam - 1]);
  g.oh = shapes[nparam - 1][2];
  g.ow = shapes[nparam - 1][3];
  if (shapes[nparam - 1][1] != g.o || g.oh != (g.h + 2 * g.pad - g.dil * (g.kh - 1) - 1) / g.stride + 1 ||
      g.ow != (g.w + 2 * g.pad - g.dil * (g.kw - 1) - 1) / g.stride + 1)
    return 1;
  const float* x = static_cast<const float*>(params[0]);
  const float* w = static_cast<const float*>(params[1]);
  const float* scale = static_cast<const float*>(params[2]);
  const float* shift = static_cast<const float*>(params[3]);
  const float* res = has_res ? static_cast<const float*>(params[5]) : nullptr;
  g_conv_calls.fetch_add(1);
  if (g.groups == g.c && g.groups == g.o && shapes[1][1] == 1) return conv_depthwise(g, x, w, scale, shift, res, y);
  if (g.groups != 1 || shapes[1][1] != g.c || g_dnnl_sgemm == nullptr) return 1;
  return conv_dense(g, x, w, scale, shift, res, y);
}

}  // extern "C"

// ---- DeformableSample: multi-scale deformable attention's sampling (the layout models' decoders) ----------------
// value [B, S, C] (the value maps of every level flattened and concatenated, C = heads * D), loc [B, Q, heads, L,
// P, 2] (sampling points, x and y in [0, 1] of their level), weight [B, Q, heads, L, P], shapes int32 [L, 2] (each
// level's H, W) -> out [B, Q, C]: per query and head, the weighted sum of the bilinear samples of the head's value
// channels (grid_sample's align_corners=False: pixel x * W - 0.5; neighbours outside the map count 0).
namespace {
std::atomic<int64_t> g_deformable_calls{0};
}  // namespace

extern "C" {

int64_t ms_ocr_deformable_calls() { return g_deformable_calls.load(); }

int DeformableSample(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,
                     void* extra) {
  (void)stream; (void)extra; (void)dtypes;
  if (nparam != 5 || ndims[0] != 3 || ndims[1] != 6 || ndims[2] != 5 || ndims[3] != 2) return 1;
  const int64_t b = shapes[0][0], s = shapes[0][1], c = shapes[0][2];
  const int64_t q = shapes[1][1], heads = shapes[1][2], levels = shapes[1][3], points = shapes[1][4];
  if (shapes[3][0] != levels || c % heads != 0) return 1;
  const int64_t d = c / heads;
  const float* value = static_cast<const float*>(params[0]);
  const float* loc = static_cast<const float*>(params[1]);
  const float* weight = static_cast<const float*>(params[2]);
  const int32_t* hw = static_cast<const int32_t*>(params[3]);
  float* out = static_cast<float*>(params[4]);
  std::vector<int64_t> start(levels);
  int64_t total = 0;
  for (int64_t l = 0; l < levels; ++l) {
    start[l] = total;
    total += int64_t{hw[2 * l]} * hw[2 * l + 1];
  }
  if (total != s) return 1;
  g_deformable_calls.fetch_add(1);
#pragma omp parallel for num_threads(g_threads) schedule(static) collapse(2)
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t qi = 0; qi < q; ++qi) {
      const float* vb = value + bi * s * c;
      for (int64_t h = 0; h < heads; ++h) {
        float* o = out + (bi * q + qi) * c + h * d;
        std::memset(o, 0, sizeof(float) * d);
        const int64_t base = ((bi * q + qi) * heads + h) * levels * points;
        for (int64_t l = 0; l < levels; ++l) {
          const int64_t height = hw[2 * l], width = hw[2 * l + 1];
          for (int64_t p = 0; p < points; ++p) {
            const int64_t k = base + l * points + p;
            const float a = weight[k];
            const float px = loc[2 * k] * width - 0.5f, py = loc[2 * k + 1] * height - 0.5f;
            const float fx0 = std::floor(px), fy0 = std::floor(py);
            const float fx = px - fx0, fy = py - fy0;
            const int64_t x0 = static_cast<int64_t>(fx0), y0 = static_cast<int64_t>(fy0);
            const float corner[4] = {(1 - fx) * (1 - fy), fx * (1 - fy), (1 - fx) * fy, fx * fy};
            for (int t = 0; t < 4; ++t) {
              const int64_t xi = x0 + (t & 1), yi = y0 + (t >> 1);
              if (xi < 0 || xi >= width || yi < 0 || yi >= height) continue;
              const float wgt = a * corner[t];
              const float* v = vb + (start[l] + yi * width + xi) * c + h * d;
              int64_t j = 0;
              for (; j + kVL <= d; j += kVL) vstore(o + j, vload(o + j) + vset(wgt) * vload(v + j));
              for (; j < d; ++j) o[j] += wgt * v[j];
            }
          }
        }
      }
    }
  }
  return 0;
}

}  // extern "C"
