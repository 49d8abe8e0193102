// From DCT coefficients to RGB8 pixels, as libjpeg-turbo computes them
// with its defaults (TurboJPEG: the accurate integer IDCT, fancy
// upsampling), so that a progressive file decoded on the GPU
// (progressive.cu, then these) equals libjpeg-turbo's decode bit for bit.
//
// gf_idct: one thread per 8x8 block of every plane of a launch:
// dequantization and libjpeg's jpeg_idct_islow (jidctint.c: Loeffler,
// Ligtenberg and Moschytz, 13-bit constants, two passes), samples clamped
// as its range-limit table does.
// gf_color: one thread per output pixel: each plane's sample upsampled as
// jdsample.c does (a triangle filter for 2:1 ratios, replication for
// others), then jdcolor.c's fixed-point YCbCr -> RGB.
#include "pixels.cuh"

#define GF_CONST_BITS 13
#define GF_PASS1_BITS 2

__device__ __forceinline__ long long gf_descale(long long x, int n) {
    return (x + (1LL << (n - 1))) >> n;
}

// libjpeg's IDCT_range_limit: the output wraps at 10 bits, then is clamped
// to a sample around 128 (jdmaster.c, prepare_range_limit_table).
__device__ __forceinline__ unsigned char gf_range(long long v) {
    int s = (int)(v & 1023);
    if (s >= 512) s -= 1024;
    s += 128;
    return (unsigned char)(s < 0 ? 0 : (s > 255 ? 255 : s));
}

// One 8-point IDCT (jidctint.c, its even and odd halves): the 8 results
// before descaling into t[0..7].
__device__ __forceinline__ void gf_idct8(const long long* in, long long* t) {
    long long z2 = in[2], z3 = in[6];
    long long z1 = (z2 + z3) * 4433;             // FIX(0.541196100)
    long long tmp2 = z1 + z3 * -15137;           // -FIX(1.847759065)
    long long tmp3 = z1 + z2 * 6270;             // FIX(0.765366865)
    long long tmp0 = (in[0] + in[4]) * (1LL << GF_CONST_BITS);
    long long tmp1 = (in[0] - in[4]) * (1LL << GF_CONST_BITS);
    const long long tmp10 = tmp0 + tmp3, tmp13 = tmp0 - tmp3;
    const long long tmp11 = tmp1 + tmp2, tmp12 = tmp1 - tmp2;
    tmp0 = in[7];
    tmp1 = in[5];
    tmp2 = in[3];
    tmp3 = in[1];
    z1 = tmp0 + tmp3;
    z2 = tmp1 + tmp2;
    z3 = tmp0 + tmp2;
    long long z4 = tmp1 + tmp3;
    const long long z5 = (z3 + z4) * 9633;       // FIX(1.175875602)
    tmp0 = tmp0 * 2446;                          // FIX(0.298631336)
    tmp1 = tmp1 * 16819;                         // FIX(2.053119869)
    tmp2 = tmp2 * 25172;                         // FIX(3.072711026)
    tmp3 = tmp3 * 12299;                         // FIX(1.501321110)
    z1 = z1 * -7373;                             // -FIX(0.899976223)
    z2 = z2 * -20995;                            // -FIX(2.562915447)
    z3 = z3 * -16069 + z5;                       // -FIX(1.961570560)
    z4 = z4 * -3196 + z5;                        // -FIX(0.390180644)
    tmp0 += z1 + z3;
    tmp1 += z2 + z4;
    tmp2 += z2 + z3;
    tmp3 += z1 + z4;
    t[0] = tmp10 + tmp3;
    t[7] = tmp10 - tmp3;
    t[1] = tmp11 + tmp2;
    t[6] = tmp11 - tmp2;
    t[2] = tmp12 + tmp1;
    t[5] = tmp12 - tmp1;
    t[3] = tmp13 + tmp0;
    t[4] = tmp13 - tmp0;
}

// Grid: ceil(blocks / 64) blocks of 64 threads; `planes` in order of
// `first`, the last one's blocks ending at `blocks`.
extern "C" __global__ void gf_idct(const GfPlane* __restrict__ planes, unsigned int n_planes,
                                   unsigned int blocks) {
    const unsigned int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= blocks || n_planes == 0) return;
    unsigned int lo = 0, hi = n_planes - 1;
    while (lo < hi) {  // the last plane whose first block is <= b
        const unsigned int mid = (lo + hi + 1) / 2;
        if (planes[mid].first <= b) lo = mid;
        else hi = mid - 1;
    }
    const GfPlane& p = planes[lo];
    const unsigned int k = b - p.first;
    if (k >= p.stride * p.rows) return;
    const short* c = (const short*)p.coef + (size_t)k * 64;
    int ws[64];  // libjpeg's workspace between the passes
    long long col[8], t[8];
    for (int x = 0; x < 8; ++x) {
        // Pass 1, columns; a column with no AC terms is its DC value
        // (the same result, libjpeg's shortcut).
        for (int y = 0; y < 8; ++y) col[y] = (long long)c[y * 8 + x] * p.quant[y * 8 + x];
        gf_idct8(col, t);
        for (int y = 0; y < 8; ++y)
            ws[y * 8 + x] = (int)gf_descale(t[y], GF_CONST_BITS - GF_PASS1_BITS);
    }
    unsigned char* out = (unsigned char*)p.out + (size_t)(k / p.stride) * 8 * p.stride * 8 +
                         (size_t)(k % p.stride) * 8;
    for (int y = 0; y < 8; ++y) {
        for (int x = 0; x < 8; ++x) col[x] = ws[y * 8 + x];
        gf_idct8(col, t);
        for (int x = 0; x < 8; ++x)
            out[(size_t)y * p.stride * 8 + x] =
                gf_range(gf_descale(t[x], GF_CONST_BITS + GF_PASS1_BITS + 3));
    }
}

__device__ __forceinline__ int gf_at(const GfColor& c, int i, int x, int y) {
    x = x < 0 ? 0 : (x >= (int)c.dw[i] ? (int)c.dw[i] - 1 : x);
    y = y < 0 ? 0 : (y >= (int)c.dh[i] ? (int)c.dh[i] - 1 : y);
    return ((const unsigned char*)c.plane[i])[(size_t)y * c.pitch[i] + x];
}

// Plane i's sample at image pixel (x, y): jdsample.c's methods, its edge
// rows and columns repeated (jdmainct.c's context rows).
__device__ __forceinline__ int gf_sample(const GfColor& c, int i, int x, int y) {
    switch (c.mode[i]) {
    case GF_UP_H2V1: {
        const int s = x >> 1, near3 = 3 * gf_at(c, i, s, y);
        return (x & 1) ? (near3 + gf_at(c, i, s + 1, y) + 2) >> 2
                       : (near3 + gf_at(c, i, s - 1, y) + 1) >> 2;
    }
    case GF_UP_H1V2: {
        const int r = y >> 1, near3 = 3 * gf_at(c, i, x, r);
        return (y & 1) ? (near3 + gf_at(c, i, x, r + 1) + 2) >> 2
                       : (near3 + gf_at(c, i, x, r - 1) + 1) >> 2;
    }
    case GF_UP_H2V2: {
        const int s = x >> 1, r = y >> 1, r2 = (y & 1) ? r + 1 : r - 1;
        const int here = 3 * gf_at(c, i, s, r) + gf_at(c, i, s, r2);
        const int s2 = (x & 1) ? s + 1 : s - 1;
        const int there = 3 * gf_at(c, i, s2, r) + gf_at(c, i, s2, r2);
        return (x & 1) ? (3 * here + there + 7) >> 4 : (3 * here + there + 8) >> 4;
    }
    case GF_UP_REPLICATE:
        return gf_at(c, i, x / c.he[i], y / c.ve[i]);
    default:
        return gf_at(c, i, x, y);
    }
}

__device__ __forceinline__ unsigned char gf_clamp255(int v) {
    return (unsigned char)(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// Grid: (ceil(width * height / 256), images); one GfColor per image.
extern "C" __global__ void gf_color(const GfColor* __restrict__ images) {
    const GfColor& c = images[blockIdx.y];
    const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= c.width * c.height) return;
    const int x = (int)(i % c.width), y = (int)(i / c.width);
    unsigned char* o = (unsigned char*)c.out + (size_t)y * c.out_pitch + (size_t)x * 3;
    const int s0 = gf_sample(c, 0, x, y);
    if (c.color == GF_COLOR_GRAY) {
        o[0] = o[1] = o[2] = (unsigned char)s0;
        return;
    }
    const int s1 = gf_sample(c, 1, x, y), s2 = gf_sample(c, 2, x, y);
    if (c.color == GF_COLOR_RGB) {
        o[0] = (unsigned char)s0;
        o[1] = (unsigned char)s1;
        o[2] = (unsigned char)s2;
        return;
    }
    // jdcolor.c, build_ycc_rgb_table: 16-bit fixed point, FIX(v) =
    // v * 65536 rounded; Cb, Cr centred on 128.
    const long long cb = s1 - 128, cr = s2 - 128;
    const int r = (int)((91881 * cr + 32768) >> 16);                // FIX(1.40200)
    const int g = (int)((-22554 * cb + 32768 + -46802 * cr) >> 16);  // FIX(0.34414), FIX(0.71414)
    const int b = (int)((116130 * cb + 32768) >> 16);               // FIX(1.77200)
    o[0] = gf_clamp255(s0 + r);
    o[1] = gf_clamp255(s0 + g);
    o[2] = gf_clamp255(s0 + b);
}
