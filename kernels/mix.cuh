// Launch constants of the mixup / cutmix kernels (kernels/mix.cu), mirrored
// by src/cuda/desc.rs (#[repr(C)] GfMix); sizes checked on both sides.
#pragma once

struct GfMix {
    unsigned int n;       // images in the batch (sample i pairs with n - 1 - i)
    unsigned int out_w;   // image width
    unsigned int out_h;   // image height
    unsigned int cut;     // 1: cutmix (swap inside box), 0: mixup
    float lam;            // lambda
    float rest;           // 1 - lambda, rounded once on the host
    unsigned int box[4];  // cutmix box x0, y0, x1, y1 (half-open)
};

static_assert(sizeof(GfMix) == 40, "GfMix layout changed: update src/cuda/desc.rs");
