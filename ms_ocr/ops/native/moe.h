// A DeepSeek MoE layer's routed experts for a decode step's tokens, shared by MoeExperts (moe.cc: the graph's kernel
// after its in-graph router) and the host step's MoE layers (decode_layer.cc: router, shared experts and routed
// experts in the layer's own parallel region). Both read only the selected experts' rows of the stacked weights as
// they are stored (fp32, bf16 widened in registers, or int8 with scales) and sum each token's experts in the same
// order with the same arithmetic, so both give the same bits.
#pragma once

#include <cmath>
#include <cstdint>

#include "gemv.h"
#include "team.h"

namespace ms_ocr {

// The stacks gate, up [E, I, H] and down [E, H, I] as stored, and for int8 their scales [E, N] (one per row) or
// [E, N, K / G] (one per group of G columns).
struct ExpertStacks {
  const void* w[3];
  int64_t elem[3];
  const float* scale[3] = {nullptr, nullptr, nullptr};
  int64_t group[3] = {0, 0, 0};
  int64_t count = 0, inter = 0, hidden = 0;

  // Reads the stacks from operands s .. s + 2 and, with `quant`, their scales from s + 3 .. s + 5; false when the
  // operands do not fit (shapes, dtypes).
  bool parse(void** params, const int* ndims, int64_t* const* shapes, const char* const* dtypes, int s, bool quant) {
    if (ndims[s] != 3 || ndims[s + 1] != 3 || ndims[s + 2] != 3) return false;
    count = shapes[s][0], inter = shapes[s][1], hidden = shapes[s][2];
    for (int i = 1; i <= 2; ++i)
      if (shapes[s + i][0] != count) return false;
    if (shapes[s + 1][1] != inter || shapes[s + 1][2] != hidden || shapes[s + 2][1] != hidden ||
        shapes[s + 2][2] != inter)
      return false;
    for (int i = 0; i < 3; ++i) {
      if (is_int8(dtypes[s + i]) != quant) return false;
      w[i] = params[s + i];
      elem[i] = quant ? 1 : is_bf16(dtypes[s + i]) ? 2 : 4;
      if (quant) {  // per expert as MatMulTQ8's [N] or [N, ng]
        const int sd = ndims[s + 3 + i];
        if (sd < 2 || shapes[s + 3 + i][0] != count) return false;
        group[i] = q8_group(sd - 1, shapes[s + 3 + i] + 1, shapes[s + i][1], shapes[s + i][2]);
        if (group[i] < 0) return false;
        scale[i] = static_cast<const float*>(params[s + 3 + i]);
      }
    }
    return true;
  }

  // expert e of stack i (0 gate, 1 up, 2 down) as a product's weight
  Weight expert(int i, int64_t e) const {
    const int64_t n = i == 2 ? hidden : inter, k = i == 2 ? inter : hidden;
    Weight wt{static_cast<const char*>(w[i]) + e * n * k * elem[i], elem[i] == 2};
    if (scale[i] != nullptr) {
      wt.scale = scale[i] + e * n * (group[i] ? k / group[i] : 1);
      wt.group = group[i];
    }
    return wt;
  }
};

constexpr int64_t kExpertChunk = 64;  // weight rows per chunk of an expert's product handed out on demand

// Work item c of the experts' gate and up products over `pairs` token-expert pairs (h [T, H], pair p = token p / k):
// [0, experts_gate_up_items). ids outside [0, E) add nothing.
inline int64_t experts_gate_up_items(const ExpertStacks& st, int64_t pairs) {
  return pairs * 2 * ((st.inter + kExpertChunk - 1) / kExpertChunk);
}
inline void experts_gate_up_item(const ExpertStacks& st, const float* h, const int32_t* ids, int64_t k, int64_t c,
                                 float* g, float* u) {
  const int64_t chunks = (st.inter + kExpertChunk - 1) / kExpertChunk;
  const int64_t p = c / (2 * chunks), which = c / chunks % 2, o = c % chunks * kExpertChunk;
  if (ids[p] < 0 || ids[p] >= st.count) return;
  const Product pr{h + p / k * st.hidden, st.expert(static_cast<int>(which), ids[p]), (which ? u : g) + p * st.inter,
                   st.inter, st.hidden, nullptr};
  product_rows(pr, 1, o, o + kExpertChunk < st.inter ? o + kExpertChunk : st.inter);
}

// Work item c of the experts' down products (mid = silu(gate) * up [pairs, I] -> yp [pairs, H]):
// [0, experts_down_items).
inline int64_t experts_down_items(const ExpertStacks& st, int64_t pairs) {
  return pairs * ((st.hidden + kExpertChunk - 1) / kExpertChunk);
}
inline void experts_down_item(const ExpertStacks& st, const float* mid, const int32_t* ids, int64_t c, float* yp) {
  const int64_t chunks = (st.hidden + kExpertChunk - 1) / kExpertChunk;
  const int64_t p = c / chunks, o = c % chunks * kExpertChunk;
  if (ids[p] < 0 || ids[p] >= st.count) return;
  const Product pr{mid + p * st.inter, st.expert(2, ids[p]), yp + p * st.hidden, st.hidden, st.inter, nullptr};
  product_rows(pr, 1, o, o + kExpertChunk < st.hidden ? o + kExpertChunk : st.hidden);
}

// y[r, lo:hi] = sum_j w[r, j] * yp[r * k + j, lo:hi] for the t tokens, the experts j in order (their ids in range).
inline void experts_weighted_sum(const ExpertStacks& st, const float* yp, const int32_t* ids, const float* w,
                                 int64_t t, int64_t k, int64_t lo, int64_t hi, float* y) {
  for (int64_t r = 0; r < t; ++r) {
    float* yr = y + r * st.hidden;
    for (int64_t i = lo; i < hi; ++i) yr[i] = 0.f;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t p = r * k + j;
      if (ids[p] < 0 || ids[p] >= st.count) continue;
      const float wj = w[p];
      const float* src = yp + p * st.hidden;
      for (int64_t i = lo; i < hi; ++i) yr[i] += wj * src[i];
    }
  }
}

// The router's choice for one token from its logits [E]: softmax over every expert in fp32, the k highest
// probabilities in descending order (ties: the lower index first), each times `scaling` (no renormalisation), as
// nn/moe.py route computes them.
inline void route_token(const float* logits, int64_t e_count, int64_t k, float scaling, float* probs, int32_t* ids,
                        float* w) {
  float mx = logits[0];
  for (int64_t e = 1; e < e_count; ++e) mx = logits[e] > mx ? logits[e] : mx;
  float sum = 0.f;
  for (int64_t e = 0; e < e_count; ++e) {
    probs[e] = std::exp(logits[e] - mx);
    sum += probs[e];
  }
  for (int64_t e = 0; e < e_count; ++e) probs[e] /= sum;
  for (int64_t j = 0; j < k; ++j) {
    int64_t best = -1;
    for (int64_t e = 0; e < e_count; ++e) {
      bool taken = false;
      for (int64_t i = 0; i < j; ++i) taken = taken || ids[i] == e;
      if (!taken && (best < 0 || probs[e] > probs[best])) best = e;
    }
    ids[j] = static_cast<int32_t>(best);
    w[j] = probs[best] * scaling;
  }
}

}  // namespace ms_ocr
