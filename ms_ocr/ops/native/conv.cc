// The layout models' kernels (ops/conv.py, layout/deformable.py): Conv2dAffine, a convolution with its batch norm,
// activation and residual, and DeformableSample, multi-scale deformable attention's sampling.
#include <omp.h>

#include <algorithm>

#include <vector>

#include "common.h"
#include "dnnl.h"

namespace ms_ocr {
namespace {

struct ConvGeom {
  int64_t b, c, h, w, o, kh, kw, oh, ow, stride, pad, dil, groups;
  int act, res_mode;
};

// The output columns [lo, hi] whose input column ow * stride + dx lies inside a row of `width` (hi < lo: none).
inline void conv_valid_columns(int64_t dx, int64_t stride, int64_t width, int64_t out_width, int64_t& lo,
                               int64_t& hi) {
  lo = dx >= 0 ? 0 : (-dx + stride - 1) / stride;
  const int64_t last = width - 1 - dx < 0 ? -1 : (width - 1 - dx) / stride;
  hi = last < out_width - 1 ? last : out_width - 1;
}

inline vf conv_act(vf v, int act) {
  if (act == 1) return vmax(v, vf{});
  if (act == 2) return v / (vset(1.f) + vexp(-v));
  return v;
}

// y[o, p0:p1] (rows of length ld) = act(y * scale + shift (+ res)) (+ res)
void conv_epilogue(const ConvGeom& g, float* y, const float* res, int64_t ld, int64_t o0, int64_t o1, int64_t p0,
                   int64_t p1, const float* scale, const float* shift) {
  for (int64_t o = o0; o < o1; ++o) {
    float* yr = y + o * ld;
    const float* rr = res != nullptr ? res + o * ld : nullptr;
    const vf s = vset(scale[o]), t = vset(shift[o]);
    int64_t p = p0;
    for (; p + kVL <= p1; p += kVL) {
      vf v = vload(yr + p) * s + t;
      if (g.res_mode == 2) v = v + vload(rr + p);
      v = conv_act(v, g.act);
      if (g.res_mode == 1) v = v + vload(rr + p);
      vstore(yr + p, v);
    }
    for (; p < p1; ++p) {
      vf v = vset(yr[p] * scale[o] + shift[o]);
      if (g.res_mode == 2) v = v + vset(rr[p]);
      v = conv_act(v, g.act);
      if (g.res_mode == 1) v = v + vset(rr[p]);
      yr[p] = v[0];
    }
  }
}

// cols [C kh kw, p1 - p0]: the input values under each tap for output pixels p0..p1 (zeros in the padding)
void conv_columns(const ConvGeom& g, const float* x, int64_t p0, int64_t p1, float* cols) {
  const int64_t t = p1 - p0;
  for (int64_t c = 0; c < g.c; ++c) {
    const float* xc = x + c * g.h * g.w;
    for (int64_t i = 0; i < g.kh; ++i) {
      for (int64_t j = 0; j < g.kw; ++j) {
        float* row = cols + ((c * g.kh + i) * g.kw + j) * t;
        const int64_t dy = i * g.dil - g.pad, dx = j * g.dil - g.pad;
        int64_t lo, hi;
        conv_valid_columns(dx, g.stride, g.w, g.ow, lo, hi);
        int64_t p = p0;
        while (p < p1) {
          const int64_t oh = p / g.ow, ow0 = p % g.ow;
          const int64_t ow1 = (p1 - p < g.ow - ow0) ? ow0 + (p1 - p) : g.ow;  // this output row's part of the tile
          float* dst = row + (p - p0);
          const int64_t ih = oh * g.stride + dy;
          if (ih < 0 || ih >= g.h) {
            std::memset(dst, 0, sizeof(float) * (ow1 - ow0));
          } else {
            const float* xr = xc + ih * g.w;
            for (int64_t ow = ow0; ow < ow1; ++ow) {
              if (ow < lo || ow > hi) {
                dst[ow - ow0] = 0.f;
              } else if (g.stride == 1) {  // a contiguous run of the input row
                const int64_t end = (hi + 1 < ow1) ? hi + 1 : ow1;
                std::memcpy(dst + (ow - ow0), xr + ow + dx, sizeof(float) * (end - ow));
                ow = end - 1;
              } else {
                dst[ow - ow0] = xr[ow * g.stride + dx];
              }
            }
          }
          p += ow1 - ow0;
        }
      }
    }
  }
}

int conv_dense(const ConvGeom& g, const float* x, const float* w, const float* scale, const float* shift,
               const float* res, float* y) {
  const int64_t k = g.c * g.kh * g.kw, pix = g.oh * g.ow;
  const bool pointwise = g.kh == 1 && g.kw == 1 && g.stride == 1 && g.pad == 0;
  // a tile's columns fill ~1 MB; whole rows of 16 pixels
  int64_t tile = (int64_t{1} << 18) / k;
  tile = tile < 64 ? 64 : (tile > 4096 ? 4096 : tile);
  tile = tile / 16 * 16;
  if (tile > pix) tile = pix;
  const int64_t tiles = (pix + tile - 1) / tile;
  int failed = 0;
  for (int64_t b = 0; b < g.b; ++b) {
    const float* xb = x + b * g.c * g.h * g.w;
    float* yb = y + b * g.o * pix;
    const float* rb = res != nullptr ? res + b * g.o * pix : nullptr;
#pragma omp parallel num_threads(tiles < g_threads ? static_cast<int>(tiles) : g_threads) reduction(|| : failed)
    {
      std::vector<float> cols(pointwise ? 0 : static_cast<size_t>(k * tile));
#pragma omp for schedule(static)
      for (int64_t t = 0; t < tiles; ++t) {
        const int64_t p0 = t * tile, p1 = (p0 + tile < pix) ? p0 + tile : pix;
        int status;
        if (pointwise) {
          status = g_dnnl_sgemm('N', 'N', g.o, p1 - p0, k, 1.f, w, k, xb + p0, pix, 0.f, yb + p0, pix);
        } else {
          conv_columns(g, xb, p0, p1, cols.data());
          status = g_dnnl_sgemm('N', 'N', g.o, p1 - p0, k, 1.f, w, k, cols.data(), p1 - p0, 0.f, yb + p0, pix);
        }
        failed = failed || status != 0;
        conv_epilogue(g, yb, rb, pix, 0, g.o, p0, p1, scale, shift);
      }
    }
  }
  return failed ? 1 : 0;
}

int conv_depthwise(const ConvGeom& g, const float* x, const float* w, const float* scale, const float* shift,
                   const float* res, float* y) {
  const int64_t pix = g.oh * g.ow;
#pragma omp parallel for num_threads(g_threads) schedule(static) collapse(2)
  for (int64_t b = 0; b < g.b; ++b) {
    for (int64_t c = 0; c < g.c; ++c) {
      const float* xc = x + (b * g.c + c) * g.h * g.w;
      const float* wc = w + c * g.kh * g.kw;
      float* yc = y + (b * g.c + c) * pix;
      for (int64_t oh = 0; oh < g.oh; ++oh) {
        float* yr = yc + oh * g.ow;
        std::memset(yr, 0, sizeof(float) * g.ow);
        for (int64_t i = 0; i < g.kh; ++i) {
          const int64_t ih = oh * g.stride + i * g.dil - g.pad;
          if (ih < 0 || ih >= g.h) continue;
          const float* xr = xc + ih * g.w;
          for (int64_t j = 0; j < g.kw; ++j) {
            const int64_t dx = j * g.dil - g.pad;
            int64_t lo, hi;
            conv_valid_columns(dx, g.stride, g.w, g.ow, lo, hi);
            const float wv = wc[i * g.kw + j];
            if (g.stride == 1) {
              const float* src = xr + dx;
              for (int64_t ow = lo; ow <= hi; ++ow) yr[ow] += wv * src[ow];
            } else {
              for (int64_t ow = lo; ow <= hi; ++ow) yr[ow] += wv * xr[ow * g.stride + dx];
            }
          }
        }
      }
      const float* rc = res != nullptr ? res + (b * g.c + c) * pix : nullptr;
      conv_epilogue(g, yc, rc, pix, 0, 1, 0, pix, scale + c, shift + c);
    }
  }
  return 0;
}

}  // namespace
}  // namespace ms_ocr

using namespace ms_ocr;

extern "C" {

// ---- Conv2dAffine: the layout models' convolutions with their batch norm, activation and residual --------------
// x [B, C, H, W], w [O, C / groups, kh, kw], scale [O], shift [O], geometry int32 [6] = (stride, padding, dilation,
// groups, activation: 0 none / 1 ReLU / 2 SiLU, residual: 0 none / 1 added after the activation / 2 before it)
// [, res [B, O, OH, OW]] -> y [B, O, OH, OW] = act(conv(x, w) * scale + shift (+ res)) (+ res), fp32, NCHW.
// A k x k convolution is the product of w [O, C k k] with the input's columns, built a tile of output pixels at a
// time into a buffer that stays in cache (the composed path, ops/conv.py, unfolds the whole map first: on the
// layout models' 200 x 200 and 100 x 100 maps those buffers were most of the graph's memory); a 1 x 1 convolution
// reads the input as it is. The products are oneDNN's fp32 gemm, one sequential call per tile on the kernels'
// threads; the epilogue runs on the tile while it is in cache. Depthwise convolutions (groups == C == O) are a
// direct loop along each output row.
int Conv2dAffine(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,
                 void* extra) {
  (void)stream; (void)extra; (void)dtypes;
  if ((nparam != 6 && nparam != 7) || ndims[0] != 4 || ndims[1] != 4 || ndims[4] != 1 || shapes[4][0] != 6) return 1;
  const int32_t* geo = static_cast<const int32_t*>(params[4]);
  ConvGeom g{shapes[0][0], shapes[0][1], shapes[0][2], shapes[0][3], shapes[1][0], shapes[1][2], shapes[1][3],
             0, 0, geo[0], geo[1], geo[2], geo[3], geo[4], geo[5]};
  const bool has_res = nparam == 7;
  if (has_res != (g.res_mode != 0)) return 1;
  float* y = static_cast<float*>(params[nparam - 1]);
  g.oh = shapes[nparam - 1][2];
  g.ow = shapes[nparam - 1][3];
  if (shapes[nparam - 1][1] != g.o || g.oh != (g.h + 2 * g.pad - g.dil * (g.kh - 1) - 1) / g.stride + 1 ||
      g.ow != (g.w + 2 * g.pad - g.dil * (g.kw - 1) - 1) / g.stride + 1)
    return 1;
  const float* x = static_cast<const float*>(params[0]);
  const float* w = static_cast<const float*>(params[1]);
  const float* scale = static_cast<const float*>(params[2]);
  const float* shift = static_cast<const float*>(params[3]);
  const float* res = has_res ? static_cast<const float*>(params[5]) : nullptr;
  g_conv_calls.fetch_add(1);
  if (g.groups == g.c && g.groups == g.o && shapes[1][1] == 1) return conv_depthwise(g, x, w, scale, shift, res, y);
  if (g.groups != 1 || shapes[1][1] != g.c || g_dnnl_sgemm == nullptr) return 1;
  return conv_dense(g, x, w, scale, shift, res, y);
}

// ---- DeformableSample: multi-scale deformable attention's sampling (the layout models' decoders) ----------------
// value [B, S, C] (the value maps of every level flattened and concatenated, C = heads * D), loc [B, Q, heads, L,
// P, 2] (sampling points, x and y in [0, 1] of their level), weight [B, Q, heads, L, P], shapes int32 [L, 2] (each
// level's H, W) -> out [B, Q, C]: per query and head, the weighted sum of the bilinear samples of the head's value
// channels (grid_sample's align_corners=False: pixel x * W - 0.5; neighbours outside the map count 0).
int DeformableSample(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,
                     void* extra) {
  (void)stream; (void)extra; (void)dtypes;
  if (nparam != 5 || ndims[0] != 3 || ndims[1] != 6 || ndims[2] != 5 || ndims[3] != 2) return 1;
  const int64_t b = shapes[0][0], s = shapes[0][1], c = shapes[0][2];
  const int64_t q = shapes[1][1], heads = shapes[1][2], levels = shapes[1][3], points = shapes[1][4];
  if (shapes[3][0] != levels || c % heads != 0) return 1;
  const int64_t d = c / heads;
  const float* value = static_cast<const float*>(params[0]);
  const float* loc = static_cast<const float*>(params[1]);
  const float* weight = static_cast<const float*>(params[2]);
  const int32_t* hw = static_cast<const int32_t*>(params[3]);
  float* out = static_cast<float*>(params[4]);
  std::vector<int64_t> start(levels);
  int64_t total = 0;
  for (int64_t l = 0; l < levels; ++l) {
    start[l] = total;
    total += int64_t{hw[2 * l]} * hw[2 * l + 1];
  }
  if (total != s) return 1;
  g_deformable_calls.fetch_add(1);
#pragma omp parallel for num_threads(g_threads) schedule(static) collapse(2)
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t qi = 0; qi < q; ++qi) {
      const float* vb = value + bi * s * c;
      for (int64_t h = 0; h < heads; ++h) {
        float* o = out + (bi * q + qi) * c + h * d;
        std::memset(o, 0, sizeof(float) * d);
        const int64_t base = ((bi * q + qi) * heads + h) * levels * points;
        for (int64_t l = 0; l < levels; ++l) {
          const int64_t height = hw[2 * l], width = hw[2 * l + 1];
          for (int64_t p = 0; p < points; ++p) {
            const int64_t k = base + l * points + p;
            const float a = weight[k];
            const float px = loc[2 * k] * width - 0.5f, py = loc[2 * k + 1] * height - 0.5f;
            const float fx0 = std::floor(px), fy0 = std::floor(py);
            const float fx = px - fx0, fy = py - fy0;
            const int64_t x0 = static_cast<int64_t>(fx0), y0 = static_cast<int64_t>(fy0);
            const float corner[4] = {(1 - fx) * (1 - fy), fx * (1 - fy), (1 - fx) * fy, fx * fy};
            for (int t = 0; t < 4; ++t) {
              const int64_t xi = x0 + (t & 1), yi = y0 + (t >> 1);
              if (xi < 0 || xi >= width || yi < 0 || yi >= height) continue;
              const float wgt = a * corner[t];
              const float* v = vb + (start[l] + yi * width + xi) * c + h * d;
              int64_t j = 0;
              for (; j + kVL <= d; j += kVL) vstore(o + j, vload(o + j) + vset(wgt) * vload(v + j));
              for (; j < d; ++j) o[j] += wgt * v[j];
            }
          }
        }
      }
    }
  }
  return 0;
}

// ---- PadMaxPool2: HGNetV2's stem pooling (layout/backbone.py Embeddings) ---------------------------------------
// x [B, C, H, W] -> y [B, C, H, W]: y[i, j] = the max of x over rows i, i + 1 and columns j, j + 1, a row or column
// past the map counting 0 (the reference pads the map with one zero row and column, then MaxPool2d(2, stride 1,
// ceil_mode)). A max picks one of its inputs: the same values as the reference, bit for bit.
int PadMaxPool2(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream,
                void* extra) {
  (void)stream; (void)extra; (void)dtypes;
  if (nparam != 2 || ndims[0] != 4 || ndims[1] != 4) return 1;
  const int64_t planes = shapes[0][0] * shapes[0][1], h = shapes[0][2], w = shapes[0][3];
  if (h < 1 || w < 1) return 1;
  const float* x = static_cast<const float*>(params[0]);
  float* y = static_cast<float*>(params[1]);
#pragma omp parallel for num_threads(g_threads) schedule(static)
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t i = 0; i < h; ++i) {
      const float* r0 = x + (p * h + i) * w;
      float* out = y + (p * h + i) * w;
      if (i + 1 < h) {
        const float* r1 = r0 + w;
        for (int64_t j = 0; j + 1 < w; ++j) out[j] = std::max(std::max(r0[j], r0[j + 1]), std::max(r1[j], r1[j + 1]));
        out[w - 1] = std::max(std::max(r0[w - 1], r1[w - 1]), 0.f);
      } else {
        for (int64_t j = 0; j + 1 < w; ++j) out[j] = std::max(std::max(r0[j], r0[j + 1]), 0.f);
        out[w - 1] = std::max(r0[w - 1], 0.f);
      }
    }
  }
  return 0;
}

}  // extern "C"
