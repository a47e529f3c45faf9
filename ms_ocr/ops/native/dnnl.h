// oneDNN's gemms, from the libdnnl MindSpore's wheel ships, opened at run time (ms_ocr_load_dnnl, gemm_bf16.cc):
// dnnl_gemm_bf16bf16f32 (row-major C = alpha op(A) op(B) + beta C, bf16 operands, fp32 accumulation and output) for
// GemmBf16, and its fp32 dnnl_sgemm (same argument order) for the convolutions (Conv2dAffine, conv.cc). That library
// is built for a thread pool runtime and its plain gemm runs on the calling thread: the kernels split a product into
// slices, one sequential gemm each on the kernels' threads.
#pragma once

#include <cstdint>

namespace ms_ocr {

typedef int (*dnnl_gemm_bf16_fn)(char, char, int64_t, int64_t, int64_t, float, const uint16_t*, int64_t,
                                 const uint16_t*, int64_t, float, float*, int64_t);
typedef int (*dnnl_sgemm_fn)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                             int64_t, float, float*, int64_t);
extern dnnl_gemm_bf16_fn g_dnnl_gemm_bf16;  // null until ms_ocr_load_dnnl found it
extern dnnl_sgemm_fn g_dnnl_sgemm;

}  // namespace ms_ocr
