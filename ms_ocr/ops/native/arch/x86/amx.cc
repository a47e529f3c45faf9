// AMX: a decode step's products in bf16 on Intel's tile unit (DecodeLayerBf16, MatMulTBf16).
// With --dtype bf16 on a CPU with AMX-BF16 (Sapphire Rapids and later Xeons), a decode step's products against
// bf16 weights round the step's activation rows to bf16 and multiply them on the tiles with fp32 accumulation
// (TDPBF16PS): weight rows are the A tiles, loaded straight from the weight as it is stored (16 rows x 32
// columns a tile, no packing), the activation rows the B tile (packed once per product: pairs of columns
// interleaved, up to 16 rows, zeros past M), C = 16 outputs x 16 rows. One product costs what reading its
// weight costs whatever M is (measured, 2 threads, 8 rows: 16-18 GB/s against 20 for a bare read of the same
// weights, where the fp32 matrix-vector kernel's 8 rows are bound by FMAs), so a batched step of 8 sequences
// costs about what one sequence's step does. A single row stays on the fp32 kernel (no measurement showed the tiles
// faster for it; docs/journal/native-kernels.md), so a sequence decoded alone gets the exact products and one
// decoded in a batch the rounded ones. Linux hands out the tile state only on request (arch_prctl), done once in
// ms_ocr_amx_init.
#include "amx.h"

#if defined(MS_OCR_AMX)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace ms_ocr {

bool amx_request() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1) && (d >> 24 & 1)) {
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;  // ARCH_REQ_XCOMP_PERM, XTILEDATA
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  }
  return false;
}

bool dpbf16_supported() { return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw"); }

namespace {

struct alignas(64) TileConfig {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

// The tiles as amx_rows uses them (eight of 16 rows x 64 bytes): per 64-row chunk of a product, setting them up
// and giving them back cost ~15 % of its speed, so that is done once per thread per kernel call. A constant in
// memory, not a local: GCC treats the configuration a local would hold as unread but for the fields it sets
// (ldtilecfg reads all 64 bytes), and left its other bytes as they were on the stack (#GP, seen at -O1).
constexpr TileConfig kTileConfig = {1, 0, {}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};

}  // namespace

__attribute__((target("amx-tile"))) void amx_begin() { _tile_loadconfig(&kTileConfig); }
__attribute__((target("amx-tile"))) void amx_end() { _tile_release(); }

__attribute__((target("amx-tile,amx-bf16"))) void amx_rows(const uint16_t* px, int m, const bf16* w, float* y,
                                                            int64_t out, int64_t k, int64_t o, int64_t o1) {
  alignas(64) float c[2][256];
  const int64_t steps = k / 32, stride = k * 2;
  for (; o + 32 <= o1; o += 32) {
    const bf16 *w0 = w + o * k, *w1 = w0 + 16 * k;
    // the next block's 32 rows, a cache line of each per step (32 streams are more than the hardware prefetcher
    // follows: measured 15-26 GB/s without, 21-25 with, against 22-28 for a bare read of the same weights)
    const bool ahead = o + 64 <= o1;
    const bf16* next = w0 + 32 * k;
    _tile_zero(4);
    _tile_zero(5);
    for (int64_t q = 0; q < steps; ++q) {
      if (ahead)
        for (int64_t r = 0; r < 32; ++r) __builtin_prefetch(next + r * k + q * 32, 0, 1);
      _tile_loadd(2, px + q * 512, 64);
      _tile_loadd(0, w0 + q * 32, stride);
      _tile_loadd(1, w1 + q * 32, stride);
      _tile_dpbf16ps(4, 0, 2);
      _tile_dpbf16ps(5, 1, 2);
    }
    _tile_stored(4, c[0], 64);
    _tile_stored(5, c[1], 64);
    for (int h = 0; h < 2; ++h)
      for (int r = 0; r < m; ++r)
        for (int i = 0; i < 16; ++i) y[r * out + o + h * 16 + i] = c[h][i * 16 + r];
  }
}

}  // namespace ms_ocr
#endif  // MS_OCR_AMX
