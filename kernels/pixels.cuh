// Descriptors shared by the host (src/cuda/progressive.rs, #[repr(C)]) and
// the coefficients-to-pixels kernels (pixels.cu). Field order, sizes and
// offsets are checked on both sides; change them together.
#pragma once

// One component plane: its DCT coefficients (progressive.cu's output) and
// where its 8-bit samples go, a grid of stride x rows blocks of 8x8.
struct GfPlane {
    unsigned long long coef;   // device pointer: int16 blocks of 64, natural order
    unsigned long long out;    // device pointer: samples, stride * 8 bytes per row
    unsigned int stride;       // blocks per grid row
    unsigned int rows;         // grid rows
    unsigned int first;        // index of the plane's first block among the launch's
    unsigned int pad;
    short quant[64];           // dequantization, natural order (libjpeg-turbo's 16-bit multipliers)
};

// One image's colour conversion: three sample planes (one for grayscale)
// upsampled to the image's size, converted to RGB8 interleaved.
struct GfColor {
    unsigned long long plane[3];  // device pointers to the planes' samples
    unsigned long long out;       // device pointer: RGB8, out_pitch bytes per row
    unsigned int pitch[3];        // bytes per plane row
    unsigned int dw[3];           // samples across that hold the image (downsampled_width)
    unsigned int dh[3];           // rows that hold it (downsampled_height)
    unsigned int out_pitch;
    unsigned int width, height;
    unsigned char mode[3];        // GF_UP_* per plane
    unsigned char he[3], ve[3];   // GF_UP_REPLICATE factors
    unsigned char color;          // GF_COLOR_*
    unsigned char pad[6];
};

// NVRTC has no offsetof without headers; the sizes below equal the sums of
// the member sizes, so there is no padding and every offset follows
// (quant at 32 in GfPlane; pitch at 32 in GfColor), as progressive.rs
// asserts.
static_assert(sizeof(GfPlane) == 160, "GfPlane layout changed: update src/cuda/progressive.rs");
static_assert(sizeof(GfColor) == 96, "GfColor layout changed: update src/cuda/progressive.rs");
static_assert(sizeof(GfPlane) == 8 + 8 + 4 * 4 + 64 * 2, "GfPlane has padding");
static_assert(sizeof(GfColor) == 3 * 8 + 8 + 3 * 4 * 3 + 3 * 4 + 10 + 6, "GfColor has padding");

// Upsampling per plane, as libjpeg-turbo chooses it with fancy upsampling
// on (jdsample.c, jinit_upsampler).
#define GF_UP_FULL 0        // same size as the image
#define GF_UP_H2V1 1        // twice as wide: triangle filter across
#define GF_UP_H1V2 2        // twice as tall: triangle filter down
#define GF_UP_H2V2 3        // both: triangle filter both ways
#define GF_UP_REPLICATE 4   // integer factors he x ve: each sample repeated

// Colour of the planes (jdapimin.c, default_decompress_parms).
#define GF_COLOR_GRAY 0
#define GF_COLOR_YCC 1
#define GF_COLOR_RGB 2
