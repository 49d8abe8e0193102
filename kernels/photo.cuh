// Descriptor of one draw for the photometric kernels (kernels/photo.cu),
// mirrored by src/cuda/desc.rs (#[repr(C)] GfPhoto); sizes and offsets are
// checked on both sides: change them together. The launch constants are
// augment.cuh's GfLaunch (antialias unused).
#pragma once

// Threads per block, one block per draw. The contrast mean's summation
// order depends on it and is part of the specification
// (src/augment/photo_cpu.rs, LANES).
#define GF_PHOTO_THREADS 256
// Blur taps by distance from the centre: radius + 1 <= GF_PHOTO_TAPS
// (src/augment/photo.rs, MAX_TAPS).
#define GF_PHOTO_TAPS 32

#define GF_PHOTO_GRAY 1u
#define GF_PHOTO_SOLARIZE 2u
#define GF_PHOTO_ERASE 4u
#define GF_PHOTO_NOISE 8u

// The host folds every draw into this: the jitter's order and factors, the
// blur's taps, the thresholds and the erased rectangle. The kernel only
// applies them.
struct GfPhoto {
    unsigned long long src;    // device address: f32 planes R, G, B (out_h x out_w), 0..255
    unsigned long long tmp;    // device address: f32 planes of the same size (blur rows)
    unsigned long long dst;    // element offset of the draw in the output
    unsigned long long noise;  // seed of the erasing noise
    unsigned int ops;          // jitter op ids in order, 4 bits each from bit 0
    unsigned int n_ops;        // jitter ops (0..=4)
    float factor[4];           // factor of the k-th op in order
    unsigned int flags;        // GF_PHOTO_*
    float threshold;           // solarize threshold, 0..255 units
    float erase_value;         // constant erasing value, output units
    unsigned int radius;       // blur radius; 0: no blur
    unsigned int erase[4];     // erased rectangle x, y, w, h (output pixels)
    float taps[GF_PHOTO_TAPS]; // blur weight at distance d
};

// No padding: the size is the sum of the members (factor at 40, taps at
// 88), as desc.rs asserts.
static_assert(sizeof(GfPhoto) == 216, "GfPhoto layout changed: update src/cuda/desc.rs");
static_assert(sizeof(GfPhoto) == 4 * 8 + 2 * 4 + 4 * 4 + 4 * 4 + 4 * 4 + GF_PHOTO_TAPS * 4,
              "GfPhoto has padding");
