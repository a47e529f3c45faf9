// DecodeLayer / DecodeLayerBf16: one dense decoder layer of a decode step in one call (ops/decode_layer.py): input
// RMSNorm, q/k/v, rope (the general rotate-half form, so XD-RoPE too), optional q/k norms, GQA softmax attention over
// the read-only cache plus the token's own key, o_proj and residual, post-attention RMSNorm, gated MLP and residual,
// in one parallel region on the decode team; the products are gemv.h's (fp32, bf16 or int8 weights; bf16 on the AMX
// tiles with DecodeLayerBf16). In the host step (ms_ocr_decode_step) the same region also serves a DeepSeek MoE
// layer: router, shared experts and the selected routed experts (moe.h) in place of the gated MLP.
#include <atomic>
#include <cstring>
#include <vector>

#include "activation.h"
#include "gemv.h"
#include "kernels.h"
#include "moe.h"
#include "team.h"

namespace ms_ocr {
namespace {

// A DeepSeek MoE layer's feed-forward half in the host step (ms_ocr_decode_step): the router [E, H] (fp32 or
// bf16), the routed expert stacks (moe.h) and top_k / scaling; the layer's gate, up, down operands are then its
// shared experts'.
struct MoeLayer {
  Weight router;
  ExpertStacks stacks;
  int64_t top_k = 0;
  float scaling = 1.f;

  // operands: router, gate, up, down stacks, (int8: their three scales), cfg [2] = {top_k, scaling} (fp32)
  bool parse(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, int64_t hidden) {
    if (nparam != 5 && nparam != 8) return false;
    if (ndims[0] != 2 || is_int8(dtypes[0]) || ndims[nparam - 1] != 1 || shapes[nparam - 1][0] != 2) return false;
    if (!stacks.parse(params, ndims, shapes, dtypes, 1, nparam == 8)) return false;
    const float* cfg = static_cast<const float*>(params[nparam - 1]);
    router = Weight{params[0], is_bf16(dtypes[0])};
    top_k = static_cast<int64_t>(cfg[0]), scaling = cfg[1];
    return shapes[0][0] == stacks.count && shapes[0][1] == hidden && stacks.hidden == hidden && top_k >= 1 &&
           top_k <= stacks.count;
  }
};

// ---- attention over the cache -----------------------------------------------------------------------------------
// out[j * stride + i] = dot(q + j * d, k_i, d) + bias_i for `count` query rows against the n key rows
// k_i = keys + rows[i] * d, bias_i = mask[rows[i]]: the scores of one attention group over the slots it sees.
// Two key rows at a time, four query rows each (eight independent accumulator chains: one row's four chains of
// d / kVL dependent FMAs left the loop bound by FMA latency); each dot's products and sums are those of dot(),
// in the same order (bit-identical).
constexpr int64_t kAhead = 8;  // key/value rows prefetched ahead of the attention loops
constexpr int64_t kRowBlock = 64;  // cached rows a task's query rows pass over together (32 KB of fp32 rows at d 128)

template <int J, typename KT>
inline void dots_pair(const float* q, const KT* k0, const KT* k1, int64_t d, float* out0, float* out1,
                      int64_t stride) {
  vf a0[J] = {}, a1[J] = {};
  int64_t i = 0;
  for (; i + kVL <= d; i += kVL) {
    const vf kv0 = vload(k0 + i), kv1 = vload(k1 + i);
    for (int j = 0; j < J; ++j) {
      const vf qv = vload(q + j * d + i);
      a0[j] = vfma(qv, kv0, a0[j]);
      a1[j] = vfma(qv, kv1, a1[j]);
    }
  }
  if (i < d) {
    const vf kv0 = vload_tail(k0 + i, d - i), kv1 = vload_tail(k1 + i, d - i);
    for (int j = 0; j < J; ++j) {
      const vf qv = vload_tail(q + j * d + i, d - i);
      a0[j] = vfma(qv, kv0, a0[j]);
      a1[j] = vfma(qv, kv1, a1[j]);
    }
  }
  for (int j = 0; j < J; ++j) {
    out0[j * stride] = vsum(a0[j]);
    out1[j * stride] = vsum(a1[j]);
  }
}

template <typename KT>
inline void attention_scores(const float* q, int64_t count, const KT* keys, const float* mask,
                             const int64_t* rows, int64_t n, int64_t d, float* out, int64_t stride) {
  // blocks of kRowBlock key rows, every query row of the task over a block while it is in L1: each cached row is
  // read from memory once per task however many query heads share it (the pairs are those of one pass over all n)
  for (int64_t i0 = 0; i0 < n; i0 += kRowBlock) {
    const int64_t i1 = i0 + kRowBlock < n ? i0 + kRowBlock : n;
    for (int64_t j = 0; j < count; j += 4) {
      const int64_t jn = count - j < 4 ? count - j : 4;
      const float* qj = q + j * d;
      float* oj = out + j * stride;
      int64_t i = i0;
      for (; i + 2 <= i1; i += 2) {
        const KT *k0 = keys + rows[i] * d, *k1 = keys + rows[i + 1] * d;
        if (j == 0 && i + kAhead + 1 < n) {
          const char *f0 = reinterpret_cast<const char*>(keys + rows[i + kAhead] * d),
                     *f1 = reinterpret_cast<const char*>(keys + rows[i + kAhead + 1] * d);
          for (int64_t l = 0; l < d * static_cast<int64_t>(sizeof(KT)); l += 64) {
            __builtin_prefetch(f0 + l, 0, 3);
            __builtin_prefetch(f1 + l, 0, 3);
          }
        }
        switch (jn) {
          case 4: dots_pair<4>(qj, k0, k1, d, oj + i, oj + i + 1, stride); break;
          case 3: dots_pair<3>(qj, k0, k1, d, oj + i, oj + i + 1, stride); break;
          case 2: dots_pair<2>(qj, k0, k1, d, oj + i, oj + i + 1, stride); break;
          default: dots_pair<1>(qj, k0, k1, d, oj + i, oj + i + 1, stride); break;
        }
        for (int64_t u = 0; u < jn; ++u) {
          oj[u * stride + i] += mask[rows[i]];
          oj[u * stride + i + 1] += mask[rows[i + 1]];
        }
      }
      for (; i < i1; ++i)
        for (int64_t u = 0; u < jn; ++u) oj[u * stride + i] = dot(qj + u * d, keys + rows[i] * d, d) + mask[rows[i]];
    }
  }
}

// out[j] = sum_i p[j * stride + i] * inv[j] * values_i + p[j * stride + n] * inv[j] * v_new (i < n in order,
// values_i = values + rows[i] * d) for `count` query rows: the attention-weighted sum of one group's value rows.
// The value rows go in blocks of kRowBlock: over a block, J rows x C vectors of columns at a time with the sums in
// registers (taken from out after the first block, put back after each), every query row and column block of the
// task while the block is in L1, so each value row is read from memory once per task; the same FMAs in the same
// order as accumulating each row's sum one value row at a time over all n (bit-identical).
template <int J, int C, typename KT>
inline void weighted_block(const float* p, int64_t stride, const float* inv, const KT* values, const int64_t* rows,
                           int64_t i0, int64_t i1, int64_t n, const float* v_new, int64_t d, int64_t e, float* out,
                           bool prefetch) {
  vf acc[J][C];
  for (int j = 0; j < J; ++j)
    for (int c = 0; c < C; ++c) acc[j][c] = i0 == 0 ? vf{} : vload(out + j * d + e + c * kVL);
  auto add = [&](const auto* row, int64_t i) {
    vf v[C];
    for (int c = 0; c < C; ++c) v[c] = vload(row + c * kVL);
    for (int j = 0; j < J; ++j) {
      const vf a = vset(p[j * stride + i] * inv[j]);
      for (int c = 0; c < C; ++c) acc[j][c] = vfma(a, v[c], acc[j][c]);
    }
  };
  for (int64_t i = i0; i < i1; ++i) {
    if (prefetch && i + kAhead < n)  // the whole row ahead: the block's other column blocks find it in L1
      for (int64_t l = 0; l < d * static_cast<int64_t>(sizeof(KT)); l += 64)
        __builtin_prefetch(reinterpret_cast<const char*>(values + rows[i + kAhead] * d) + l, 0, 3);
    add(values + rows[i] * d + e, i);
  }
  if (i1 == n) add(v_new + e, n);  // the token's own value row, last
  for (int j = 0; j < J; ++j)
    for (int c = 0; c < C; ++c) vstore(out + j * d + e + c * kVL, acc[j][c]);
}

template <int J, typename KT>
inline void weighted_rows(const float* p, int64_t stride, const float* inv, const KT* values, const int64_t* rows,
                          int64_t i0, int64_t i1, int64_t n, const float* v_new, int64_t d, float* out,
                          bool prefetch) {
  constexpr int C = kVRegs >= 32 ? 4 : 2;
  int64_t e = 0;
  for (; e + C * kVL <= d; e += C * kVL, prefetch = false)
    weighted_block<J, C>(p, stride, inv, values, rows, i0, i1, n, v_new, d, e, out, prefetch);
  for (; e + kVL <= d; e += kVL, prefetch = false)
    weighted_block<J, 1>(p, stride, inv, values, rows, i0, i1, n, v_new, d, e, out, prefetch);
  for (; e < d; ++e)  // columns past the last full vector (head dims that are no multiple of kVL)
    for (int j = 0; j < J; ++j) {
      float acc = i0 == 0 ? 0.f : out[j * d + e];
      const int64_t end = i1 == n ? n + 1 : i1;  // the last block adds the token's own value row (i = n)
      for (int64_t i = i0; i < end; ++i)
        acc = std::fma(p[j * stride + i] * inv[j], i < n ? to_float(values[rows[i] * d + e]) : v_new[e], acc);
      out[j * d + e] = acc;
    }
}

template <typename KT>
inline void attention_values(const float* p, int64_t count, int64_t stride, const float* inv, const KT* values,
                             const int64_t* rows, int64_t n, const float* v_new, int64_t d, float* out) {
  int64_t i0 = 0;
  do {  // at least once: the token's own value row when nothing is cached
    const int64_t i1 = i0 + kRowBlock < n ? i0 + kRowBlock : n;
    for (int64_t j = 0; j < count; j += 4) {
      const float *pj = p + j * stride, *ij = inv + j;
      float* oj = out + j * d;
      const bool prefetch = j == 0;
      switch (count - j < 4 ? count - j : 4) {
        case 4: weighted_rows<4>(pj, stride, ij, values, rows, i0, i1, n, v_new, d, oj, prefetch); break;
        case 3: weighted_rows<3>(pj, stride, ij, values, rows, i0, i1, n, v_new, d, oj, prefetch); break;
        case 2: weighted_rows<2>(pj, stride, ij, values, rows, i0, i1, n, v_new, d, oj, prefetch); break;
        default: weighted_rows<1>(pj, stride, ij, values, rows, i0, i1, n, v_new, d, oj, prefetch); break;
      }
    }
    i0 = i1;
  } while (i0 < n);
}

// ---- the layer's steps ------------------------------------------------------------------------------------------

// out = w * x / sqrt(mean(x^2) + eps)
void rms_norm(const float* x, const float* w, float* out, int64_t n, float eps) {
  const float inv = 1.f / std::sqrt(dot(x, x, n) / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = w[i] * (x[i] * inv);
}

// x <- x * cos + rotate_half(x) * sin, rotate_half(x) = concat(-x[D/2:], x[:D/2]) (the general form: XD-RoPE's
// halves differ too)
void rope(float* x, const float* cos, const float* sin, int64_t d) {
  const int64_t half = d / 2;
  float rot[512];
  for (int64_t i = 0; i < half; ++i) {
    rot[i] = -x[half + i];
    rot[half + i] = x[i];
  }
  for (int64_t i = 0; i < d; ++i) x[i] = x[i] * cos[i] + rot[i] * sin[i];
}

// max(start, s[0], ..., s[n - 1]) as a scalar pass m = s[i] > m ? s[i] : m gives it (a NaN score is passed over, a
// NaN start kept), in kVL lanes: the scalar pass's one dependent chain took ~4 cycles a score
float max_of(const float* s, int64_t n, float start) {
  vf m = vset(start);
  int64_t i = 0;
  for (; i + kVL <= n; i += kVL) m = vmax(vload(s + i), m);
  float lanes[kVL];
  vstore(lanes, m);
  float mx = start;
  for (int64_t l = 0; l < kVL; ++l) mx = lanes[l] > mx ? lanes[l] : mx;
  for (; i < n; ++i) mx = s[i] > mx ? s[i] : mx;
  return mx;
}

// e[i] = exp(s[i] - mx) for i < n; returns the sum
float exp_sum(float* s, int64_t n, float mx) {
  vf acc = {};
  const vf m = vset(mx);
  int64_t i = 0;
  for (; i + kVL <= n; i += kVL) {
    const vf e = vexp(vload(s + i) - m);
    vstore(s + i, e);
    acc += e;
  }
  float sum = vsum(acc);
  for (; i < n; ++i) {
    s[i] = std::exp(s[i] - mx);
    sum += s[i];
  }
  return sum;
}

// The products of a group with the same input (q, k, v; gate, up), over the team, in chunks of rows handed out on
// demand through `next` (the niced launcher thread takes fewer); ends with the team's barrier.
void parallel_products(int m, const Product* ps, int n, const TeamCtx& team, std::atomic<int64_t>& next) {
  // rows per chunk: 64, 128 on the tiles (their blocks of 32 rows prefetch the next block within a chunk)
  auto chunk = [&](int j) -> int64_t { return ps[j].px != nullptr ? 128 : 64; };
  int64_t first[4] = {0, 0, 0, 0};
  for (int j = 0; j < n; ++j) first[j + 1] = first[j] + (ps[j].out + chunk(j) - 1) / chunk(j);
  for (int64_t c = next.fetch_add(1); c < first[n]; c = next.fetch_add(1)) {
    int j = 0;
    while (c >= first[j + 1]) ++j;
    const Product& p = ps[j];
    const int64_t o = (c - first[j]) * chunk(j);
    product_rows(p, m, o, o + chunk(j) < p.out ? o + chunk(j) : p.out);
  }
  team.sync();
}

// DecodeLayer's body; tiles: the bf16 weights' products on AMX (DecodeLayerBf16, when ms_ocr_amx_init turned it
// on), activations rounded to bf16.
// moe: an MoE layer's routed half (its gate, up, down operands the shared experts'), or nullptr.
int decode_layer_entry(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, bool tiles,
                       const MoeLayer* moe = nullptr) {
  if (nparam < 19 || nparam > 22) return 1;
  // 20 / 22: int8 matrices, their scales packed in one input before eps
  const bool quant = nparam == 20 || nparam == 22, qk_norm = nparam >= 21;
  const int n_in = nparam - 3;
  auto in = [&](int i) { return static_cast<const float*>(params[i]); };
  // weights: fp32 or bfloat16 each (or int8 with scales: one per row, or with eps [2] = {eps, G} one per group of
  // G columns of a row); the norms' (small) vectors are widened once here, the products' matrices as they are read
  const float* scales = quant ? in(n_in - 2) : nullptr;
  const int64_t group = quant && shapes[n_in - 1][0] == 2 ? static_cast<int64_t>(in(n_in - 1)[1]) : 0;
  bool groups_fit = group % 16 == 0;
  auto wt = [&](int i) {
    if (!is_int8(dtypes[i])) return Weight{params[i], is_bf16(dtypes[i])};
    const float* s = scales;
    groups_fit = groups_fit && (group == 0 || shapes[i][1] % group == 0);
    scales += shapes[i][0] * (group ? shapes[i][1] / group : 1);
    return Weight{params[i], false, s, group};
  };
  if (quant ? (!is_int8(dtypes[7]) || ndims[n_in - 2] != 1) : is_int8(dtypes[7])) return 1;  // int8 needs scales
  std::vector<float> norm_bufs[4];
  auto vec = [&](int i, std::vector<float>& buf) {
    if (!is_bf16(dtypes[i])) return in(i);
    buf.resize(shapes[i][0]);
    for (int64_t j = 0; j < shapes[i][0]; ++j) buf[j] = to_float(static_cast<const bf16*>(params[i])[j]);
    return static_cast<const float*>(buf.data());
  };
  const float *x = in(0), *cos = in(1), *sin = in(2), *mask = in(3);
  // the caches: fp32, or bf16 (--kv-cache-dtype bf16: read widened, exact; this token's k and v are rounded to
  // bf16 before they are used, as the cache will hold them)
  const bool kv16 = is_bf16(dtypes[4]);
  if (kv16 != is_bf16(dtypes[5])) return 1;
  const void *kc = params[4], *vc = params[5];
  const Weight qw = wt(7), kw = wt(8), vw = wt(9);
  const int w = qk_norm ? 12 : 10;
  const Weight ow = wt(w), gw = wt(w + 2), uw = wt(w + 3), dw = wt(w + 4);
  tiles = tiles && moe == nullptr && shapes[0][0] >= kTileMinRows && qw.bf16 && ow.bf16 && gw.bf16 && uw.bf16 &&
          dw.bf16;
  // every scale of the 7 matrices, and whole groups
  if (quant && (!groups_fit || scales != in(n_in - 2) + shapes[n_in - 2][0])) return 1;
  const float *inw = vec(6, norm_bufs[0]), *postw = vec(w + 1, norm_bufs[1]);
  const float *qnw = qk_norm ? vec(10, norm_bufs[2]) : nullptr, *knw = qk_norm ? vec(11, norm_bufs[3]) : nullptr;
  const float eps = in(n_in - 1)[0];
  float* x_out = static_cast<float*>(params[n_in]);
  float* k_out = static_cast<float*>(params[n_in + 1]);
  float* v_out = static_cast<float*>(params[n_in + 2]);
  if (ndims[0] != 3 || ndims[4] != 4 || shapes[0][1] != 1) return 1;
  const int64_t b = shapes[0][0], hidden = shapes[0][2], hkv = shapes[4][1], t = shapes[4][2], d = shapes[4][3];
  const int64_t hq = shapes[7][0] / d, inter = shapes[w + 2][0];
  if (b < 1 || b > 8 || d > 512 || hq % hkv != 0 || shapes[4][0] != b) return 1;
  if (moe != nullptr && moe->stacks.hidden != hidden) return 1;
  const int64_t rep = hq / hkv;
  const int64_t rope_stride = shapes[1][0] == 1 ? 0 : d, mask_stride = shapes[3][0] == 1 ? 0 : t;
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  g_decode_layer_calls.fetch_add(1);

  // this token's k and v ([B, Hkv, 1, D] = [B, Hkv * D]) are computed in the output buffers themselves
  float *k = k_out, *v = v_out;
  std::vector<float> q(b * hq * d), attn(b * hq * d), x1(b * hidden), g(b * inter), u(b * inter);
  const int m = static_cast<int>(b);
  // the attention's tasks: a kv group's query heads split only until there is a task per thread. Each task reads
  // its group's cached rows, so a split group is read once per task, by two cores at once each at its own core's
  // rate: PaddleOCR-VL's two groups as four tasks took ~1.4x as long over a cache past L3 (2,950 slots, 2 threads)
  int64_t splits = 1;
  while (b * hkv * splits < g_threads && rep % (splits * 2) == 0) splits *= 2;
  // an MoE layer's: router logits, the pairs' gate / up products and down products, the routed sum
  const int64_t e_count = moe ? moe->stacks.count : 0, top_k = moe ? moe->top_k : 0, pairs = b * top_k;
  const int64_t e_inter = moe ? moe->stacks.inter : 0;
  std::vector<float> logits(b * e_count), eg(pairs * e_inter), eu(pairs * e_inter), yp(pairs * hidden),
      routed(moe ? b * hidden : 0), shared(moe ? b * hidden : 0);
  std::atomic<int64_t> next[6] = {};  // the work-sharing phases' next chunk / task
  team_run(g_threads, [&](const TeamCtx& team) {
    // each thread normalises the rows for itself (no barrier): h_own feeds its share of the products
    std::vector<float> h_own(b * hidden);
    for (int64_t r = 0; r < b; ++r) rms_norm(x + r * hidden, inw, h_own.data() + r * hidden, hidden, eps);
    // --dtype bf16 on the tiles: the rows a product group reads rounded to bf16 and packed, by each thread for
    // itself (x as it is when the tiles are off)
#if defined(MS_OCR_AMX)
    if (tiles) amx_begin();
#endif
    TileRows tr;
    auto rounded = [&](const float* rows, int64_t width) -> std::pair<const float*, const uint16_t*> {
      if (!tiles) return {rows, nullptr};
      tr.set(rows, m, width);
      return {tr.rows.data(), tr.tiles()};
    };
    {
      const auto [xh, ph] = rounded(h_own.data(), hidden);
      const Product ps[] = {{xh, qw, q.data(), hq * d, hidden, nullptr, ph},
                            {xh, kw, k, hkv * d, hidden, nullptr, ph},
                            {xh, vw, v, hkv * d, hidden, nullptr, ph}};
      parallel_products(m, ps, 3, team, next[0]);
    }
    if (team.tid == team.n - 1) {  // a worker, not the (possibly niced) launcher
      for (int64_t r = 0; r < b; ++r) {
        const float *c = cos + r * rope_stride, *s = sin + r * rope_stride;
        for (int64_t i = 0; i < hq; ++i) {
          float* qi = q.data() + (r * hq + i) * d;
          rope(qi, c, s, d);
          if (qk_norm) rms_norm(qi, qnw, qi, d, eps);
          for (int64_t j = 0; j < d; ++j) qi[j] *= scale;
        }
        for (int64_t i = 0; i < hkv; ++i) {
          float* ki = k + (r * hkv + i) * d;
          rope(ki, c, s, d);
          if (qk_norm) rms_norm(ki, knw, ki, d, eps);
          if (kv16) {
            float* vi = v + (r * hkv + i) * d;
            for (int64_t j = 0; j < d; ++j) {
              ki[j] = to_float(round_bf16(ki[j]));
              vi[j] = to_float(round_bf16(vi[j]));
            }
          }
        }
      }
    }
    team.sync();
    {
      // softmax over [q k_cache^T + mask, q k_new] and the matching sum of [v_cache, v_new]; slots the mask hides
      // (NEG_BIAS) would weigh exactly 0 and are skipped. One task = `per` query heads of one kv group of one
      // sequence (GQA): each cached key and value row is read once for all of them, while it is in L1, instead of
      // once per head; per head the dot products, softmax and sums are the same, in the same order, as one head
      // alone.
      const int64_t per = rep / splits, stride = t + 1, tasks = b * hkv * splits;
      std::vector<float> scores(stride * per), inv(per);
      std::vector<int64_t> seen(t);
      for (int64_t task = next[1].fetch_add(1); task < tasks; task = next[1].fetch_add(1)) {
        const int64_t r = task / (hkv * splits), gi = task / splits % hkv, h0 = gi * rep + task % splits * per;
        const int64_t g_kv = r * hkv + gi;
        const float* qs = q.data() + (r * hq + h0) * d;
        const int64_t at = g_kv * t * d;  // the group's first cache row
        const float* mrow = mask + r * mask_stride;
        int64_t n = 0;
        for (int64_t s = 0; s < t; ++s)
          if (mrow[s] > -1e38f) seen[n++] = s;
        // the group's scores, softmax and weighted values over its cache rows (fp32 or bf16: one instance each)
        auto attend = [&](const auto* keys, const auto* values) {
          attention_scores(qs, per, keys + at, mrow, seen.data(), n, d, scores.data(), stride);
          for (int64_t j = 0; j < per; ++j) {
            float* sj = scores.data() + j * stride;
            sj[n] = dot(qs + j * d, k + g_kv * d, d);
            inv[j] = 1.f / exp_sum(sj, n + 1, max_of(sj, n, sj[n]));
          }
          attention_values(scores.data(), per, stride, inv.data(), values + at, seen.data(), n, v + g_kv * d, d,
                           attn.data() + (r * hq + h0) * d);
        };
        if (kv16)
          attend(static_cast<const bf16*>(kc), static_cast<const bf16*>(vc));
        else
          attend(static_cast<const float*>(kc), static_cast<const float*>(vc));
      }
      team.sync();
    }
    {
      const auto [xa, pa] = rounded(attn.data(), hq * d);
      const Product ps[] = {{xa, ow, x1.data(), hidden, hq * d, x, pa}};
      parallel_products(m, ps, 1, team, next[2]);
    }
    for (int64_t r = 0; r < b; ++r) rms_norm(x1.data() + r * hidden, postw, h_own.data() + r * hidden, hidden, eps);
    if (moe != nullptr) {  // routed experts + shared experts, then the residual: x1 + (routed + shared)
      const ExpertStacks& st = moe->stacks;
      {
        const Product ps[] = {{h_own.data(), moe->router, logits.data(), e_count, hidden, nullptr},
                              {h_own.data(), gw, g.data(), inter, hidden, nullptr},
                              {h_own.data(), uw, u.data(), inter, hidden, nullptr}};
        parallel_products(m, ps, 3, team, next[3]);
      }
      // every thread routes every row for itself (the same result: no barrier)
      std::vector<int32_t> ids(pairs);
      std::vector<float> wts(pairs), probs(e_count);
      for (int64_t r = 0; r < b; ++r)
        route_token(logits.data() + r * e_count, e_count, top_k, moe->scaling, probs.data(), ids.data() + r * top_k,
                    wts.data() + r * top_k);
      {  // the shared experts' gating, this thread's share (read after the next barrier)
        const auto [lo, hi] = team_share(b * inter, kVL, team);
        silu_mul(g.data() + lo, u.data() + lo, g.data() + lo, hi - lo);
      }
      const int64_t gate_up = experts_gate_up_items(st, pairs);
      for (int64_t c = next[4].fetch_add(1); c < gate_up; c = next[4].fetch_add(1))
        experts_gate_up_item(st, h_own.data(), ids.data(), top_k, c, eg.data(), eu.data());
      team.sync();
      team_silu_mul(eg.data(), eu.data(), pairs * e_inter, team);
      // the experts' down products, then the shared experts' in chunks of 64 rows
      const int64_t down = experts_down_items(st, pairs), shared_chunks = (hidden + 63) / 64;
      for (int64_t c = next[5].fetch_add(1); c < down + shared_chunks; c = next[5].fetch_add(1)) {
        if (c < down) {
          experts_down_item(st, eg.data(), ids.data(), c, yp.data());
        } else {
          const int64_t o = (c - down) * 64;
          product_rows(Product{g.data(), dw, shared.data(), hidden, inter, nullptr}, m, o,
                       o + 64 < hidden ? o + 64 : hidden);
        }
      }
      team.sync();
      const auto [lo, hi] = team_share(hidden, 1, team);
      experts_weighted_sum(st, yp.data(), ids.data(), wts.data(), b, top_k, lo, hi, routed.data());
      for (int64_t r = 0; r < b; ++r)
        for (int64_t i = lo; i < hi; ++i) {
          const int64_t at = r * hidden + i;
          x_out[at] = x1[at] + (routed[at] + shared[at]);
        }
    } else {
      {
        const auto [xh, ph] = rounded(h_own.data(), hidden);
        const Product ps[] = {{xh, gw, g.data(), inter, hidden, nullptr, ph},
                              {xh, uw, u.data(), inter, hidden, nullptr, ph}};
        parallel_products(m, ps, 2, team, next[3]);
      }
      team_silu_mul(g.data(), u.data(), b * inter, team);
      const auto [xg, pg] = rounded(g.data(), inter);
      const Product ps[] = {{xg, dw, x_out, hidden, inter, x1.data(), pg}};
      parallel_products(m, ps, 1, team, next[4]);
    }
#if defined(MS_OCR_AMX)
    if (tiles) amx_end();
#endif
  });
  return 0;
}

}  // namespace
}  // namespace ms_ocr

using namespace ms_ocr;

extern "C" {

// DecodeLayer: one dense pre-norm decoder layer (RMSNorm -> GQA attention with rope -> residual -> RMSNorm ->
// SiLU-gated MLP -> residual) for one new token per sequence over KV caches it only reads, as
// F.decoder_attention_decode + F.gated_mlp compose it (ms_ocr/ops/decode_layer.py describes the operands).
// Inputs: x [B, 1, H]; cos, sin [B|1, 1, 1, D]; mask [B|1, 1, 1, T] (additive); k_cache, v_cache [B, Hkv, T, D];
// input_layernorm [H]; q_proj [Hq*D, H]; k_proj, v_proj [Hkv*D, H]; (query/key norms [D] when qk-normed);
// o_proj [H, Hq*D]; post_attention_layernorm [H]; gate_proj, up_proj [I, H]; down_proj [H, I]; eps [1] (int8
// matrices with group scales: [2], eps and the group size).
// Outputs: x [B, 1, H] and this token's k, v [B, Hkv, 1, D].
int DecodeLayer(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,
                void* extra) {
  (void)stream; (void)extra;
  return decode_layer_entry(nparam, params, ndims, shapes, dtypes, false);
}
// A whole decode step in one call (runtime/host_step.py, which builds every argument once per cache size): layer
// l's DecodeLayer operands (nparam[l], params[l], ndims[l], shapes[l], dtypes[l]; layer l's x output is layer l + 1's
// x input; an MoE layer's gate, up and down operands are its shared experts', and moe_nparam[l] > 0 operands in
// moe_params[l] ... give its router, routed expert stacks and {top_k, scaling}: MoeLayer; 0 for a dense layer),
// each layer's k, v outputs [B, Hkv, 1, D] stored as it returns into its caches
// [B, Hkv, T, D] (inputs 4 and 5: fp32, or bf16, which the kernel's k, v already are exactly) at slot write[r] of
// row r, then the final RMSNorm (norm_w [H], eps) of the last x into the head's input (head_params[0] [B, H]) and
// the head (head_kind 0: MatMulT, 1: MatMulTBf16, 2: MatMulTQ8, with its operands). tiles: DecodeLayerBf16's products
// (on the AMX tiles where they are on). 0, or the first refusing kernel's code.
int ms_ocr_decode_step(int layers, const int* nparam, void*** params, int** ndims, int64_t*** shapes,
                       const char*** dtypes, const int* moe_nparam, void*** moe_params, int** moe_ndims,
                       int64_t*** moe_shapes, const char*** moe_dtypes, int tiles, const int64_t* write,
                       const float* norm_w, float norm_eps, int head_kind, int head_nparam, void** head_params,
                       int* head_ndims, int64_t** head_shapes, const char** head_dtypes) {
  for (int l = 0; l < layers; ++l) {
    MoeLayer moe;
    if (moe_nparam[l] != 0) {
      if (ndims[l][0] != 3) return 1;
      g_moe_experts_calls.fetch_add(1);
      if (!moe.parse(moe_nparam[l], moe_params[l], moe_ndims[l], moe_shapes[l], moe_dtypes[l], shapes[l][0][2]))
        return 1;
    }
    const int rc = decode_layer_entry(nparam[l], params[l], ndims[l], shapes[l], dtypes[l], tiles && g_amx,
                                      moe_nparam[l] != 0 ? &moe : nullptr);
    if (rc != 0) return rc;
    const int n_in = nparam[l] - 3;
    const int64_t* cs = shapes[l][4];  // [B, Hkv, T, D]
    const int64_t b = cs[0], hkv = cs[1], t = cs[2], d = cs[3];
    const bool kv16 = is_bf16(dtypes[l][4]);
    for (int c = 0; c < 2; ++c) {
      const float* src = static_cast<const float*>(params[l][n_in + 1 + c]);
      for (int64_t r = 0; r < b; ++r)
        for (int64_t h = 0; h < hkv; ++h) {
          const float* row = src + (r * hkv + h) * d;
          const int64_t at = ((r * hkv + h) * t + write[r]) * d;
          if (kv16) {
            uint16_t* dst = static_cast<uint16_t*>(params[l][4 + c]) + at;
            for (int64_t i = 0; i < d; ++i) dst[i] = round_bf16(row[i]);
          } else {
            std::memcpy(static_cast<float*>(params[l][4 + c]) + at, row, d * sizeof(float));
          }
        }
    }
  }
  const int last = layers - 1, n_in = nparam[last] - 3;
  const float* x = static_cast<const float*>(params[last][n_in]);
  float* h = static_cast<float*>(head_params[0]);
  const int64_t b = shapes[last][0][0], hidden = shapes[last][0][2];
  for (int64_t r = 0; r < b; ++r) rms_norm(x + r * hidden, norm_w, h + r * hidden, hidden, norm_eps);
  switch (head_kind) {
    case 0: return MatMulT(head_nparam, head_params, head_ndims, head_shapes, head_dtypes, nullptr, nullptr);
    case 1: return MatMulTBf16(head_nparam, head_params, head_ndims, head_shapes, head_dtypes, nullptr, nullptr);
    case 2: return MatMulTQ8(head_nparam, head_params, head_ndims, head_shapes, head_dtypes, nullptr, nullptr);
    default: return 1;
  }
}

// DecodeLayer with --dtype bf16's products: on the tiles where AMX is on (else DecodeLayer's)
int DecodeLayerBf16(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,
                    void* extra) {
  (void)stream; (void)extra;
  return decode_layer_entry(nparam, params, ndims, shapes, dtypes, g_amx);
}

}  // extern "C"
