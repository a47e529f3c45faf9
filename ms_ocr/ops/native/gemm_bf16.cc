// GemmBf16 and its epilogues: --dtype bf16's products (bf16 operands, fp32 sums) through the oneDNN library MindSpore's
// wheel ships (dnnl.h), split into g_threads column (or row) slices, the epilogue run on each slice while it is in
// its core's cache.
#include <dlfcn.h>
#include <omp.h>

#include <vector>

#include "activation.h"
#include "arch/x86/amx.h"
#include "common.h"
#include "dnnl.h"

namespace ms_ocr {

dnnl_gemm_bf16_fn g_dnnl_gemm_bf16 = nullptr;
dnnl_sgemm_fn g_dnnl_sgemm = nullptr;

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

// 64-byte aligned room for `count` elements in a buffer of this thread's (a product's scratch, kept for the next
// call instead of mapping and faulting in fresh pages each time); `release` gives back one past kKeptScratch bytes.
constexpr size_t kKeptScratch = size_t{32} << 20;

template <typename T>
T* scratch(std::vector<T>& buffer, int64_t count) {
  const size_t need = static_cast<size_t>(count) + 64 / sizeof(T);
  if (buffer.size() < need) buffer.resize(need);
  return reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(buffer.data()) + 63) & ~uintptr_t{63});
}

template <typename T>
void release(std::vector<T>& buffer) {
  if (buffer.capacity() * sizeof(T) > kKeptScratch) std::vector<T>().swap(buffer);
}

bool amx_ready() {
#if defined(MS_OCR_AMX)
  return amx_granted();
#else
  return false;
#endif
}

// How a GemmBf16-family kernel multiplies: x rounded to bf16 through oneDNN's bf16 GEMM (GemmBf16), or on the AMX
// tiles where ms_ocr_amx_init turned them on (GemmBf16 under --dtype bf16), or x cut into three bf16 parts on the
// tiles, the exact fp32 product (GemmAmx; arch/x86/amx.h).
enum class GemmKind { kDnnlBf16, kAmxBf16, kAmxExact };

// GemmBf16 / GemmAmx and their variants: x [M, K] (fp32, rounded to bf16 or cut into parts here; GemmBf16 also
// takes bf16), w [N, K] (bf16; or a convolution's [N, C, kh, kw] read as [N, C * kh * kw], which MindSpore's CPU
// Reshape cannot flatten in bf16) [, b [N] fp32 [, res [M, N] fp32]] -> y [M, N] = x w^T (fp32 sums), then the
// epilogue. Work is split into g_threads slices of N (or of M where M is the longer side), each thread computing its
// slice and then its epilogue.
int gemm_bf16_entry(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, Epilogue ep,
                    GemmKind product = GemmKind::kDnnlBf16) {
  const int inputs = ep == Epilogue::kNone ? 2 : ep == Epilogue::kBiasResidual ? 4 : 3;
  if (nparam != inputs + 1 || ndims[0] != 2 || ndims[1] < 2 || ndims[1] > 4 || !is_bf16(dtypes[1])) return 1;
  if (product == GemmKind::kDnnlBf16 ? g_dnnl_gemm_bf16 == nullptr : !amx_ready() || is_bf16(dtypes[0])) return 1;
  if (product == GemmKind::kDnnlBf16 && g_amx) product = GemmKind::kAmxBf16;
  const int64_t m = shapes[0][0], k = shapes[0][1], n = shapes[1][0];
  int64_t wk = 1;
  for (int d = 1; d < ndims[1]; ++d) wk *= shapes[1][d];
  if (wk != k || m < 1 || n < 1 || k < 1) return 1;
  if (inputs >= 3 && (ndims[2] != 1 || shapes[2][0] != n || is_bf16(dtypes[2]))) return 1;
  if (inputs == 4 && (ndims[3] != 2 || shapes[3][0] != m || shapes[3][1] != n || is_bf16(dtypes[3]))) return 1;
  const float* b = inputs >= 3 ? static_cast<const float*>(params[2]) : nullptr;
  const float* res = inputs == 4 ? static_cast<const float*>(params[3]) : nullptr;
  const uint16_t* w = static_cast<const uint16_t*>(params[1]);
  float* y = static_cast<float*>(params[inputs]);
  const bool by_rows = m > n;  // slices along N (the weight's rows) unless M is the longer side
  const int64_t len = by_rows ? m : n;
  // slices in multiples of 64: the kernels' tiles stay whole (and an AMX row slice starts at a 16-row block)
  int parts = static_cast<int>(len / 64 < g_threads ? (len / 64 > 0 ? len / 64 : 1) : g_threads);
  const int64_t step = ((len + parts - 1) / parts + 63) / 64 * 64;
  parts = static_cast<int>((len + step - 1) / step);
  int failed = 0;
#if defined(MS_OCR_AMX)
  if (product != GemmKind::kDnnlBf16) {
    (product == GemmKind::kAmxExact ? g_gemm_amx_calls : g_gemm_bf16_calls).fetch_add(1);
    const int kParts = product == GemmKind::kAmxExact ? 3 : 1;
    thread_local std::vector<uint16_t> split;
    uint16_t* xa = scratch(split, amx_split_elements(m, k, kParts));
    const int64_t blocks = (m + 31) / 32 * 2;  // of 16 rows
#pragma omp parallel for num_threads(m * k >= (1 << 16) ? g_threads : 1) schedule(static)
    for (int64_t i = 0; i < blocks; ++i) {
      if (is_bf16(dtypes[0]))
        amx_split_bf16(static_cast<const uint16_t*>(params[0]), m, k, xa, i * 16, i * 16 + 16);
      else
        amx_split(static_cast<const float*>(params[0]), m, k, kParts, xa, i * 16, i * 16 + 16);
    }
    const int64_t block = (k + 31) / 32 * kParts * 512;  // elements of one 16-row block of xa
#pragma omp parallel for num_threads(parts) schedule(static)
    for (int t = 0; t < parts; ++t) {
      const int64_t a = t * step, cnt = (a + step < len ? step : len - a);
      thread_local std::vector<uint32_t> panel_buffer;
      uint32_t* panel = scratch(panel_buffer, amx_panel_elements(k));
      amx_begin();
      if (by_rows)
        amx_product(xa + a / 16 * block, cnt, k, kParts, w, n, y + a * n, n, panel);
      else
        amx_product(xa, m, k, kParts, w + a * k, cnt, y + a, n, panel);
      amx_end();
      if (by_rows)
        apply_epilogue(ep, y, n, a, a + cnt, 0, n, b, res);
      else
        apply_epilogue(ep, y, n, 0, m, a, a + cnt, b, res);
    }
    release(split);  // a large image's rows (a merger's 4,608 columns) are not held between calls
    return 0;
  }
#endif
  g_gemm_bf16_calls.fetch_add(1);
  const uint16_t* xb = static_cast<const uint16_t*>(params[0]);
  std::vector<uint16_t> rounded;
  if (!is_bf16(dtypes[0])) {
    const float* x = static_cast<const float*>(params[0]);
    rounded.resize(static_cast<size_t>(m * k));
#pragma omp parallel for num_threads(m * k >= (1 << 16) ? g_threads : 1) schedule(static)
    for (int64_t i = 0; i < m * k; ++i) rounded[i] = round_bf16(x[i]);
    xb = rounded.data();
  }
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
}  // namespace ms_ocr

using namespace ms_ocr;

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

// Each entry: MindSpore's AOT signature over gemm_bf16_entry with its epilogue and kind of product.
#define MS_OCR_GEMM_ENTRY(name, epilogue, kind)                                                                  \
  int name(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,          \
           void* extra) {                                                                                       \
    (void)stream;                                                                                               \
    (void)extra;                                                                                                \
    return gemm_bf16_entry(nparam, params, ndims, shapes, dtypes, epilogue, kind);                              \
  }

// x w^T; x w^T + b; GELU(x w^T + b), the exact (erf) form and the tanh approximation (GeluErf / GeluTanh's formulas);
// res + (x w^T + b), a residual branch's last product
MS_OCR_GEMM_ENTRY(GemmBf16, Epilogue::kNone, GemmKind::kDnnlBf16)
MS_OCR_GEMM_ENTRY(GemmBf16Bias, Epilogue::kBias, GemmKind::kDnnlBf16)
MS_OCR_GEMM_ENTRY(GemmBf16BiasGeluErf, Epilogue::kBiasGeluErf, GemmKind::kDnnlBf16)
MS_OCR_GEMM_ENTRY(GemmBf16BiasGeluTanh, Epilogue::kBiasGeluTanh, GemmKind::kDnnlBf16)
MS_OCR_GEMM_ENTRY(GemmBf16BiasResidual, Epilogue::kBiasResidual, GemmKind::kDnnlBf16)
// GemmAmx and its epilogues: the same signatures, fp32 x only, the exact fp32 product on the AMX tiles (where
// Linux granted the tiles: ms_ocr_amx_products; else they fail, and the caller routes MatMul)
MS_OCR_GEMM_ENTRY(GemmAmx, Epilogue::kNone, GemmKind::kAmxExact)
MS_OCR_GEMM_ENTRY(GemmAmxBias, Epilogue::kBias, GemmKind::kAmxExact)
MS_OCR_GEMM_ENTRY(GemmAmxBiasGeluErf, Epilogue::kBiasGeluErf, GemmKind::kAmxExact)
MS_OCR_GEMM_ENTRY(GemmAmxBiasGeluTanh, Epilogue::kBiasGeluTanh, GemmKind::kAmxExact)
MS_OCR_GEMM_ENTRY(GemmAmxBiasResidual, Epilogue::kBiasResidual, GemmKind::kAmxExact)

}  // extern "C"
