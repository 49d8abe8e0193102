#!/usr/bin/env python3
"""Golden outputs for the photometric ops' CPU reference
(src/augment/photo_cpu.rs tests, issue 19), computed with torchvision's
transforms.v2.functional on float32 images, the way a torchvision recipe
applies them after ToDtype(float32, scale=True).

Input: a 12x10 RGB image, pixel (x, y, c) = (x*41 + y*67 + c*97 + x*y*13) % 256,
far from smooth and with every hue sector present, given to torchvision as
value / 255. Expected values are written back in 0..255 units (CHW order),
except the erasing cases, which are in the normalized output's units.

Each case names the ops in the order applied, with fixed parameters (no
random draws: the draws are gpufeed's own, tested separately).

Run: pip install torch torchvision && python3 make_photo_golden.py > photo.json
"""
import json

import torch
import torchvision
from torchvision.transforms.v2 import functional as F

W, H = 12, 10
img = torch.tensor(
    [[[(x * 41 + y * 67 + c * 97 + x * y * 13) % 256 for x in range(W)] for y in range(H)]
     for c in range(3)],
    dtype=torch.float32,
)
MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def run(ops):
    x = img / 255.0
    for op in ops:
        kind, arg = op[0], op[1:]
        if kind == "brightness":
            x = F.adjust_brightness(x, arg[0])
        elif kind == "contrast":
            x = F.adjust_contrast(x, arg[0])
        elif kind == "saturation":
            x = F.adjust_saturation(x, arg[0])
        elif kind == "hue":
            x = F.adjust_hue(x, arg[0])
        elif kind == "grayscale":
            x = F.rgb_to_grayscale(x, num_output_channels=3)
        elif kind == "blur":
            x = F.gaussian_blur(x, [arg[0], arg[0]], [arg[1], arg[1]])
        elif kind == "solarize":
            x = F.solarize(x, arg[0])
        elif kind == "normalize":
            x = F.normalize(x, MEAN, STD) / 255.0  # undone by the * 255 below
        elif kind == "erase":
            i, j, h, w, v = arg
            x = F.erase(x, i, j, h, w, torch.tensor(v / 255.0))
        else:
            raise ValueError(kind)
    return (x * 255.0).reshape(-1).tolist()


cases = [
    ("brightness_up", [("brightness", 1.3)]),
    ("brightness_down", [("brightness", 0.6)]),
    ("contrast_up", [("contrast", 1.4)]),
    ("contrast_down", [("contrast", 0.5)]),
    ("saturation_up", [("saturation", 1.6)]),
    ("saturation_down", [("saturation", 0.3)]),
    ("hue_plus", [("hue", 0.1)]),
    ("hue_minus", [("hue", -0.37)]),
    ("hue_half", [("hue", 0.5)]),
    # ColorJitter's randperm order 2, 0, 3, 1: contrast last, so its mean is
    # the mean of the image the other three made.
    ("jitter_s_b_h_c", [("saturation", 1.3), ("brightness", 1.2), ("hue", 0.05),
                        ("contrast", 0.7)]),
    ("jitter_c_h_b_s", [("contrast", 1.5), ("hue", -0.2), ("brightness", 1.4),
                        ("saturation", 0.0)]),
    ("grayscale", [("grayscale",)]),
    ("blur_5_1.3", [("blur", 5, 1.3)]),
    ("blur_9_0.6", [("blur", 9, 0.6)]),
    ("blur_19_2.0", [("blur", 19, 2.0)]),
    ("solarize_half", [("solarize", 0.5)]),
    ("dino_view", [("brightness", 1.25), ("contrast", 0.8), ("saturation", 1.1),
                   ("hue", 0.03), ("grayscale",), ("blur", 7, 1.1), ("solarize", 0.5)]),
    ("normalize_erase", [("normalize",), ("erase", 2, 3, 4, 5, 0.0)]),
    ("jitter_blur_normalize_erase", [("hue", 0.2), ("contrast", 1.2), ("blur", 3, 0.8),
                                     ("normalize",), ("erase", 0, 7, 10, 3, 0.5)]),
]

out = {
    "torchvision": torchvision.__version__,
    "width": W,
    "height": H,
    "pixels": img.reshape(-1).tolist(),  # CHW
    "mean": MEAN,
    "std": STD,
    "cases": [
        {"name": name, "ops": [list(op) for op in ops],
         "expected": [round(v, 5) for v in run(ops)]}
        for name, ops in cases
    ],
}
print(json.dumps(out))
