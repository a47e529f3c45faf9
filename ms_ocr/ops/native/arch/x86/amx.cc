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
#include <cstring>
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

bool amx_granted() {
  static const bool granted = amx_request();
  return granted;
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

namespace {

constexpr int64_t kPanel = 128;  // outputs (weight rows) packed at a time: 128 x k bf16, 0.25-1 MB, stays in L2

int64_t up32(int64_t v) { return (v + 31) / 32 * 32; }

// r[j] lane i -> r[i] lane j: a 16 x 16 transpose of 32-bit elements (pairs of bf16)
__attribute__((target("avx512f"))) inline void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 16; i += 8)
    for (int j = 0; j < 4; ++j) {
      t[i + j] = _mm512_shuffle_i32x4(r[i + j], r[i + 4 + j], 0x88);
      t[i + 4 + j] = _mm512_shuffle_i32x4(r[i + j], r[i + 4 + j], 0xdd);
    }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_i32x4(t[j], t[8 + j], 0x88);
    r[8 + j] = _mm512_shuffle_i32x4(t[j], t[8 + j], 0xdd);
  }
}

// Weight rows [n0, n0 + kPanel) of w [n, k] as the tiles' B operand: [k / 32 steps][kPanel / 16][16 column pairs]
// [16 outputs] pairs of bf16 (VNNI order), zeros past n and k. Whole groups of 16 rows (k a multiple of 32) by
// 16 x 16 transposes of pairs, the edges element by element.
__attribute__((target("avx512f"))) void pack_panel(const bf16* w, int64_t n, int64_t k, int64_t n0, uint32_t* dst) {
  const int64_t steps = up32(k) / 32;
  for (int64_t t = 0; t < kPanel / 16; ++t) {
    if (n0 + t * 16 + 16 <= n && k % 32 == 0) {
      const bf16* src = w + (n0 + t * 16) * k;
      for (int64_t q = 0; q < steps; ++q) {
        __m512i r[16];
        for (int j = 0; j < 16; ++j) r[j] = _mm512_loadu_si512(src + j * k + q * 32);
        transpose16(r);
        uint32_t* d = dst + (q * (kPanel / 16) + t) * 256;
        for (int i = 0; i < 16; ++i) _mm512_storeu_si512(d + i * 16, r[i]);
      }
      continue;
    }
    for (int64_t j = 0; j < 16; ++j) {
      const int64_t row = n0 + t * 16 + j;
      uint32_t* d = dst + t * 256 + j;
      for (int64_t q = 0; q < steps; ++q, d += kPanel * 16)
        for (int64_t i = 0; i < 16; ++i) {
          const int64_t c = q * 32 + 2 * i;
          const uint32_t lo = row < n && c < k ? w[row * k + c] : 0, hi = row < n && c + 1 < k ? w[row * k + c + 1] : 0;
          d[i * 16] = lo | hi << 16;
        }
    }
  }
}

}  // namespace

int64_t amx_split_elements(int64_t m, int64_t k, int parts) { return parts * up32(m) * up32(k); }

int64_t amx_panel_elements(int64_t k) { return up32(k) / 32 * kPanel * 16; }

__attribute__((target("avx512f,avx512bw"))) void amx_split(const float* x, int64_t m, int64_t k, int parts,
                                                            uint16_t* xa, int64_t r0, int64_t r1) {
  const int64_t steps = up32(k) / 32;
  const __m512i cut = _mm512_set1_epi32(static_cast<int>(0xffff0000u)), abs = _mm512_set1_epi32(0x7fffffff),
                inf = _mm512_set1_epi32(0x7f800000), quiet = _mm512_set1_epi32(0x00400000);
  for (int64_t r = r0; r < r1; ++r) {
    const float* row = x + r * k;
    uint16_t* dst = xa + (r / 16) * steps * parts * 512 + (r % 16) * 32;
    for (int64_t q = 0; q < steps; ++q, dst += parts * 512) {
      __m512i v[2];
      for (int h = 0; h < 2; ++h) {
        const int64_t c = q * 32 + h * 16;
        const int64_t valid = r < m ? (k - c >= 16 ? 16 : k - c > 0 ? k - c : 0) : 0;
        v[h] = _mm512_maskz_loadu_epi32(static_cast<__mmask16>((1u << valid) - 1), row + c);
      }
      for (int p = 0; p < parts; ++p) {
        __m256i half[2];
        for (int h = 0; h < 2; ++h) {
          const __m512i u = v[h];
          const __m512i magnitude = _mm512_and_si512(u, abs);
          const __mmask16 nan = _mm512_cmpgt_epu32_mask(magnitude, inf),
                          finite = _mm512_cmplt_epu32_mask(magnitude, inf);
          __m512i top;
          if (parts == 1) {  // to nearest, ties to even (round_bf16); NaN stays NaN
            const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
            top = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd));
            top = _mm512_mask_or_epi32(top, nan, u, quiet);
          } else {  // cut: the next part is the exact remainder (zero past a non-finite value)
            top = _mm512_mask_or_epi32(u, nan, u, quiet);
            const __m512 rest = _mm512_sub_ps(_mm512_castsi512_ps(u), _mm512_castsi512_ps(_mm512_and_si512(u, cut)));
            v[h] = _mm512_maskz_mov_epi32(finite, _mm512_castps_si512(rest));
          }
          half[h] = _mm512_cvtepi32_epi16(_mm512_srli_epi32(top, 16));
        }
        _mm512_storeu_si512(dst + p * 512, _mm512_inserti64x4(_mm512_castsi256_si512(half[0]), half[1], 1));
      }
    }
  }
}

void amx_split_bf16(const uint16_t* x, int64_t m, int64_t k, uint16_t* xa, int64_t r0, int64_t r1) {
  const int64_t steps = up32(k) / 32;
  for (int64_t r = r0; r < r1; ++r) {
    uint16_t* dst = xa + (r / 16) * steps * 512 + (r % 16) * 32;
    for (int64_t q = 0; q < steps; ++q, dst += 512) {
      const int64_t c = q * 32, valid = r < m ? (k - c >= 32 ? 32 : k - c) : 0;
      if (valid > 0) std::memcpy(dst, x + r * k + c, static_cast<size_t>(valid) * 2);
      std::memset(dst + (valid > 0 ? valid : 0), 0, static_cast<size_t>(32 - (valid > 0 ? valid : 0)) * 2);
    }
  }
}

__attribute__((target("amx-tile,amx-bf16"))) void amx_product(const uint16_t* xa, int64_t m, int64_t k, int parts,
                                                               const bf16* w, int64_t n, float* y, int64_t ldy,
                                                               uint32_t* panel) {
  const int64_t steps = up32(k) / 32, block = steps * parts * 512;  // one 16-row block of xa
  alignas(64) float edge[4][256];
  for (int64_t n0 = 0; n0 < n; n0 += kPanel) {
    pack_panel(w, n, k, n0, panel);
    for (int64_t m0 = 0; m0 < m; m0 += 32) {
      const uint16_t *a0 = xa + (m0 / 16) * block, *a1 = a0 + block;
      for (int64_t nb = 0; nb < kPanel && n0 + nb < n; nb += 32) {
        _tile_zero(4);
        _tile_zero(5);
        _tile_zero(6);
        _tile_zero(7);
        const uint32_t* b = panel + (nb / 16) * 256;
        for (int64_t q = 0; q < steps; ++q, b += kPanel * 16) {
          _tile_loadd(2, b, 64);
          _tile_loadd(3, b + 256, 64);
          for (int p = 0; p < parts; ++p) {
            _tile_loadd(0, a0 + (q * parts + p) * 512, 64);
            _tile_loadd(1, a1 + (q * parts + p) * 512, 64);
            _tile_dpbf16ps(4, 0, 2);
            _tile_dpbf16ps(5, 0, 3);
            _tile_dpbf16ps(6, 1, 2);
            _tile_dpbf16ps(7, 1, 3);
          }
        }
        float* c = y + m0 * ldy + n0 + nb;
        if (m0 + 32 <= m && n0 + nb + 32 <= n) {
          _tile_stored(4, c, ldy * 4);
          _tile_stored(5, c + 16, ldy * 4);
          _tile_stored(6, c + 16 * ldy, ldy * 4);
          _tile_stored(7, c + 16 * ldy + 16, ldy * 4);
          continue;
        }
        _tile_stored(4, edge[0], 64);  // a block past the last row or output: only its part inside is written
        _tile_stored(5, edge[1], 64);
        _tile_stored(6, edge[2], 64);
        _tile_stored(7, edge[3], 64);
        for (int t = 0; t < 4; ++t)
          for (int64_t i = 0; i < 16 && m0 + (t >> 1) * 16 + i < m; ++i)
            for (int64_t j = 0; j < 16 && n0 + nb + (t & 1) * 16 + j < n; ++j)
              c[((t >> 1) * 16 + i) * ldy + (t & 1) * 16 + j] = edge[t][i * 16 + j];
      }
    }
  }
}

}  // namespace ms_ocr
#endif  // MS_OCR_AMX
