// Descriptors shared by the host (src/cuda/desc.rs, #[repr(C)]) and the
// augment kernels. Field order, sizes and offsets are checked on both sides;
// change them together.
#pragma once

// One output tile: one view draw of one sample. Geometry follows the CPU
// reference (src/augment/cpu.rs): output pixel o on an axis samples source
// coordinate start + max(0, (o + offset + 0.5) * scale - 0.5), clamped to
// [start, start + len - 1]; the triangle filter replaces the two bilinear
// taps where scale > 1 and antialias is on. Flips are folded by the host
// into (dst0, step): output pixel o is written at dst0 + step * o.
struct GfAxis {
    unsigned int start;   // first source pixel of the region
    unsigned int len;     // source pixels in the region (>= 1)
    float scale;          // source pixels per output pixel
    float offset;         // output-pixel offset into the resized region
    int dst0;             // destination of output pixel 0
    int step;             // +1, or -1 when flipped
};

struct GfTile {
    unsigned long long src;        // device pointer: RGB8, interleaved
    unsigned long long dst;        // element offset of the tile in the output
    unsigned int src_pitch;        // bytes per source row
    unsigned int src_height;       // rows of the source image
    GfAxis x;
    GfAxis y;
};

// Per-launch constants: output size, filter, folded normalization
// (value * scale[c] + shift[c], unfused, like the CPU reference).
struct GfLaunch {
    unsigned int out_w;
    unsigned int out_h;
    unsigned int antialias;
    unsigned int n_tiles;
    float scale[3];
    float shift[3];
};

// NVRTC has no offsetof without headers; the sizes below equal the sums of
// the member sizes, so there is no padding and every offset follows (x at
// 24, y at 48 in GfTile; scale at 16 in GfLaunch), as desc.rs asserts.
static_assert(sizeof(GfAxis) == 24, "GfAxis layout changed: update src/cuda/desc.rs");
static_assert(sizeof(GfTile) == 72, "GfTile layout changed: update src/cuda/desc.rs");
static_assert(sizeof(GfLaunch) == 40, "GfLaunch layout changed: update src/cuda/desc.rs");
static_assert(sizeof(GfTile) == 8 + 8 + 4 + 4 + 2 * sizeof(GfAxis), "GfTile has padding");
static_assert(sizeof(GfLaunch) == 4 * 4 + 3 * 4 + 3 * 4, "GfLaunch has padding");
