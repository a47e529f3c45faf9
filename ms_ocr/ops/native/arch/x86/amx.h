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
// amx.cc: amx_request's answer, asked once per process (the grant lasts as long as the process)
bool amx_granted();
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

// amx.cc, the products of many rows (a prompt's, an image's patches) on the tiles: x [m, k] fp32 cut into `parts`
// bf16 matrices (amx_split), then amx_product per slice of outputs, each thread its own slice.
// parts 3: x = x1 + x2 + x3 exactly (each part the next 8 bits of x's 24-bit significand, cut off, not rounded), so
// each product of a part with a bf16 weight is exact in fp32 and the tiles' fp32 sums make the fp32 product of x
// and the weight (summed in another order than MindSpore's MatMul, as any two fp32 GEMMs differ). parts 1: x
// rounded to bf16 (to nearest, ties to even, as GemmBf16 rounds).
// Elements of the split x for m rows and k columns (rows padded to 32, columns to 32).
int64_t amx_split_elements(int64_t m, int64_t k, int parts);
// x [m, k] -> xa: [m / 16 blocks][k / 32 steps][parts][16 rows][32 columns], zeros past m and k; rows [r0, r1) of the
// padded rows (multiples of 16), so threads can split the work.
__attribute__((target("avx512f,avx512bw"))) void amx_split(const float* x, int64_t m, int64_t k, int parts,
                                                            uint16_t* xa, int64_t r0, int64_t r1);
// the same layout (one part) of x [m, k] given in bf16: its values as they are
void amx_split_bf16(const uint16_t* x, int64_t m, int64_t k, uint16_t* xa, int64_t r0, int64_t r1);
// y [r, ldy * ..] for rows r < m of the split x (xa at its first row, a multiple of 16) and outputs [0, n) of w
// [n, k] bf16 (w at its first output row): y = sum over parts of xa_part w^T. One thread; the tiles set up
// (amx_begin); `panel` scratch of amx_panel_elements(k) elements, 64-byte aligned.
int64_t amx_panel_elements(int64_t k);
__attribute__((target("amx-tile,amx-bf16"))) void amx_product(const uint16_t* xa, int64_t m, int64_t k, int parts,
                                                               const bf16* w, int64_t n, float* y, int64_t ldy,
                                                               uint32_t* panel);

// attention_bf16.cc: VisionAttentionBf16(Rows)'s body (attention.cc)
int attention_bf16(int nparam, void** params, int* ndims, int64_t** shapes, bool rows_out);

}  // namespace ms_ocr
#endif
