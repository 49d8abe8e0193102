"""gpufeed: decoded, augmented image batches for training.

Batches come as ``(images, labels)`` tensors that any DLPack consumer takes
without a copy::

    import gpufeed, torch
    p = gpufeed.Pipeline("imagenet/train", batch_size=256, dtype="float16")
    for epoch in range(90):
        for images, labels in p.epoch(epoch):
            x = torch.from_dlpack(images)   # [256, 3, 224, 224], on the GPU
            y = torch.from_dlpack(labels)   # uint32, on the CPU
"""

from ._gpufeed import Epoch, Error, Pipeline, Tensor

__all__ = ["Pipeline", "Epoch", "Tensor", "Error"]
