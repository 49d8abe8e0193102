// Photometric ops (issue 19): color jitter, grayscale, Gaussian blur,
// solarize, then normalize, cast, layout and random erasing, for draws the
// augment kernel has resampled into f32 planes (0..255, flipped). One block
// per draw: the contrast mean needs the whole draw, and the blur its
// neighbours. The arithmetic follows src/augment/photo_cpu.rs step for
// step (same formulas and summation order, --fmad=false).
//
// The passes between barriers are functions of (draw, thread) so that the
// host emulation (tests/emu/augment_emu.cpp) runs them thread by thread in
// the same order as gf_photo below.
#include "augment.cuh"
#include "cast.cuh"
#include "photo.cuh"

__device__ __forceinline__ float gf_clamp255(float v) {
    return v < 0.0f ? 0.0f : (v > 255.0f ? 255.0f : v);
}

__device__ __forceinline__ float gf_gray(const float* p) {
    return p[0] * 0.2989f + p[1] * 0.587f + p[2] * 0.114f;
}

__device__ __forceinline__ float gf_blend(float a, float b, float f) {
    return gf_clamp255(a * f + b * (1.0f - f));
}

// torchvision's _rgb_to_hsv, hue rotation and _hsv_to_rgb, v in 0..255.
__device__ __forceinline__ void gf_hue(float* p, float f) {
    const float r = p[0], g = p[1], b = p[2];
    const float maxc = fmaxf(fmaxf(r, g), b);
    const float minc = fminf(fminf(r, g), b);
    const bool eqc = maxc == minc;
    const float range = maxc - minc;
    const float s = range / (eqc ? 1.0f : maxc);
    const float div = eqc ? 1.0f : range;
    const float rc = (maxc - r) / div;
    const float gc = (maxc - g) / div;
    const float bc = (maxc - b) / div;
    float h;
    if (maxc == r) h = bc - gc;
    else if (maxc == g) h = (rc + 2.0f) - bc;
    else h = (gc + 4.0f) - rc;
    h = h * (1.0f / 6.0f) + 1.0f;  // in [5/6, 2): fmod(h, 1) exactly
    h = h - truncf(h);
    h = h + f;
    h = h - floorf(h);
    const float v = maxc;
    const float h6 = h * 6.0f;
    const float fi = floorf(h6);
    const float fr = h6 - fi;
    const int i = (((int)fi % 6) + 6) % 6;
    const float sxf = s * fr;
    const float q = gf_clamp255((1.0f - sxf) * v);
    const float t = gf_clamp255((sxf + (1.0f - s)) * v);
    const float pp = gf_clamp255((1.0f - s) * v);
    switch (i) {
        case 0: p[0] = v; p[1] = t; p[2] = pp; break;
        case 1: p[0] = q; p[1] = v; p[2] = pp; break;
        case 2: p[0] = pp; p[1] = v; p[2] = t; break;
        case 3: p[0] = pp; p[1] = q; p[2] = v; break;
        case 4: p[0] = t; p[1] = pp; p[2] = v; break;
        default: p[0] = v; p[1] = pp; p[2] = q; break;
    }
}

// Jitter op `k` (in order) of draw d on one pixel.
__device__ __forceinline__ void gf_jitter(const GfPhoto& d, unsigned int k, float* p, float mean) {
    const unsigned int op = (d.ops >> (4 * k)) & 0xfu;
    const float f = d.factor[k];
    switch (op) {
        case 0:  // brightness
            for (int c = 0; c < 3; ++c) p[c] = gf_clamp255(p[c] * f);
            break;
        case 1:  // contrast
            for (int c = 0; c < 3; ++c) p[c] = gf_blend(p[c], mean, f);
            break;
        case 2: {  // saturation
            const float g = gf_gray(p);
            for (int c = 0; c < 3; ++c) p[c] = gf_blend(p[c], g, f);
            break;
        }
        case 3:
            gf_hue(p, f);
            break;
        default:
            break;
    }
}

// Position of contrast in the jitter order, or -1.
__device__ __forceinline__ int gf_contrast_at(const GfPhoto& d) {
    for (unsigned int k = 0; k < d.n_ops; ++k)
        if (((d.ops >> (4 * k)) & 0xfu) == 1u) return (int)k;
    return -1;
}

// Standard normal noise for logical element idx (photo_cpu.rs erase_noise).
__device__ float gf_noise(unsigned long long seed, unsigned long long idx) {
    unsigned long long z = (seed ^ (idx * 0x9E3779B97F4A7C15ull)) + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u1 = (float)((z >> 40) + 1ull) * (1.0f / 16777216.0f);
    const float u2 = (float)((z >> 16) & 0xFFFFFFull) * (1.0f / 16777216.0f);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831855f * u2);
}

__device__ __forceinline__ int gf_reflect(int i, int n) {
    if (i < 0) i = -i;
    return i >= n ? 2 * (n - 1) - i : i;
}

// Pass 1 (only when contrast is on): the ops before contrast, in place;
// returns this thread's lane of the grayscale sum.
__device__ float gf_photo_pre(const GfPhoto& d, unsigned int plane, unsigned int t, int cpos) {
    float* s = (float*)d.src;
    float lane = 0.0f;
    for (unsigned int i = t; i < plane; i += GF_PHOTO_THREADS) {
        float p[3] = {s[i], s[plane + i], s[2 * plane + i]};
        for (int k = 0; k < cpos; ++k) gf_jitter(d, (unsigned int)k, p, 0.0f);
        s[i] = p[0];
        s[plane + i] = p[1];
        s[2 * plane + i] = p[2];
        lane = lane + gf_gray(p);
    }
    return lane;
}

// Solarize, normalize, erase, cast and store pixel i.
template <typename E, bool NCHW>
__device__ void gf_photo_store(const GfPhoto& d, const GfLaunch& l, unsigned int i, const float* p,
                               typename E::T* out) {
    const unsigned int plane = l.out_w * l.out_h;
    const unsigned int x = i % l.out_w, y = i / l.out_w;
    const bool erased = (d.flags & GF_PHOTO_ERASE) && x >= d.erase[0] &&
                        x < d.erase[0] + d.erase[2] && y >= d.erase[1] &&
                        y < d.erase[1] + d.erase[3];
    typename E::T* o = out + d.dst;
    for (int c = 0; c < 3; ++c) {
        float v = p[c];
        if ((d.flags & GF_PHOTO_SOLARIZE) && v >= d.threshold) v = 255.0f - v;
        v = __fadd_rn(__fmul_rn(v, l.scale[c]), l.shift[c]);
        if (erased)
            v = (d.flags & GF_PHOTO_NOISE)
                    ? gf_noise(d.noise, (unsigned long long)c * plane + i)
                    : d.erase_value;
        const size_t at = NCHW ? (size_t)c * plane + i : (size_t)i * 3 + c;
        o[at] = gf_cast(E(), v);
    }
}

// Pass 2: the ops from contrast on (all of them without contrast) and
// grayscale; then in place when a blur follows, else to the output.
template <typename E, bool NCHW>
__device__ void gf_photo_post(const GfPhoto& d, const GfLaunch& l, unsigned int t, int cpos,
                              float mean, typename E::T* out) {
    const unsigned int plane = l.out_w * l.out_h;
    float* s = (float*)d.src;
    for (unsigned int i = t; i < plane; i += GF_PHOTO_THREADS) {
        float p[3] = {s[i], s[plane + i], s[2 * plane + i]};
        for (unsigned int k = cpos < 0 ? 0u : (unsigned int)cpos; k < d.n_ops; ++k)
            gf_jitter(d, k, p, mean);
        if (d.flags & GF_PHOTO_GRAY) {
            const float g = gf_gray(p);
            p[0] = p[1] = p[2] = g;
        }
        if (d.radius > 0) {
            s[i] = p[0];
            s[plane + i] = p[1];
            s[2 * plane + i] = p[2];
        } else {
            gf_photo_store<E, NCHW>(d, l, i, p, out);
        }
    }
}

// Pass 3 (blur): rows, src -> tmp.
__device__ void gf_blur_rows(const GfPhoto& d, const GfLaunch& l, unsigned int t) {
    const unsigned int plane = l.out_w * l.out_h;
    const float* s = (const float*)d.src;
    float* m = (float*)d.tmp;
    const int r = (int)d.radius, w = (int)l.out_w;
    for (unsigned int i = t; i < plane; i += GF_PHOTO_THREADS) {
        const int x = (int)(i % l.out_w);
        const unsigned int row = i - (unsigned int)x;
        for (int c = 0; c < 3; ++c) {
            const float* src = s + (size_t)c * plane + row;
            float acc = 0.0f;
            for (int k = -r; k <= r; ++k) acc = acc + d.taps[k < 0 ? -k : k] * src[gf_reflect(x + k, w)];
            m[(size_t)c * plane + i] = acc;
        }
    }
}

// Pass 4 (blur): columns, tmp -> the output.
template <typename E, bool NCHW>
__device__ void gf_blur_cols(const GfPhoto& d, const GfLaunch& l, unsigned int t,
                             typename E::T* out) {
    const unsigned int plane = l.out_w * l.out_h;
    const float* m = (const float*)d.tmp;
    const int r = (int)d.radius, h = (int)l.out_h;
    for (unsigned int i = t; i < plane; i += GF_PHOTO_THREADS) {
        const unsigned int x = i % l.out_w;
        const int y = (int)(i / l.out_w);
        float p[3];
        for (int c = 0; c < 3; ++c) {
            const float* src = m + (size_t)c * plane + x;
            float acc = 0.0f;
            for (int k = -r; k <= r; ++k)
                acc = acc + d.taps[k < 0 ? -k : k] * src[(size_t)gf_reflect(y + k, h) * l.out_w];
            p[c] = acc;
        }
        gf_photo_store<E, NCHW>(d, l, i, p, out);
    }
}

#ifndef GF_HOST_EMU
template <typename E, bool NCHW>
__device__ void gf_photo(const GfPhoto* __restrict__ draws, GfLaunch l,
                         typename E::T* __restrict__ out) {
    __shared__ float lanes[GF_PHOTO_THREADS];
    if (blockIdx.x >= l.n_tiles) return;
    const GfPhoto& d = draws[blockIdx.x];
    const unsigned int t = threadIdx.x;
    const int cpos = gf_contrast_at(d);
    float mean = 0.0f;
    if (cpos >= 0) {
        lanes[t] = gf_photo_pre(d, l.out_w * l.out_h, t, cpos);
        __syncthreads();
        for (unsigned int k = GF_PHOTO_THREADS / 2; k > 0; k >>= 1) {
            if (t < k) lanes[t] = lanes[t] + lanes[t + k];
            __syncthreads();
        }
        mean = lanes[0] / (float)(l.out_w * l.out_h);
    }
    gf_photo_post<E, NCHW>(d, l, t, cpos, mean, out);
    if (d.radius > 0) {
        __syncthreads();
        gf_blur_rows(d, l, t);
        __syncthreads();
        gf_blur_cols<E, NCHW>(d, l, t, out);
    }
}

#define GF_PHOTO_KERNEL(name, E, NCHW)                                                  \
    extern "C" __global__ void __launch_bounds__(GF_PHOTO_THREADS)                      \
        name(const GfPhoto* __restrict__ draws, GfLaunch l, E::T* __restrict__ out) {   \
        gf_photo<E, NCHW>(draws, l, out);                                               \
    }

GF_PHOTO_KERNEL(gf_photo_u8_nchw, GfU8, true)
GF_PHOTO_KERNEL(gf_photo_u8_nhwc, GfU8, false)
GF_PHOTO_KERNEL(gf_photo_f16_nchw, GfF16, true)
GF_PHOTO_KERNEL(gf_photo_f16_nhwc, GfF16, false)
GF_PHOTO_KERNEL(gf_photo_bf16_nchw, GfBF16, true)
GF_PHOTO_KERNEL(gf_photo_bf16_nhwc, GfBF16, false)
GF_PHOTO_KERNEL(gf_photo_f32_nchw, GfF32, true)
GF_PHOTO_KERNEL(gf_photo_f32_nhwc, GfF32, false)
#endif
