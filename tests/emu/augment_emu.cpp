// Host emulation of the kernels in kernels/: their source compiled as plain
// C++ with CUDA's builtins replaced by host equivalents, and a driver that
// runs every (block, thread) of a launch sequentially. Built by build.rs
// with the `kernel-emu` feature; used by tests/kernel_emu.rs to compare the
// kernel's arithmetic with the CPU reference on machines without a GPU.
//
// What this proves: the formulas, summation order, rounding and casts of the
// kernel source. What it cannot: anything about the GPU itself (memory
// model, occupancy, real FMA contraction by ptxas; the kernel is compiled
// with --fmad=false for that reason).
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#define GF_HOST_EMU 1
#define __global__
#define __device__
#define __forceinline__ inline
// Inlining is the host compiler's choice here (the system headers, which
// spell GCC's own attribute __noinline__, are included above).
#define __noinline__
#define __constant__
#define __restrict__

struct GfDim3 { unsigned int x, y, z; };
// Thread-local: test threads may run emulated launches concurrently.
static thread_local GfDim3 blockIdx, blockDim, threadIdx;

static inline int __popc(unsigned int x) { return __builtin_popcount(x); }

// Block-level synchronisation and atomics (gf_progressive's pipeline). The
// driver runs a block's phases between its barriers one after another
// (gf_emu_progressive), so a barrier has nothing left to wait for. Within
// the scans' phase it runs the threads in order, so a scan never waits on
// a later one (each scan of a pipeline waits only on the scans before it,
// at lower warps); or, with GPUFEED_EMU_THREADS=1, each warp's working
// lane on a thread of its own, at once, so that the scans' waits and
// counts work as on a GPU: hence real atomics and fences.
#define __shared__
static inline void __syncthreads() {}
static inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __nanosleep(unsigned int) { std::this_thread::yield(); }
static inline unsigned int atomicAdd(unsigned int* p, unsigned int v) {
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
static inline unsigned int atomicExch(unsigned int* p, unsigned int v) {
    return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);
}
static inline unsigned int atomicMin(unsigned int* p, unsigned int v) {
    unsigned int old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (v < old && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST,
                                                   __ATOMIC_SEQ_CST)) {
    }
    return old;
}

static inline unsigned int __float_as_uint(float f) {
    unsigned int u;
    std::memcpy(&u, &f, 4);
    return u;
}
static inline float __uint_as_float(unsigned int u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
// Host float arithmetic is IEEE single precision with round-to-nearest on
// x86-64 (SSE); volatile keeps the compiler from contracting into an FMA.
static inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
static inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }

// IEEE binary32 -> binary16, round to nearest even (what cvt.rn.f16.f32 does).
static inline unsigned short gf_emu_f32_to_f16(float f) {
    unsigned int x = __float_as_uint(f);
    unsigned int sign = (x >> 16) & 0x8000u;
    unsigned int exp = (x >> 23) & 0xffu;
    unsigned int man = x & 0x7fffffu;
    if (exp == 0xffu) return (unsigned short)(sign | 0x7c00u | (man ? 0x200u : 0u));
    int e = (int)exp - 127 + 15;
    if (e >= 0x1f) return (unsigned short)(sign | 0x7c00u);  // overflow -> inf
    if (e <= 0) {
        if (e < -10) return (unsigned short)sign;  // underflow -> 0
        man |= 0x800000u;
        unsigned int shift = (unsigned int)(14 - e);
        unsigned int half = man >> shift;
        unsigned int rem = man & ((1u << shift) - 1u);
        unsigned int mid = 1u << (shift - 1u);
        if (rem > mid || (rem == mid && (half & 1u))) half++;
        return (unsigned short)(sign | half);
    }
    unsigned int half = ((unsigned int)e << 10) | (man >> 13);
    unsigned int rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) half++;  // may carry into exp
    return (unsigned short)(sign | half);
}

// IEEE binary16 -> binary32, exact (what cvt.f32.f16 does).
static inline float gf_emu_f16_to_f32(unsigned short h) {
    unsigned int sign = (unsigned int)(h & 0x8000u) << 16;
    unsigned int exp = (h >> 10) & 0x1fu;
    unsigned int man = h & 0x3ffu;
    if (exp == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0) return __uint_as_float(sign);
        // Subnormal: normalise.
        int e = -1;
        do { man <<= 1; ++e; } while (!(man & 0x400u));
        return __uint_as_float(sign | ((unsigned int)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13));
    }
    return __uint_as_float(sign | ((exp - 15 + 127) << 23) | (man << 13));
}

#include "augment.cu"
#include "photo.cu"
#include "mix.cu"
#include "progressive.cu"
#include "pixels.cu"

typedef void (*GfKernel)(const GfTile*, GfLaunch, void*);

#define GF_EMU_ENTRY(name, T)                                                   \
    static void name##_emu(const GfTile* t, GfLaunch p, void* out) {            \
        name(t, p, (T*)out);                                                    \
    }
GF_EMU_ENTRY(gf_augment_u8_nchw, unsigned char)
GF_EMU_ENTRY(gf_augment_u8_nhwc, unsigned char)
GF_EMU_ENTRY(gf_augment_f16_nchw, unsigned short)
GF_EMU_ENTRY(gf_augment_f16_nhwc, unsigned short)
GF_EMU_ENTRY(gf_augment_bf16_nchw, unsigned short)
GF_EMU_ENTRY(gf_augment_bf16_nhwc, unsigned short)
GF_EMU_ENTRY(gf_augment_f32_nchw, float)
GF_EMU_ENTRY(gf_augment_f32_nhwc, float)

// Run kernel `which` (index into src/cuda/mod.rs AUGMENT_KERNELS) over a
// grid of (ceil(plane / 256), n_tiles) blocks of 256 threads.
extern "C" int gf_emu_augment(int which, const GfTile* tiles, GfLaunch p, void* out) {
    static const GfKernel kernels[8] = {
        gf_augment_u8_nchw_emu,  gf_augment_u8_nhwc_emu,  gf_augment_f16_nchw_emu,
        gf_augment_f16_nhwc_emu, gf_augment_bf16_nchw_emu, gf_augment_bf16_nhwc_emu,
        gf_augment_f32_nchw_emu, gf_augment_f32_nhwc_emu,
    };
    if (which < 0 || which >= 8) return -1;
    const unsigned int plane = p.out_w * p.out_h;
    blockDim.x = 256;
    blockDim.y = blockDim.z = 1;
    for (unsigned int t = 0; t < p.n_tiles; ++t) {
        blockIdx.y = t;
        for (unsigned int pix = 0; pix < plane; ++pix) {
            blockIdx.x = pix / 256;
            threadIdx.x = pix % 256;
            kernels[which](tiles, p, out);
        }
    }
    return 0;
}

// gf_photo (kernels/photo.cu) with its barriers as sequence points: each
// pass runs for threads 0..GF_PHOTO_THREADS in turn before the next, and
// the lane sum is reduced in the kernel's order.
template <typename E, bool NCHW>
static void gf_emu_photo_draw(const GfPhoto& d, const GfLaunch& l, typename E::T* out) {
    const unsigned int plane = l.out_w * l.out_h;
    const int cpos = gf_contrast_at(d);
    float mean = 0.0f;
    if (cpos >= 0) {
        float lanes[GF_PHOTO_THREADS];
        for (unsigned int t = 0; t < GF_PHOTO_THREADS; ++t) lanes[t] = gf_photo_pre(d, plane, t, cpos);
        for (unsigned int k = GF_PHOTO_THREADS / 2; k > 0; k >>= 1)
            for (unsigned int t = 0; t < k; ++t) lanes[t] = lanes[t] + lanes[t + k];
        mean = lanes[0] / (float)plane;
    }
    for (unsigned int t = 0; t < GF_PHOTO_THREADS; ++t) gf_photo_post<E, NCHW>(d, l, t, cpos, mean, out);
    if (d.radius > 0) {
        for (unsigned int t = 0; t < GF_PHOTO_THREADS; ++t) gf_blur_rows(d, l, t);
        for (unsigned int t = 0; t < GF_PHOTO_THREADS; ++t) gf_blur_cols<E, NCHW>(d, l, t, out);
    }
}

template <typename E, bool NCHW>
static void gf_emu_photo_all(const GfPhoto* draws, GfLaunch l, void* out) {
    for (unsigned int i = 0; i < l.n_tiles; ++i)
        gf_emu_photo_draw<E, NCHW>(draws[i], l, (typename E::T*)out);
}

// Run photo kernel `which` (index into src/cuda/mod.rs PHOTO_KERNELS).
extern "C" int gf_emu_photo(int which, const GfPhoto* draws, GfLaunch l, void* out) {
    typedef void (*GfPhotoRun)(const GfPhoto*, GfLaunch, void*);
    static const GfPhotoRun kernels[8] = {
        gf_emu_photo_all<GfU8, true>,   gf_emu_photo_all<GfU8, false>,
        gf_emu_photo_all<GfF16, true>,  gf_emu_photo_all<GfF16, false>,
        gf_emu_photo_all<GfBF16, true>, gf_emu_photo_all<GfBF16, false>,
        gf_emu_photo_all<GfF32, true>,  gf_emu_photo_all<GfF32, false>,
    };
    if (which < 0 || which >= 8) return -1;
    kernels[which](draws, l, out);
    return 0;
}

// Run mix kernel `which` (index into src/cuda/mod.rs MIX_KERNELS) over a
// grid of (ceil(3 * plane / 256), ceil(n / 2)) blocks of 256 threads.
extern "C" int gf_emu_mix(int which, GfMix m, void* out) {
    typedef void (*GfMixKernel)(GfMix, void*);
    static const GfMixKernel kernels[8] = {
        [](GfMix m, void* o) { gf_mix_u8_nchw(m, (unsigned char*)o); },
        [](GfMix m, void* o) { gf_mix_u8_nhwc(m, (unsigned char*)o); },
        [](GfMix m, void* o) { gf_mix_f16_nchw(m, (unsigned short*)o); },
        [](GfMix m, void* o) { gf_mix_f16_nhwc(m, (unsigned short*)o); },
        [](GfMix m, void* o) { gf_mix_bf16_nchw(m, (unsigned short*)o); },
        [](GfMix m, void* o) { gf_mix_bf16_nhwc(m, (unsigned short*)o); },
        [](GfMix m, void* o) { gf_mix_f32_nchw(m, (float*)o); },
        [](GfMix m, void* o) { gf_mix_f32_nhwc(m, (float*)o); },
    };
    if (which < 0 || which >= 8) return -1;
    const unsigned int n = 3 * m.out_w * m.out_h;
    blockDim.x = 256;
    blockDim.y = blockDim.z = 1;
    for (unsigned int i = 0; i < (m.n + 1) / 2; ++i) {
        blockIdx.y = i;
        for (unsigned int e = 0; e < n; ++e) {
            blockIdx.x = e / 256;
            threadIdx.x = e % 256;
            kernels[which](m, out);
        }
    }
    return 0;
}

// Whether gf_emu_progressive runs a block's warps at once
// (GPUFEED_EMU_THREADS=1).
static bool gf_emu_threads() {
    static const bool on = [] {
        const char* v = std::getenv("GPUFEED_EMU_THREADS");
        return v != nullptr && v[0] == '1';
    }();
    return on;
}

// gf_progressive over a grid of n blocks (one per chain) of GF_SCAN_WARPS_MAX
// warps, as many as any chain can use: per block, each phase between the
// kernel's barriers (gf_chain_begin, gf_chain_scans, gf_chain_end) for
// every thread in turn, as the barriers order them on a GPU. Within the
// scans' phase, each scan of a pipeline runs after the ones it waits for
// (lower warps), or with GPUFEED_EMU_THREADS=1 every warp's lane 0 (the
// only lane with work) on a thread of its own, all at once. The chains
// share no output, so their order does not matter.
extern "C" void gf_emu_progressive(const GfChain* chains, unsigned int n, const GfScan* scans,
                                   unsigned int n_scans, const GfHuff* tables,
                                   unsigned int n_tables, unsigned int* status) {
    blockDim.x = 32 * GF_SCAN_WARPS_MAX;
    blockDim.y = blockDim.z = 1;
    blockIdx.y = blockIdx.z = threadIdx.y = threadIdx.z = 0;
    auto each = [](auto&& f) {
        for (unsigned int t = 0; t < blockDim.x; ++t) {
            threadIdx.x = t;
            f();
        }
    };
    for (unsigned int i = 0; i < n; ++i) {
        blockIdx.x = i;
        GfChainBlock sh;
        each([&] { gf_chain_begin(sh, chains, scans, n_scans, status, i); });
        if (gf_emu_threads()) {
            const GfDim3 dim = blockDim, idx = blockIdx;
            std::vector<std::thread> warps;
            for (unsigned int w = 0; w < GF_SCAN_WARPS_MAX; ++w) {
                warps.emplace_back([&, w] {
                    blockDim = dim;
                    blockIdx = idx;
                    threadIdx = GfDim3{32 * w, 0, 0};
                    gf_chain_scans(sh, chains, scans, tables, n_tables, i);
                });
            }
            for (auto& t : warps) t.join();
        } else {
            each([&] { gf_chain_scans(sh, chains, scans, tables, n_tables, i); });
        }
        each([&] { gf_chain_end(sh, status, i); });
    }
}

// The split kernels' four steps over their grids (one thread per
// subsequence, or per chain for gf_split_check), each step after the last,
// as the stream orders them on a GPU. redone[c] (n of them): how many of
// chain c's subsequences gf_split_check decoded again, the rounds having
// left them out of step (a start it changed; not a restart scan's record
// that had no interval of its own to start at, ok = 0, which the check
// only gives its predecessor's end).
extern "C" void gf_emu_split(GfSplit p, unsigned int* redone) {
    blockDim.x = 32;
    blockDim.y = blockDim.z = 1;
    blockIdx.y = blockIdx.z = threadIdx.y = threadIdx.z = 0;
    auto each = [](unsigned int n, auto&& f) {
        for (unsigned int t = 0; t < n; ++t) {
            blockIdx.x = t / 32;
            threadIdx.x = t % 32;
            f();
        }
    };
    each(p.n_subs, [&] { gf_split_guess(p); });
    for (unsigned int r = 0; r < p.rounds; ++r) each(p.n_subs, [&] { gf_split_round(p, r); });
    const GfSync* sync = (const GfSync*)p.sync + (size_t)(p.rounds & 1) * p.n_subs;
    std::vector<GfAt> before(p.n_subs);
    for (unsigned int t = 0; t < p.n_subs; ++t) before[t] = sync[t].from;
    each(p.n, [&] { gf_split_check(p); });
    const unsigned int* first = (const unsigned int*)p.sub_first;
    for (unsigned int c = 0; c < p.n; ++c) {
        redone[c] = 0;
        for (unsigned int t = first[c]; t < first[c + 1] && t < p.n_subs; ++t) {
            const GfAt &a = before[t], &b = sync[t].from;
            redone[c] += a.ok && (a.pos != b.pos || a.u != b.u || a.k != b.k);
        }
    }
    each(p.n_subs, [&] { gf_split_write(p); });
}

// gf_idct over ceil(blocks / 64) blocks of 64 threads, one after another.
extern "C" void gf_emu_idct(const GfPlane* planes, unsigned int n, unsigned int blocks) {
    blockDim.x = 64;
    blockDim.y = blockDim.z = 1;
    blockIdx.y = blockIdx.z = threadIdx.y = threadIdx.z = 0;
    for (unsigned int b = 0; b < blocks; ++b) {
        blockIdx.x = b / 64;
        threadIdx.x = b % 64;
        gf_idct(planes, n, blocks);
    }
}

// gf_color over a grid of (ceil(width * height / 256), images).
extern "C" void gf_emu_color(const GfColor* images, unsigned int n) {
    blockDim.x = 256;
    blockDim.y = blockDim.z = 1;
    blockIdx.z = threadIdx.y = threadIdx.z = 0;
    for (unsigned int i = 0; i < n; ++i) {
        blockIdx.y = i;
        const unsigned int px = images[i].width * images[i].height;
        for (unsigned int t = 0; t < px; ++t) {
            blockIdx.x = t / 256;
            threadIdx.x = t % 256;
            gf_color(images);
        }
    }
}

extern "C" unsigned short gf_emu_f16(float v) { return gf_emu_f32_to_f16(v); }
