// The library's C ABI: every symbol it exports, with the source that defines it. ms_ocr/ops/backend.py calls the
// kernels as MindSpore Custom(func_type="aot") operators ("<library>:<name>") and ms_ocr/ops/native/__init__.py the
// controls through ctypes; tests/ops/kernel_harness.cc drives the kernels without MindSpore.
//
// A kernel follows MindSpore's AOT CPU ABI: params holds the inputs then the outputs; ndims / shapes / dtypes describe
// each (dtype names as MindSpore spells them: "float32", "bfloat16", "int8", "int32", ...); it returns 0, or non-zero
// for operands it cannot read (MindSpore then raises). Every kernel computes in fp32 and reads contiguous (row-major)
// tensors; the decode kernels' weights may instead be bfloat16 (raw 16-bit words, widened in registers: exact, so a
// bf16 weight gives bit for bit the result of the same weight widened beforehand) or int8 with fp32 scales. Each
// kernel's operands are described at its definition.
#pragma once

#include <cstdint>

#define MS_OCR_API __attribute__((visibility("default")))
#define MS_OCR_KERNEL(name) \
  MS_OCR_API int name(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream, \
                      void* extra)

extern "C" {

// state.cc: threads, the build's SIMD level, the bf16 hardware switches, call counters, the read probe
MS_OCR_API void ms_ocr_set_threads(int n);
MS_OCR_API const char* ms_ocr_isa_level();
MS_OCR_API int ms_ocr_amx_init(int on);
MS_OCR_API int ms_ocr_amx_products();
MS_OCR_API int ms_ocr_dpbf16_init(int on);
MS_OCR_API int64_t ms_ocr_matmul_t_calls();
MS_OCR_API int64_t ms_ocr_decode_layer_calls();
MS_OCR_API int64_t ms_ocr_moe_experts_calls();
MS_OCR_API int64_t ms_ocr_vision_attention_calls();
MS_OCR_API int64_t ms_ocr_gelu_calls();
MS_OCR_API int64_t ms_ocr_gemm_bf16_calls();
MS_OCR_API int64_t ms_ocr_gemm_amx_calls();
MS_OCR_API int64_t ms_ocr_conv_calls();
MS_OCR_API int64_t ms_ocr_deformable_calls();
MS_OCR_API float ms_ocr_read_sum(const float* p, int64_t n);

// gemv.cc: a decode step's products against a very large weight (ops/linear.py)
MS_OCR_KERNEL(MatMulT);
MS_OCR_KERNEL(MatMulTBf16);
MS_OCR_KERNEL(MatMulTQ8);

// quant.cc: --quantize int8
MS_OCR_KERNEL(DequantQ8);
MS_OCR_API int ms_ocr_quantize_rows(const void* src, int bf16_src, int64_t n, int64_t k, int64_t run, int8_t* q,
                                    float* scales);

// decode_layer.cc: a dense decoder layer of a decode step (ops/decode_layer.py)
MS_OCR_KERNEL(DecodeLayer);
MS_OCR_KERNEL(DecodeLayerBf16);
// ... and a whole decode step of them (MoE layers too) with the final norm and the head (runtime/host_step.py)
MS_OCR_API int ms_ocr_decode_step(int layers, const int* nparam, void*** params, int** ndims, int64_t*** shapes,
                                  const char*** dtypes, const int* moe_nparam, void*** moe_params, int** moe_ndims,
                                  int64_t*** moe_shapes, const char*** moe_dtypes, int tiles, const int64_t* write,
                                  const float* norm_w, float norm_eps, int head_kind, int head_nparam,
                                  void** head_params, int* head_ndims, int64_t** head_shapes,
                                  const char** head_dtypes);

// moe.cc: a decode step's routed experts (nn/moe.py)
MS_OCR_KERNEL(MoeExperts);

// attention.cc: unmasked and causal attention (ops/attention.py); the bf16 forms in arch/x86/attention_bf16.cc
MS_OCR_KERNEL(VisionAttention);
MS_OCR_KERNEL(VisionAttentionRows);
MS_OCR_KERNEL(CausalAttention);
MS_OCR_KERNEL(VisionAttentionBf16);
MS_OCR_KERNEL(VisionAttentionBf16Rows);

// activation.cc: the GELUs (ops/activation.py)
MS_OCR_KERNEL(GeluTanh);
MS_OCR_KERNEL(GeluErf);

// vit.cc: a layer's element-wise work (ops/rope.py vit_heads, ops/norm.py layer_norm and rms_norm)
MS_OCR_KERNEL(ViTHeads);
MS_OCR_KERNEL(LayerNormRows);
MS_OCR_KERNEL(RmsNormRows);

// gather.cc: rows of tables widened to fp32 (ops/linear.py)
MS_OCR_KERNEL(GatherRows);
MS_OCR_KERNEL(InterpRows);
MS_OCR_KERNEL(WidenBf16);

// gemm_bf16.cc: products in bf16 through MindSpore's oneDNN (ops/linear.py)
MS_OCR_API int ms_ocr_load_dnnl(const char* path);
MS_OCR_API int ms_ocr_has_sgemm();
MS_OCR_KERNEL(GemmBf16);
MS_OCR_KERNEL(GemmBf16Bias);
MS_OCR_KERNEL(GemmBf16BiasGeluErf);
MS_OCR_KERNEL(GemmBf16BiasGeluTanh);
MS_OCR_KERNEL(GemmBf16BiasResidual);
// ... and the exact fp32 product on the AMX tiles (arch/x86/amx.h)
MS_OCR_KERNEL(GemmAmx);
MS_OCR_KERNEL(GemmAmxBias);
MS_OCR_KERNEL(GemmAmxBiasGeluErf);
MS_OCR_KERNEL(GemmAmxBiasGeluTanh);
MS_OCR_KERNEL(GemmAmxBiasResidual);

// conv.cc: the layout models' convolutions and deformable sampling (ops/conv.py, layout/deformable.py)
MS_OCR_KERNEL(Conv2dAffine);
MS_OCR_KERNEL(DeformableSample);
MS_OCR_KERNEL(PadMaxPool2);

}  // extern "C"
