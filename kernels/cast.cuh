// Output element types and the cast of a float value to each, shared by
// the augment and photometric kernels. Round to nearest even for f16 and
// bf16, round half away from zero and saturate for u8 (as the CPU
// reference's Element::from_f32).
#pragma once

struct GfU8 { typedef unsigned char T; };
struct GfF16 { typedef unsigned short T; };
struct GfBF16 { typedef unsigned short T; };
struct GfF32 { typedef float T; };

__device__ __forceinline__ unsigned char gf_cast(GfU8, float v) {
    // round half away from zero (v >= 0 after the clamp), saturate.
    v = v < 0.0f ? 0.0f : (v > 255.0f ? 255.0f : v);
    return (unsigned char)roundf(v);
}

__device__ __forceinline__ unsigned short gf_cast(GfF16, float v) {
#ifdef GF_HOST_EMU
    return gf_emu_f32_to_f16(v);  // tests/emu: the same rounding on the host
#else
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return h;
#endif
}

__device__ __forceinline__ unsigned short gf_cast(GfBF16, float v) {
    unsigned int u = __float_as_uint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);  // NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}

__device__ __forceinline__ float gf_cast(GfF32, float v) { return v; }

// The other way: every element type widens to f32 exactly.
__device__ __forceinline__ float gf_load(GfU8, unsigned char v) { return (float)v; }

__device__ __forceinline__ float gf_load(GfF16, unsigned short h) {
#ifdef GF_HOST_EMU
    return gf_emu_f16_to_f32(h);
#else
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#endif
}

__device__ __forceinline__ float gf_load(GfBF16, unsigned short h) {
    return __uint_as_float((unsigned int)h << 16);
}

__device__ __forceinline__ float gf_load(GfF32, float v) { return v; }
