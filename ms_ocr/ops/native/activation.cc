// GeluTanh / GeluErf: the two GELUs of ops/activation.py in one pass over the tensor (activation.h).
#include <omp.h>

#include "activation.h"

namespace ms_ocr {
namespace {

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
}  // namespace ms_ocr

using namespace ms_ocr;

extern "C" {

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

}  // extern "C"
