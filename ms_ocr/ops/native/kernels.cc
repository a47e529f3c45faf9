// CPU kernels for MindSpore Custom(func_type="aot") operators, built on first use by ms_ocr/ops/native/__init__.py.
//
// Entry points follow MindSpore's AOT CPU ABI: params holds the inputs then the outputs; ndims/shapes/dtypes
// describe each. Every kernel is fp32 and reads contiguous (row-major) tensors.
#include <omp.h>

#include <atomic>
#include <cstdint>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace {

int g_threads = 1;
std::atomic<int64_t> g_matmul_t_calls{0};  // read by tests: which products took this kernel

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
    for (int r = 0; r < R; ++r) {
      const float* w0 = w + (o + r) * in;
      for (int m = 0; m < M; ++m) {
        const float* xm = x + m * in;
        float acc[16] = {0};
        int64_t i = 0;
        for (; i + 16 <= in; i += 16)
          for (int l = 0; l < 16; ++l) acc[l] += w0[i + l] * xm[i + l];
        float s = 0.f;
        for (; i < in; ++i) s += w0[i] * xm[i];
        for (int l = 0; l < 16; ++l) s += acc[l];
        y[m * out + o + r] = s;
      }
    }
#endif
  return o;
}

template <int M>
void gemv(const float* x, const float* w, float* y, int64_t out, int64_t in) {
  // R * M accumulators stay within the 32 vector registers
  constexpr int R = M <= 3 ? 8 : (M <= 6 ? 4 : 3);
  // Chunks of rows handed out as threads ask: the calling thread may be niced below MindSpore's kernel threads
  // (device.lower_launcher_priority), and a static split would wait for its half.
  constexpr int64_t kChunk = 32 * R;
  const int64_t chunks = (out + kChunk - 1) / kChunk;
  const int threads = chunks > 1 ? g_threads : 1;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t o1 = (c + 1) * kChunk < out ? (c + 1) * kChunk : out;
    const int64_t o = gemv_block<M, R>(x, w, y, out, in, c * kChunk, o1);
    gemv_block<M, 1>(x, w, y, out, in, o, o1);
  }
}

using GemvFn = void (*)(const float*, const float*, float*, int64_t, int64_t);
const GemvFn kGemv[] = {nullptr, gemv<1>, gemv<2>, gemv<3>, gemv<4>, gemv<5>, gemv<6>, gemv<7>, gemv<8>};

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

}  // extern "C"
