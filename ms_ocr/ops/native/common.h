// What every kernel family shares: the process-wide state (defined in state.cc) and the dtype names of MindSpore's
// AOT ABI. The library is compiled with -fvisibility=hidden: only the entry points of kernels.h are exported.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>

#include "kernels.h"
#include "simd.h"

namespace ms_ocr {

extern int g_threads;  // the kernels' threads (ms_ocr_set_threads)
extern bool g_amx;     // ms_ocr_amx_init: the tiles are usable and turned on
extern bool g_dpbf16;  // ms_ocr_dpbf16_init: the vision attention's AVX512_BF16 kernel is on

// calls per kernel in this process, read by tests (which products took which kernel) through ms_ocr_*_calls
extern std::atomic<int64_t> g_matmul_t_calls, g_moe_experts_calls, g_decode_layer_calls, g_vision_attention_calls,
    g_gelu_calls, g_gemm_bf16_calls, g_gemm_amx_calls, g_conv_calls, g_deformable_calls;

inline bool is_bf16(const char* dtype) { return dtype != nullptr && std::strcmp(dtype, "bfloat16") == 0; }
inline bool is_int8(const char* dtype) { return dtype != nullptr && std::strcmp(dtype, "int8") == 0; }

}  // namespace ms_ocr
