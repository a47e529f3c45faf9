// CPU kernels for MindSpore Custom(func_type="aot") operators, built on first use by ms_ocr/ops/native/__init__.py.
//
// Entry points follow MindSpore's AOT CPU ABI: params holds the inputs then the outputs; ndims/shapes/dtypes
// describe each. Every kernel is fp32 and reads contiguous (row-major) tensors. The kernels: MatMulT (a decode
// step's products against a very large weight, ops/linear.py), DecodeLayer (a dense decoder layer of a decode
// step, ops/decode_layer.py), VisionAttention (unmasked attention, ops/attention.py), GeluTanh / GeluErf
// (ops/activation.py). Each has an AVX-512 path and a portable one (#else) for CPUs without it.
#include <omp.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace {

int g_threads = 1;
std::atomic<int64_t> g_matmul_t_calls{0};  // read by tests: which products took this kernel
std::atomic<int64_t> g_decode_layer_calls{0};
std::atomic<int64_t> g_vision_attention_calls{0};
std::atomic<int64_t> g_gelu_calls{0};

float dot(const float* a, const float* b, int64_t n) {
#if defined(__AVX512F__)
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
  if (i < n) {
    const __mmask16 t = static_cast<__mmask16>((1u << (n - i)) - 1u);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(t, a + i), _mm512_maskz_loadu_ps(t, b + i), acc);
  }
  return _mm512_reduce_add_ps(acc);
#else
  float acc[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] += a[i + l] * b[i + l];
  float s = 0.f;
  for (; i < n; ++i) s += a[i] * b[i];
  for (int l = 0; l < 16; ++l) s += acc[l];
  return s;
#endif
}

// y[m, o] = sum_i x[m, i] W[o, i] for rows o in [o0, o1): R weight rows at a time against all M (<= 8)
// activation rows. Memory bound: each weight row is read once, and R concurrent row streams keep more
// reads in flight than the hardware prefetcher alone (measured here: 2 rows ~29 GB/s, 8 rows ~41 GB/s).
template <int M, int R>
int64_t gemv_block(const float* x, const float* w, float* y, int64_t out, int64_t in, int64_t o, int64_t o1) {
#if defined(__AVX512F__)
  const int64_t full = in & ~int64_t(15);
  const __mmask16 tail = static_cast<__mmask16>((1u << (in - full)) - 1u);
  for (; o + R <= o1; o += R) {
    const float* w0 = w + o * in;
    __m512 acc[R][M];
    for (int r = 0; r < R; ++r)
      for (int m = 0; m < M; ++m) acc[r][m] = _mm512_setzero_ps();
    for (int64_t i = 0; i < full; i += 16) {
      __m512 xv[M];
      for (int m = 0; m < M; ++m) xv[m] = _mm512_loadu_ps(x + m * in + i);
      for (int r = 0; r < R; ++r) {
        const __m512 wv = _mm512_loadu_ps(w0 + r * in + i);
        for (int m = 0; m < M; ++m) acc[r][m] = _mm512_fmadd_ps(wv, xv[m], acc[r][m]);
      }
    }
    if (tail) {
      __m512 xv[M];
      for (int m = 0; m < M; ++m) xv[m] = _mm512_maskz_loadu_ps(tail, x + m * in + full);
      for (int r = 0; r < R; ++r) {
        const __m512 wv = _mm512_maskz_loadu_ps(tail, w0 + r * in + full);
        for (int m = 0; m < M; ++m) acc[r][m] = _mm512_fmadd_ps(wv, xv[m], acc[r][m]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int m = 0; m < M; ++m) y[m * out + o + r] = _mm512_reduce_add_ps(acc[r][m]);
  }
#else
  for (; o + R <= o1; o += R)
    for (int r = 0; r < R; ++r)
      for (int m = 0; m < M; ++m) y[m * out + o + r] = dot(w + (o + r) * in, x + m * in, in);
#endif
  return o;
}

// R * M accumulators stay within the 32 vector registers
template <int M>
constexpr int kBlockRows = M <= 3 ? 8 : (M <= 6 ? 4 : 3);

// Rows [o, o1) of y [m, out] = x [m, in] w [out, in]^T: blocks of kBlockRows weight rows, then single rows.
template <int M>
void gemv_rows_m(const float* x, const float* w, float* y, int64_t out, int64_t in, int64_t o, int64_t o1) {
  const int64_t rest = gemv_block<M, kBlockRows<M>>(x, w, y, out, in, o, o1);
  gemv_block<M, 1>(x, w, y, out, in, rest, o1);
}

template <int M>
void gemv(const float* x, const float* w, float* y, int64_t out, int64_t in) {
  // Chunks of rows handed out as threads ask: the calling thread may be niced below MindSpore's kernel threads
  // (device.lower_launcher_priority), and a static split would wait for its half.
  constexpr int64_t kChunk = 32 * kBlockRows<M>;
  const int64_t chunks = (out + kChunk - 1) / kChunk;
  const int threads = chunks > 1 ? g_threads : 1;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t o1 = (c + 1) * kChunk < out ? (c + 1) * kChunk : out;
    gemv_rows_m<M>(x, w, y, out, in, c * kChunk, o1);
  }
}

using GemvFn = void (*)(const float*, const float*, float*, int64_t, int64_t);
const GemvFn kGemv[] = {nullptr, gemv<1>, gemv<2>, gemv<3>, gemv<4>, gemv<5>, gemv<6>, gemv<7>, gemv<8>};


// ---- the fused decoder layer of one decode step ----------------------------------------------------------

#if defined(__AVX512F__)
// e^x (Cephes' expf polynomial; ~1 ulp), lanes clamped to [-87.3, 88.7]: the softmaxes, SiLU and the GELUs.
inline __m512 exp512(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.7f));
  const __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500E-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
  const __m512 y = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.f)));
  return _mm512_scalef_ps(y, fx);
}
#endif

// y += a * x
void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

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
#if defined(__AVX512F__)
  const __m512 one = _mm512_set1_ps(1.f);
  for (; i + 16 <= n; i += 16) {
    const __m512 gv = _mm512_loadu_ps(g + i);
    const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), gv));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_div_ps(gv, _mm512_add_ps(one, e)), _mm512_loadu_ps(u + i)));
  }
#endif
  for (; i < n; ++i) out[i] = g[i] / (1.f + std::exp(-g[i])) * u[i];
}

// e[i] = exp(s[i] - mx) for i < n; returns the sum
float exp_sum(float* s, int64_t n, float mx) {
  float sum = 0.f;
  int64_t i = 0;
#if defined(__AVX512F__)
  __m512 acc = _mm512_setzero_ps();
  const __m512 m = _mm512_set1_ps(mx);
  for (; i + 16 <= n; i += 16) {
    const __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(s + i), m));
    _mm512_storeu_ps(s + i, e);
    acc = _mm512_add_ps(acc, e);
  }
  sum = _mm512_reduce_add_ps(acc);
#endif
  for (; i < n; ++i) {
    s[i] = std::exp(s[i] - mx);
    sum += s[i];
  }
  return sum;
}

using GemvRowsFn = void (*)(const float*, const float*, float*, int64_t, int64_t, int64_t, int64_t);
const GemvRowsFn kGemvRows[] = {nullptr, gemv_rows_m<1>, gemv_rows_m<2>, gemv_rows_m<3>, gemv_rows_m<4>,
                                gemv_rows_m<5>, gemv_rows_m<6>, gemv_rows_m<7>, gemv_rows_m<8>};

// One product y [m, out] = x [m, in] w^T (+ res [m, out] when given) of a group run by parallel_products.
struct Product {
  const float* x;
  const float* w;
  float* y;
  int64_t out, in;
  const float* res;
};

// Runs the products of a group over the threads of the enclosing parallel region, in chunks of rows handed
// out on demand (the niced launcher thread takes fewer); ends with the worksharing loop's barrier.
void parallel_products(int m, const Product* ps, int n) {
  constexpr int64_t kChunk = 64;
  int64_t first[4] = {0, 0, 0, 0};
  for (int j = 0; j < n; ++j) first[j + 1] = first[j] + (ps[j].out + kChunk - 1) / kChunk;
#pragma omp for schedule(dynamic, 1)
  for (int64_t c = 0; c < first[n]; ++c) {
    int j = 0;
    while (c >= first[j + 1]) ++j;
    const Product& p = ps[j];
    const int64_t o = (c - first[j]) * kChunk, o1 = o + kChunk < p.out ? o + kChunk : p.out;
    kGemvRows[m](p.x, p.w, p.y, p.out, p.in, o, o1);
    if (p.res)
      for (int r = 0; r < m; ++r)
        for (int64_t i = o; i < o1; ++i) p.y[r * p.out + i] += p.res[r * p.out + i];
  }
}

// ---- bidirectional attention (vision encoders) -------------------------------------------------------------
// One task = 32 query rows of one (batch, head): their scores against every key are kept transposed, st[j][i]
// (key j, row i), so that q (packed [D][32], scaled) and the keys and values are all read in their natural
// layouts: the scores and the output are 8-key (8-dim) x 32-row register tiles of broadcast-and-FMA, with no
// lanes wasted on head dims that are not multiples of 16. The 32 rows' scores (T x 128 bytes) stay in L2; the
// softmax runs down the columns, 32 rows at once; the output accumulates over chunks of keys.

constexpr int kAttnRows = 32;
constexpr int64_t kAttnKeyChunk = 128;

#if defined(__AVX512F__)
template <int JR>
inline void attn_scores_tile(const float* k, const float* qt, float* st, int64_t d) {
  __m512 a[JR][2];
  for (int r = 0; r < JR; ++r) a[r][0] = a[r][1] = _mm512_setzero_ps();
  for (int64_t e = 0; e < d; ++e) {
    const __m512 q0 = _mm512_loadu_ps(qt + e * kAttnRows), q1 = _mm512_loadu_ps(qt + e * kAttnRows + 16);
    for (int r = 0; r < JR; ++r) {
      const __m512 kv = _mm512_set1_ps(k[r * d + e]);
      a[r][0] = _mm512_fmadd_ps(kv, q0, a[r][0]);
      a[r][1] = _mm512_fmadd_ps(kv, q1, a[r][1]);
    }
  }
  for (int r = 0; r < JR; ++r) {
    _mm512_storeu_ps(st + r * kAttnRows, a[r][0]);
    _mm512_storeu_ps(st + r * kAttnRows + 16, a[r][1]);
  }
}

// acc[e][i] += sum_{j in [j0, j1)} v[j][e] p[j][i] for the 8 dims e of one group
inline void attn_values_tile(const float* v, const float* st, float* acc, int64_t d, int64_t j0, int64_t j1) {
  __m512 a[8][2];
  for (int r = 0; r < 8; ++r) {
    a[r][0] = _mm512_loadu_ps(acc + r * kAttnRows);
    a[r][1] = _mm512_loadu_ps(acc + r * kAttnRows + 16);
  }
  for (int64_t j = j0; j < j1; ++j) {
    const __m512 p0 = _mm512_loadu_ps(st + j * kAttnRows), p1 = _mm512_loadu_ps(st + j * kAttnRows + 16);
    const float* vj = v + j * d;
    for (int r = 0; r < 8; ++r) {
      const __m512 vv = _mm512_set1_ps(vj[r]);
      a[r][0] = _mm512_fmadd_ps(vv, p0, a[r][0]);
      a[r][1] = _mm512_fmadd_ps(vv, p1, a[r][1]);
    }
  }
  for (int r = 0; r < 8; ++r) {
    _mm512_storeu_ps(acc + r * kAttnRows, a[r][0]);
    _mm512_storeu_ps(acc + r * kAttnRows + 16, a[r][1]);
  }
}
#endif

// out[i][e] for the task's rows: softmax(q k^T * scale) v; qt = q^T * scale [d][32] (rows past `rows` zero);
// st [t][32] and acc [d][32] scratch
void attn_task(const float* qt, const float* k, const float* v, float* out, int64_t rows, int64_t t, int64_t d,
               float* st, float* acc) {
#if defined(__AVX512F__)
  int64_t j = 0;
  for (; j + 8 <= t; j += 8) attn_scores_tile<8>(k + j * d, qt, st + j * kAttnRows, d);
  for (; j < t; ++j) attn_scores_tile<1>(k + j * d, qt, st + j * kAttnRows, d);
  __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0;
  for (j = 0; j < t; ++j) {
    m0 = _mm512_max_ps(m0, _mm512_loadu_ps(st + j * kAttnRows));
    m1 = _mm512_max_ps(m1, _mm512_loadu_ps(st + j * kAttnRows + 16));
  }
  __m512 s0 = _mm512_setzero_ps(), s1 = s0;
  for (j = 0; j < t; ++j) {
    const __m512 e0 = exp512(_mm512_sub_ps(_mm512_loadu_ps(st + j * kAttnRows), m0));
    const __m512 e1 = exp512(_mm512_sub_ps(_mm512_loadu_ps(st + j * kAttnRows + 16), m1));
    _mm512_storeu_ps(st + j * kAttnRows, e0);
    _mm512_storeu_ps(st + j * kAttnRows + 16, e1);
    s0 = _mm512_add_ps(s0, e0);
    s1 = _mm512_add_ps(s1, e1);
  }
  float inv[kAttnRows];
  _mm512_storeu_ps(inv, _mm512_div_ps(_mm512_set1_ps(1.f), s0));
  _mm512_storeu_ps(inv + 16, _mm512_div_ps(_mm512_set1_ps(1.f), s1));
  for (int64_t i = 0; i < d * kAttnRows; ++i) acc[i] = 0.f;
  for (int64_t j0 = 0; j0 < t; j0 += kAttnKeyChunk) {
    const int64_t j1 = j0 + kAttnKeyChunk < t ? j0 + kAttnKeyChunk : t;
    for (int64_t g = 0; g < d; g += 8) attn_values_tile(v + g, st, acc + g * kAttnRows, d, j0, j1);
  }
#else
  for (int64_t j = 0; j < t; ++j)
    for (int i = 0; i < kAttnRows; ++i) {
      float s = 0.f;
      for (int64_t e = 0; e < d; ++e) s += k[j * d + e] * qt[e * kAttnRows + i];
      st[j * kAttnRows + i] = s;
    }
  float inv[kAttnRows];
  for (int i = 0; i < kAttnRows; ++i) {
    float mx = -INFINITY, sum = 0.f;
    for (int64_t j = 0; j < t; ++j) mx = st[j * kAttnRows + i] > mx ? st[j * kAttnRows + i] : mx;
    for (int64_t j = 0; j < t; ++j) {
      st[j * kAttnRows + i] = std::exp(st[j * kAttnRows + i] - mx);
      sum += st[j * kAttnRows + i];
    }
    inv[i] = 1.f / sum;
  }
  for (int64_t i = 0; i < d * kAttnRows; ++i) acc[i] = 0.f;
  for (int64_t j = 0; j < t; ++j)
    for (int64_t e = 0; e < d; ++e)
      for (int i = 0; i < kAttnRows; ++i) acc[e * kAttnRows + i] += v[j * d + e] * st[j * kAttnRows + i];
#endif
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t e = 0; e < d; ++e) out[i * d + e] = acc[e * kAttnRows + i] * inv[i];
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

void gelu_range(const float* x, float* y, int64_t n, bool erf_form) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 one = _mm512_set1_ps(1.f);
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    __m512 out;
    if (!erf_form) {
      const __m512 v3 = _mm512_mul_ps(_mm512_mul_ps(v, v), v);
      const __m512 z = _mm512_mul_ps(_mm512_set1_ps(-kGeluTanhScale), _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), v3, v));
      out = _mm512_div_ps(v, _mm512_add_ps(one, exp512(z)));
    } else {
      const __m512 av = _mm512_abs_ps(v);
      const __m512 a = _mm512_mul_ps(av, _mm512_set1_ps(kInvSqrt2));
      const __m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(_mm512_set1_ps(kErfcP), a, one));
      __m512 p = _mm512_fmadd_ps(t, _mm512_set1_ps(kErfcC4), _mm512_set1_ps(kErfcC3));
      p = _mm512_fmadd_ps(t, p, _mm512_set1_ps(kErfcC2));
      p = _mm512_fmadd_ps(t, p, _mm512_set1_ps(kErfcC1));
      p = _mm512_fmadd_ps(t, p, _mm512_set1_ps(kErfcC0));
      const __m512 q = _mm512_mul_ps(_mm512_mul_ps(t, p), exp512(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(a, a))));
      out = _mm512_mul_ps(_mm512_set1_ps(0.5f), _mm512_fmadd_ps(av, _mm512_sub_ps(one, q), v));
    }
    _mm512_storeu_ps(y + i, out);
  }
#endif
  for (; i < n; ++i) y[i] = gelu_scalar(x[i], erf_form);
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
    gelu_range(x + i0, y + i0, i1 - i0, erf_form);
  }
  return 0;
}

}  // namespace

extern "C" {

// Threads the kernels use (set once from the runtime's thread count).
// The first parallel region creates the OpenMP pool of the calling thread; its threads keep the priority
// they start with.
void ms_ocr_set_threads(int n) {
  g_threads = n > 0 ? n : 1;
#pragma omp parallel num_threads(g_threads)
  { }
}
int64_t ms_ocr_matmul_t_calls() { return g_matmul_t_calls.load(); }
int ms_ocr_has_avx512() {
#if defined(__AVX512F__)
  return 1;
#else
  return 0;
#endif
}

// MatMulT: x [M, K] (M <= 8), w [N, K] -> y [M, N] = x w^T, for the decode step's matrix-vector products.
int MatMulT(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream, void* extra) {
  (void)stream; (void)extra; (void)dtypes;
  if (nparam != 3 || ndims[0] != 2 || ndims[1] != 2) return 1;
  const int64_t m = shapes[0][0], k = shapes[0][1], n = shapes[1][0];
  if (m < 1 || m > 8 || shapes[1][1] != k) return 1;
  g_matmul_t_calls.fetch_add(1);
  kGemv[m](static_cast<const float*>(params[0]), static_cast<const float*>(params[1]), static_cast<float*>(params[2]), n, k);
  return 0;
}

int64_t ms_ocr_decode_layer_calls() { return g_decode_layer_calls.load(); }

// DecodeLayer: one dense pre-norm decoder layer (RMSNorm -> GQA attention with rope -> residual -> RMSNorm ->
// SiLU-gated MLP -> residual) for one new token per sequence over KV caches it only reads, as
// F.decoder_attention_decode + F.gated_mlp compose it (ms_ocr/ops/decode_layer.py describes the operands).
// Inputs: x [B, 1, H]; cos, sin [B|1, 1, 1, D]; mask [B|1, 1, 1, T] (additive); k_cache, v_cache [B, Hkv, T, D];
// input_layernorm [H]; q_proj [Hq*D, H]; k_proj, v_proj [Hkv*D, H]; (query/key norms [D] when qk-normed);
// o_proj [H, Hq*D]; post_attention_layernorm [H]; gate_proj, up_proj [I, H]; down_proj [H, I]; eps [1].
// Outputs: x [B, 1, H] and this token's k, v [B, Hkv, 1, D].
int DecodeLayer(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,
                void* extra) {
  (void)stream; (void)extra; (void)dtypes;
  if (nparam != 19 && nparam != 21) return 1;
  const bool qk_norm = nparam == 21;
  const int n_in = nparam - 3;
  auto in = [&](int i) { return static_cast<const float*>(params[i]); };
  const float *x = in(0), *cos = in(1), *sin = in(2), *mask = in(3), *kc = in(4), *vc = in(5), *inw = in(6),
              *qw = in(7), *kw = in(8), *vw = in(9);
  const int w = qk_norm ? 12 : 10;
  const float *qnw = qk_norm ? in(10) : nullptr, *knw = qk_norm ? in(11) : nullptr;
  const float *ow = in(w), *postw = in(w + 1), *gw = in(w + 2), *uw = in(w + 3), *dw = in(w + 4);
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
  std::vector<float> h(b * hidden), q(b * hq * d), attn(b * hq * d), x1(b * hidden), g(b * inter), u(b * inter);
  const int m = static_cast<int>(b);
#pragma omp parallel num_threads(g_threads)
  {
#pragma omp single
    for (int64_t r = 0; r < b; ++r) rms_norm(x + r * hidden, inw, h.data() + r * hidden, hidden, eps);
    {
      const Product ps[] = {{h.data(), qw, q.data(), hq * d, hidden, nullptr},
                            {h.data(), kw, k, hkv * d, hidden, nullptr},
                            {h.data(), vw, v, hkv * d, hidden, nullptr}};
      parallel_products(m, ps, 3);
    }
#pragma omp single
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
      }
    }
    {
      // softmax over [q k_cache^T + mask, q k_new] and the matching sum of [v_cache, v_new], one head a task;
      // slots the mask hides (NEG_BIAS) would weigh exactly 0 and are skipped
      std::vector<float> scores(t + 1);
      std::vector<int64_t> seen(t);
#pragma omp for schedule(dynamic, 1)
      for (int64_t task = 0; task < b * hq; ++task) {
        const int64_t r = task / hq, i = task % hq, g_kv = r * hkv + i / rep;
        const float *qi = q.data() + task * d, *kcache = kc + g_kv * t * d, *vcache = vc + g_kv * t * d;
        const float* mrow = mask + r * mask_stride;
        int64_t n = 0;
        for (int64_t s = 0; s < t; ++s)
          if (mrow[s] > -1e38f) {
            seen[n] = s;
            scores[n++] = dot(qi, kcache + s * d, d) + mrow[s];
          }
        scores[n] = dot(qi, k + g_kv * d, d);
        float mx = scores[n];
        for (int64_t j = 0; j < n; ++j) mx = scores[j] > mx ? scores[j] : mx;
        const float inv = 1.f / exp_sum(scores.data(), n + 1, mx);
        float* out = attn.data() + task * d;
        for (int64_t j = 0; j < d; ++j) out[j] = 0.f;
        for (int64_t j = 0; j < n; ++j) axpy(scores[j] * inv, vcache + seen[j] * d, out, d);
        axpy(scores[n] * inv, v + g_kv * d, out, d);
      }
    }
    {
      const Product ps[] = {{attn.data(), ow, x1.data(), hidden, hq * d, x}};
      parallel_products(m, ps, 1);
    }
#pragma omp single
    for (int64_t r = 0; r < b; ++r) rms_norm(x1.data() + r * hidden, postw, h.data() + r * hidden, hidden, eps);
    {
      const Product ps[] = {{h.data(), gw, g.data(), inter, hidden, nullptr},
                            {h.data(), uw, u.data(), inter, hidden, nullptr}};
      parallel_products(m, ps, 2);
    }
#pragma omp single
    silu_mul(g.data(), u.data(), g.data(), b * inter);
    {
      const Product ps[] = {{g.data(), dw, x_out, hidden, inter, x1.data()}};
      parallel_products(m, ps, 1);
    }
  }
  return 0;
}

// VisionAttention: softmax(q k^T * scale) v over all keys (no mask), heads paired one to one.
// Inputs: q [B, H, S, D], k, v [B, H, T, D] (D a multiple of 8, at most 256), scale [1]. Output: [B, H, S, D].
int VisionAttention(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,
                    void* extra) {
  (void)stream; (void)extra; (void)dtypes;
  if (nparam != 5 || ndims[0] != 4 || ndims[1] != 4 || ndims[2] != 4) return 1;
  const int64_t b = shapes[0][0], h = shapes[0][1], s = shapes[0][2], d = shapes[0][3], t = shapes[1][2];
  if (d % 8 != 0 || d > 256 || t < 1 || shapes[1][0] != b || shapes[1][1] != h || shapes[1][3] != d) return 1;
  const float *q = static_cast<const float*>(params[0]), *k = static_cast<const float*>(params[1]),
              *v = static_cast<const float*>(params[2]);
  const float scale = static_cast<const float*>(params[3])[0];
  float* out = static_cast<float*>(params[4]);
  const int64_t blocks = (s + kAttnRows - 1) / kAttnRows, tasks = b * h * blocks;
  g_vision_attention_calls.fetch_add(1);
#pragma omp parallel num_threads(tasks > 1 ? g_threads : 1)
  {
    std::vector<float> qt(d * kAttnRows), st(t * kAttnRows), acc(d * kAttnRows);
    // head-major: the threads work on the same head's keys and values at the same time (shared cache)
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t bh = task / blocks, r0 = (task % blocks) * kAttnRows;
      const int64_t rows = s - r0 < kAttnRows ? s - r0 : kAttnRows;
      const float* qb = q + (bh * s + r0) * d;
      for (int64_t e = 0; e < d; ++e)
        for (int64_t i = 0; i < kAttnRows; ++i) qt[e * kAttnRows + i] = i < rows ? qb[i * d + e] * scale : 0.f;
      attn_task(qt.data(), k + bh * t * d, v + bh * t * d, out + (bh * s + r0) * d, rows, t, d, st.data(),
                acc.data());
    }
  }
  return 0;
}
int64_t ms_ocr_vision_attention_calls() { return g_vision_attention_calls.load(); }

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
