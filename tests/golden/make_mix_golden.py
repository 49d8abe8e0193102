#!/usr/bin/env python3
"""Golden outputs for mixup / cutmix (src/augment/mix.rs tests, issue 19),
computed with timm's own functions (timm.data.mixup):

  * rand_bbox + the lambda correction of cutmix_bbox_and_lam, for fixed
    box centres (np.random.randint patched to return them);
  * Mixup._mix_batch on a fixed float32 batch for a fixed lambda, mixup and
    cutmix (_params_per_batch and the box patched), i.e. the images timm
    returns;
  * mixup_target (soft labels with label smoothing).

Run: pip install torch timm numpy && python3 make_mix_golden.py > mix.json
"""
import json
from unittest import mock

import numpy as np
import timm
import timm.data.mixup as tm
import torch

boxes = []
for (h, w, lam, cy, cx) in [(24, 32, 0.7, 3, 30), (24, 32, 0.25, 12, 16), (7, 5, 0.9, 6, 0),
                            (224, 224, 0.123, 200, 17), (10, 10, 0.0, 5, 5)]:
    with mock.patch.object(np.random, "randint", side_effect=[cy, cx]):
        (yl, yh, xl, xh), lam_out = tm.cutmix_bbox_and_lam((1, 3, h, w), lam)
    boxes.append({"h": h, "w": w, "lam": lam, "cy": cy, "cx": cx,
                  "box": [int(yl), int(yh), int(xl), int(xh)], "lam_out": float(lam_out)})

N, C, H, W = 5, 3, 6, 7  # odd: the middle sample mixes with itself
g = torch.Generator().manual_seed(0)
x = (torch.rand((N, C, H, W), generator=g) * 4 - 2).to(torch.float32)
labels = torch.tensor([3, 0, 7, 3, 9])

cases = []
for name, lam, cut, smoothing in [("mixup_0.3", 0.3, None, 0.1), ("mixup_0.91", 0.91, None, 0.0),
                                  ("cutmix", 0.6, (1, 5, 2, 6), 0.1)]:
    m = tm.Mixup(mixup_alpha=1.0, cutmix_alpha=1.0, label_smoothing=smoothing, num_classes=10)
    xx = x.clone()
    with mock.patch.object(m, "_params_per_batch", return_value=(lam, cut is not None)):
        if cut is None:
            lam_used = m._mix_batch(xx)
        else:
            box = cut
            area = (box[1] - box[0]) * (box[3] - box[2])
            corrected = 1.0 - area / float(H * W)
            with mock.patch.object(tm, "cutmix_bbox_and_lam", return_value=(box, corrected)):
                lam_used = m._mix_batch(xx)
    y = tm.mixup_target(labels, 10, lam_used, smoothing)
    cases.append({"name": name, "lam": float(lam_used), "box": list(cut) if cut else None,
                  "smoothing": smoothing, "classes": 10,
                  "x": xx.reshape(-1).tolist(), "y": y.reshape(-1).tolist()})

print(json.dumps({"timm": timm.__version__, "boxes": boxes, "shape": [N, C, H, W],
                  "x": x.reshape(-1).tolist(), "labels": labels.tolist(), "cases": cases}))
