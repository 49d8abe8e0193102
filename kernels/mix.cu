// Mixup and CutMix over a finished batch (issue 19), timm's mode="batch":
// sample i with sample n - 1 - i, in place. One thread per element of a
// pair (grid: elements x pairs); the pair's two writes are the same
// thread's, so pairs never race, and the middle sample of an odd batch
// mixes with itself as in timm. Arithmetic as src/augment/mix.rs: f32,
// rounded once to the output type.
#include "cast.cuh"
#include "mix.cuh"

template <typename E, bool NCHW>
__device__ void gf_mix(GfMix m, typename E::T* __restrict__ out) {
    const unsigned int plane = m.out_w * m.out_h;
    const unsigned int e = blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned int i = blockIdx.y;
    if (e >= 3 * plane || 2 * i >= m.n + 1) return;
    const unsigned int j = m.n - 1 - i;
    const unsigned int pix = NCHW ? e % plane : e / 3;
    const unsigned int x = pix % m.out_w, y = pix / m.out_w;
    typename E::T* a = out + (size_t)i * 3 * plane + e;
    typename E::T* b = out + (size_t)j * 3 * plane + e;
    const typename E::T va = *a, vb = *b;
    if (m.cut) {
        if (x >= m.box[0] && x < m.box[2] && y >= m.box[1] && y < m.box[3]) {
            *a = vb;
            *b = va;
        }
        return;
    }
    const float fa = gf_load(E(), va), fb = gf_load(E(), vb);
    *a = gf_cast(E(), fa * m.lam + fb * m.rest);
    *b = gf_cast(E(), fb * m.lam + fa * m.rest);
}

#define GF_MIX_KERNEL(name, E, NCHW)                                            \
    extern "C" __global__ void name(GfMix m, E::T* __restrict__ out) {          \
        gf_mix<E, NCHW>(m, out);                                                \
    }

GF_MIX_KERNEL(gf_mix_u8_nchw, GfU8, true)
GF_MIX_KERNEL(gf_mix_u8_nhwc, GfU8, false)
GF_MIX_KERNEL(gf_mix_f16_nchw, GfF16, true)
GF_MIX_KERNEL(gf_mix_f16_nhwc, GfF16, false)
GF_MIX_KERNEL(gf_mix_bf16_nchw, GfBF16, true)
GF_MIX_KERNEL(gf_mix_bf16_nhwc, GfBF16, false)
GF_MIX_KERNEL(gf_mix_f32_nchw, GfF32, true)
GF_MIX_KERNEL(gf_mix_f32_nhwc, GfF32, false)
