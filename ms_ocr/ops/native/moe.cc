// MoeExperts: a decode step's routed experts of a DeepSeek MoE layer, on gemv.h's products and the decode team.
#include <atomic>
#include <vector>

#include "activation.h"
#include "gemv.h"
#include "team.h"

using namespace ms_ocr;

extern "C" {

// MoeExperts: the routed experts of a DeepSeek MoE layer for a decode step's tokens (ms_ocr/nn/moe.py), reading
// only the selected experts' rows of the stacked weights, as they are stored (fp32, bf16 widened in registers, or
// int8 with scales): the composed path gathers the selected experts into fp32 copies first (for DeepSeek-OCR's
// six experts of 3 x 896 x 1280, 83 MB written and read again per layer and token).
// Inputs: h [T, H] fp32; ids [T, k] int32 (an id outside [0, E) adds nothing); w [T, k] fp32, the routing
// weights; gate, up [E, I, H] and down [E, H, I] stacks; for int8 stacks their scales after down: [E, N] (one
// per row) or [E, N, K / G] (one per group of G columns). Output y [T, H] fp32:
// y[t] = sum_j w[t, j] * down[e] (silu(gate[e] h[t]) * up[e] h[t]), e = ids[t, j], the j in order.
int MoeExperts(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,
               void* extra) {
  (void)stream; (void)extra;
  if (nparam != 7 && nparam != 10) return 1;
  const bool quant = nparam == 10;
  if (ndims[0] != 2 || ndims[1] != 2 || ndims[2] != 2 || ndims[3] != 3 || ndims[4] != 3 || ndims[5] != 3) return 1;
  const int64_t t = shapes[0][0], hidden = shapes[0][1], k = shapes[1][1];
  const int64_t e_count = shapes[3][0], inter = shapes[3][1];
  if (t < 1 || shapes[1][0] != t || shapes[2][0] != t || shapes[2][1] != k || shapes[3][2] != hidden) return 1;
  for (int i = 4; i <= 5; ++i)
    if (shapes[i][0] != e_count) return 1;
  if (shapes[4][1] != inter || shapes[4][2] != hidden || shapes[5][1] != hidden || shapes[5][2] != inter) return 1;
  // each stack: its bytes per weight, and (int8) its scales' layout
  int64_t elem[3], group[3] = {0, 0, 0};
  for (int i = 0; i < 3; ++i) {
    const int s = 3 + i;
    if (is_int8(dtypes[s]) != quant) return 1;
    elem[i] = quant ? 1 : is_bf16(dtypes[s]) ? 2 : 4;
    if (quant) {  // scales [E, N] or [E, N, ng]: per expert as MatMulTQ8's [N] or [N, ng]
      const int sd = ndims[6 + i];
      if (sd < 2 || shapes[6 + i][0] != e_count) return 1;
      group[i] = q8_group(sd - 1, shapes[6 + i] + 1, shapes[s][1], shapes[s][2]);
      if (group[i] < 0) return 1;
    }
  }
  const float* h = static_cast<const float*>(params[0]);
  const int32_t* ids = static_cast<const int32_t*>(params[1]);
  const float* w = static_cast<const float*>(params[2]);
  float* y = static_cast<float*>(params[nparam - 1]);
  // expert e of stack i (0 gate, 1 up, 2 down) as a product's weight
  auto expert = [&](int i, int64_t e) {
    const int s = 3 + i;
    const int64_t n = shapes[s][1], kk = shapes[s][2];
    Weight wt{static_cast<const char*>(params[s]) + e * n * kk * elem[i], elem[i] == 2};
    if (quant) {
      wt.scale = static_cast<const float*>(params[6 + i]) + e * n * (group[i] ? kk / group[i] : 1);
      wt.group = group[i];
    }
    return wt;
  };
  g_moe_experts_calls.fetch_add(1);
  const int64_t pairs = t * k;
  std::vector<float> g(pairs * inter), u(pairs * inter), yp(pairs * hidden);
  std::vector<char> used(pairs);
  for (int64_t p = 0; p < pairs; ++p) used[p] = ids[p] >= 0 && ids[p] < e_count;
  constexpr int64_t kChunk = 64;
  const int64_t in_chunks = (inter + kChunk - 1) / kChunk, out_chunks = (hidden + kChunk - 1) / kChunk;
  std::atomic<int64_t> next[2] = {};
  team_run(g_threads, [&](const TeamCtx& team) {
    // gate and up of every pair, chunks of rows handed out on demand
    for (int64_t c = next[0].fetch_add(1); c < pairs * 2 * in_chunks; c = next[0].fetch_add(1)) {
      const int64_t p = c / (2 * in_chunks), which = c / in_chunks % 2, o = c % in_chunks * kChunk;
      if (!used[p]) continue;
      const Product pr{h + p / k * hidden, expert(static_cast<int>(which), ids[p]), (which ? u : g).data() + p * inter,
                       inter, hidden, nullptr};
      product_rows(pr, 1, o, o + kChunk < inter ? o + kChunk : inter);
    }
    team.sync();
    team_silu_mul(g.data(), u.data(), pairs * inter, team);
    for (int64_t c = next[1].fetch_add(1); c < pairs * out_chunks; c = next[1].fetch_add(1)) {
      const int64_t p = c / out_chunks, o = c % out_chunks * kChunk;
      if (!used[p]) continue;
      const Product pr{g.data() + p * inter, expert(2, ids[p]), yp.data() + p * hidden, hidden, inter, nullptr};
      product_rows(pr, 1, o, o + kChunk < hidden ? o + kChunk : hidden);
    }
    team.sync();
    // the weighted sum per token, a share of the columns per thread
    const auto [lo, hi] = team_share(hidden, 1, team);
    for (int64_t r = 0; r < t; ++r) {
      float* yr = y + r * hidden;
      for (int64_t i = lo; i < hi; ++i) yr[i] = 0.f;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t p = r * k + j;
        if (!used[p]) continue;
        const float wj = w[p];
        const float* src = yp.data() + p * hidden;
        for (int64_t i = lo; i < hi; ++i) yr[i] += wj * src[i];
      }
    }
  });
  return 0;
}

}  // extern "C"
