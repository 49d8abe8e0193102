// Fused augment: crop -> resize (bilinear or antialiased) -> flip ->
// normalize -> cast -> layout, one launch per batch over a flat list of
// tiles. The arithmetic follows src/augment/cpu.rs step for step (same tap
// formulas, same summation order, separate multiply and add; compiled with
// --fmad=false) so that results match the CPU reference.
//
// No headers: NVRTC compiles this without a CUDA toolkit. Half and bfloat16
// conversions are written out (round to nearest even). With GF_HOST_EMU the
// same file compiles as C++ on the host (tests/emu/augment_emu.cpp), so the
// kernel's arithmetic is checked against the CPU reference without a GPU.
#include "augment.cuh"
#include "cast.cuh"

// Taps of output pixel o on one axis, relative to the region start.
// Mirrors Taps::build in src/augment/cpu.rs; weights are computed on the fly
// (gf_weight) so that no tap count limit exists.
struct GfTaps {
    int first;      // first source index (relative to the region)
    int n;          // number of taps
    bool aa;        // triangle filter (else bilinear w0, w1)
    float c;        // centre (antialias)
    float support;  // support = scale (antialias)
    float total;    // sum of unnormalised weights (antialias)
    float w0, w1;   // bilinear weights
};

__device__ __forceinline__ float gf_triangle(const GfTaps& t, int k) {
    const float d = ((float)(t.first + k) - t.c + 0.5f) / t.support;
    const float v = 1.0f - fabsf(d);
    return v > 0.0f ? v : 0.0f;
}

__device__ __forceinline__ float gf_weight(const GfTaps& t, int k) {
    if (!t.aa) return k == 0 ? t.w0 : t.w1;
    if (t.total > 0.0f) return gf_triangle(t, k) / t.total;
    return k == 0 ? 1.0f : 0.0f;
}

__device__ __forceinline__ GfTaps gf_taps(const GfAxis& a, unsigned int o, bool antialias) {
    GfTaps t;
    t.c = ((float)o + a.offset + 0.5f) * a.scale;
    const int len = (int)a.len;
    if (antialias && a.scale > 1.0f) {
        t.aa = true;
        t.support = a.scale;
        int lo = (int)(t.c - t.support + 0.5f);
        if (lo < 0) lo = 0;
        int hi = (int)(t.c + t.support + 0.5f);
        if (hi > len) hi = len;
        if (hi < 0) hi = 0;
        if (lo > len - 1) lo = len - 1;
        if (hi < lo + 1) hi = lo + 1;
        t.first = lo;
        t.n = hi - lo;
        t.total = 0.0f;
        for (int k = 0; k < t.n; ++k) t.total = t.total + gf_triangle(t, k);
        t.w0 = t.w1 = 0.0f;
        return t;
    }
    t.aa = false;
    t.support = t.total = 0.0f;
    float s = t.c - 0.5f;
    s = s > 0.0f ? s : 0.0f;
    int i0 = (int)floorf(s);
    if (i0 > len - 1) i0 = len - 1;
    const int i1 = i0 + 1 < len ? i0 + 1 : len - 1;
    float f = s - (float)i0;
    f = f < 0.0f ? 0.0f : (f > 1.0f ? 1.0f : f);
    t.first = i0;
    if (i1 == i0) {
        t.n = 1;
        t.w0 = 1.0f;
        t.w1 = 0.0f;
    } else {
        t.n = 2;
        t.w0 = 1.0f - f;
        t.w1 = f;
    }
    return t;
}

template <typename E, bool NCHW>
__device__ void gf_augment(const GfTile* __restrict__ tiles, GfLaunch p,
                           typename E::T* __restrict__ out) {
    const unsigned int t = blockIdx.y;
    if (t >= p.n_tiles) return;
    const unsigned int pix = blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned int plane = p.out_w * p.out_h;
    if (pix >= plane) return;
    const GfTile tile = tiles[t];
    const unsigned int ox = pix % p.out_w;
    const unsigned int oy = pix / p.out_w;

    const GfTaps tx_ = gf_taps(tile.x, ox, p.antialias != 0);
    const GfTaps ty_ = gf_taps(tile.y, oy, p.antialias != 0);
    const unsigned char* src = (const unsigned char*)tile.src;

    // Horizontal taps first, then vertical: the CPU reference's order.
    float acc[3] = {0.0f, 0.0f, 0.0f};
    for (int ky = 0; ky < ty_.n; ++ky) {
        const unsigned char* row = src + (size_t)(tile.y.start + ty_.first + ky) * tile.src_pitch +
                                   (size_t)(tile.x.start + tx_.first) * 3;
        float h[3] = {0.0f, 0.0f, 0.0f};
        for (int kx = 0; kx < tx_.n; ++kx) {
            const float w = gf_weight(tx_, kx);
            for (int c = 0; c < 3; ++c) h[c] = h[c] + w * (float)row[kx * 3 + c];
        }
        const float w = gf_weight(ty_, ky);
        for (int c = 0; c < 3; ++c) acc[c] = acc[c] + w * h[c];
    }

    const int tx = tile.x.dst0 + tile.x.step * (int)ox;
    const int ty = tile.y.dst0 + tile.y.step * (int)oy;
    typename E::T* o = out + tile.dst;
    for (int c = 0; c < 3; ++c) {
        const float v = __fadd_rn(__fmul_rn(acc[c], p.scale[c]), p.shift[c]);
        const size_t idx = NCHW ? (size_t)c * plane + (size_t)ty * p.out_w + tx
                                : ((size_t)ty * p.out_w + tx) * 3 + c;
        o[idx] = gf_cast(E(), v);
    }
}

#define GF_KERNEL(name, E, NCHW)                                                        \
    extern "C" __global__ void name(const GfTile* __restrict__ tiles, GfLaunch p,       \
                                    E::T* __restrict__ out) {                           \
        gf_augment<E, NCHW>(tiles, p, out);                                             \
    }

GF_KERNEL(gf_augment_u8_nchw, GfU8, true)
GF_KERNEL(gf_augment_u8_nhwc, GfU8, false)
GF_KERNEL(gf_augment_f16_nchw, GfF16, true)
GF_KERNEL(gf_augment_f16_nhwc, GfF16, false)
GF_KERNEL(gf_augment_bf16_nchw, GfBF16, true)
GF_KERNEL(gf_augment_bf16_nhwc, GfBF16, false)
GF_KERNEL(gf_augment_f32_nchw, GfF32, true)
GF_KERNEL(gf_augment_f32_nhwc, GfF32, false)
