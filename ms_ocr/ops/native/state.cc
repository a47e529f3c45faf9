// The library's process-wide state and the controls ms_ocr/ops/native/__init__.py calls through ctypes: the thread
// count, the SIMD level of the build, the bf16 hardware (AMX tiles, AVX512_BF16) turned on or off, the call counters,
// and the read probe the benchmarks' decode bound is measured with.
#include <omp.h>

#include <vector>

#include "arch/x86/amx.h"
#include "common.h"
#include "team.h"

namespace ms_ocr {

int g_threads = 1;
bool g_amx = false;
bool g_dpbf16 = false;
std::atomic<int64_t> g_matmul_t_calls{0}, g_moe_experts_calls{0}, g_decode_layer_calls{0},
    g_vision_attention_calls{0}, g_gelu_calls{0}, g_gemm_bf16_calls{0}, g_gemm_amx_calls{0}, g_conv_calls{0},
    g_deformable_calls{0};

}  // namespace ms_ocr

using namespace ms_ocr;

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

// The SIMD level this library was compiled for: "avx512", "avx2", "neon", "sse2" or "scalar".
const char* ms_ocr_isa_level() { return MS_OCR_ISA; }

// Turns the tiles on (on != 0: the CPU has AMX-TILE and AMX-BF16 and Linux grants this process the tile state)
// or off for DecodeLayerBf16, MatMulTBf16, VisionAttentionBf16(Rows) and GemmBf16 (else oneDNN's): 1 when on.
int ms_ocr_amx_init(int on) {
  g_amx = false;
#if defined(MS_OCR_AMX)
  g_amx = on && amx_granted();
#else
  (void)on;
#endif
  return g_amx ? 1 : 0;
}

// Whether GemmAmx can use the tiles (the CPU has AMX-TILE and AMX-BF16 and Linux granted the tile state, asked once):
// 1 when it can. Unlike ms_ocr_amx_init this switches nothing: the exact path routes GemmAmx by it.
int ms_ocr_amx_products() {
#if defined(MS_OCR_AMX)
  return amx_granted() ? 1 : 0;
#else
  return 0;
#endif
}

// Turns the vision attention's AVX512_BF16 kernel (VisionAttentionBf16(Rows) where the tiles are off or the head
// dim is past theirs) on (on != 0 and the CPU has AVX512_BF16) or off: 1 when on.
int ms_ocr_dpbf16_init(int on) {
  g_dpbf16 = false;
#if defined(MS_OCR_AMX)
  g_dpbf16 = on && dpbf16_supported();
#else
  (void)on;
#endif
  return g_dpbf16 ? 1 : 0;
}

int64_t ms_ocr_matmul_t_calls() { return g_matmul_t_calls.load(); }
int64_t ms_ocr_decode_layer_calls() { return g_decode_layer_calls.load(); }
int64_t ms_ocr_moe_experts_calls() { return g_moe_experts_calls.load(); }
int64_t ms_ocr_vision_attention_calls() { return g_vision_attention_calls.load(); }
int64_t ms_ocr_gelu_calls() { return g_gelu_calls.load(); }
int64_t ms_ocr_gemm_bf16_calls() { return g_gemm_bf16_calls.load(); }
int64_t ms_ocr_gemm_amx_calls() { return g_gemm_amx_calls.load(); }
int64_t ms_ocr_conv_calls() { return g_conv_calls.load(); }
int64_t ms_ocr_deformable_calls() { return g_deformable_calls.load(); }

// The sum of n floats (n a multiple of 4 vectors) read by the decode team, each thread its contiguous share with
// vector loads into four sums: a STREAM-like read of the bandwidth the decode kernels can draw on (bench/memory.py
// times it). The sum is returned so that no read is left out.
float ms_ocr_read_sum(const float* p, int64_t n) {
  std::vector<float> part(g_threads > 0 ? g_threads : 1, 0.0f);
  team_run(g_threads, [&](const TeamCtx& team) {
    const auto [lo, hi] = team_share(n, 4 * kVL, team);
    vf a{}, b{}, c{}, d{};
    for (int64_t i = lo; i + 4 * kVL <= hi; i += 4 * kVL) {
      a += vload(p + i);
      b += vload(p + i + kVL);
      c += vload(p + i + 2 * kVL);
      d += vload(p + i + 3 * kVL);
    }
    part[team.tid] = vsum((a + b) + (c + d));
  });
  float total = 0.0f;
  for (float v : part) total += v;
  return total;
}

}  // extern "C"
