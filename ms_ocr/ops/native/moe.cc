// MoeExperts: a decode step's routed experts of a DeepSeek MoE layer, on moe.h's work items and the decode team.
#include <atomic>
#include <vector>

#include "activation.h"
#include "moe.h"

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
  if (ndims[0] != 2 || ndims[1] != 2 || ndims[2] != 2) return 1;
  ExpertStacks st;
  if (!st.parse(params, ndims, shapes, dtypes, 3, nparam == 10)) return 1;
  const int64_t t = shapes[0][0], k = shapes[1][1];
  if (t < 1 || shapes[0][1] != st.hidden || shapes[1][0] != t || shapes[2][0] != t || shapes[2][1] != k) return 1;
  const float* h = static_cast<const float*>(params[0]);
  const int32_t* ids = static_cast<const int32_t*>(params[1]);
  const float* w = static_cast<const float*>(params[2]);
  float* y = static_cast<float*>(params[nparam - 1]);
  g_moe_experts_calls.fetch_add(1);
  const int64_t pairs = t * k;
  std::vector<float> g(pairs * st.inter), u(pairs * st.inter), yp(pairs * st.hidden);
  std::atomic<int64_t> next[2] = {};
  team_run(g_threads, [&](const TeamCtx& team) {
    // gate and up of every pair, chunks of rows handed out on demand
    const int64_t gate_up = experts_gate_up_items(st, pairs), down = experts_down_items(st, pairs);
    for (int64_t c = next[0].fetch_add(1); c < gate_up; c = next[0].fetch_add(1))
      experts_gate_up_item(st, h, ids, k, c, g.data(), u.data());
    team.sync();
    team_silu_mul(g.data(), u.data(), pairs * st.inter, team);
    for (int64_t c = next[1].fetch_add(1); c < down; c = next[1].fetch_add(1))
      experts_down_item(st, g.data(), ids, c, yp.data());
    team.sync();
    // the weighted sum per token, a share of the columns per thread
    const auto [lo, hi] = team_share(st.hidden, 1, team);
    experts_weighted_sum(st, yp.data(), ids, w, t, k, lo, hi, y);
  });
  return 0;
}

}  // extern "C"
