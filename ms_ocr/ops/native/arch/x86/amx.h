// --dtype bf16's x86 hardware: AMX (Intel's tile unit, Sapphire Rapids and later Xeons) for a batched decode step's
// products and the vision attention, and AVX512_BF16 (VDPBF16PS: AMD Zen 4 and later, Intel Cooper Lake) for the
// vision attention where the tiles are off. Compiled into every x86-64 build with GCC 11 or later (each function
// carries its own target attribute) and used only where the CPU has the instructions, which ms_ocr_amx_init and
// ms_ocr_dpbf16_init check at run time. Elsewhere MS_OCR_AMX stays undefined and the kernels keep their fp32 paths.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define MS_OCR_AMX 1
#endif

#if defined(MS_OCR_AMX)
#include <cstdint>

#include "../../simd.h"

namespace ms_ocr {

// amx.cc: whether the CPU has AMX-TILE and AMX-BF16 and Linux grants this process the tile state (arch_prctl)
bool amx_request();
// amx.cc: whether the CPU has AVX512_BF16 (and AVX512BW)
bool dpbf16_supported();

// amx.cc: the tiles as amx_rows uses them, set up once per thread per kernel call (amx_begin) and given back at its
// end (amx_end)
__attribute__((target("amx-tile"))) void amx_begin();
__attribute__((target("amx-tile"))) void amx_end();

// amx.cc: y[r * out + o ..] for outputs [o, o1) (a multiple of 32 of them) and rows r < m = x w^T, x packed
// (TileRows, gemv.h), w [out, k] bf16; the tiles set up (amx_begin).
__attribute__((target("amx-tile,amx-bf16"))) void amx_rows(const uint16_t* px, int m, const bf16* w, float* y,
                                                            int64_t out, int64_t k, int64_t o, int64_t o1);

// attention_bf16.cc: VisionAttentionBf16(Rows)'s body (attention.cc)
int attention_bf16(int nparam, void** params, int* ndims, int64_t** shapes, bool rows_out);

}  // namespace ms_ocr
#endif
