// Where an attention writes its rows: what the fp32 kernels (attention.cc) and the bf16 ones
// (arch/x86/attention_bf16.cc) share.
#pragma once

#include <cstdint>

namespace ms_ocr {

// Where an attention writes head bh's query rows from r0 on, and the stride between them: out [B, H, S, D], or
// rows_out [B, S, H * D] (head h's D values of row i at i * H * D + h * D).
struct HeadRows {
  float* at;
  int64_t stride;
};
inline HeadRows head_rows(float* out, int64_t bh, int64_t r0, int64_t h, int64_t s, int64_t d, bool rows_out) {
  if (rows_out) return {out + ((bh / h * s + r0) * h + bh % h) * d, h * d};
  return {out + (bh * s + r0) * d, d};
}

}  // namespace ms_ocr
