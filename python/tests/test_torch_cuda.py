"""gpufeed's Python bindings on the CUDA backend, through PyTorch's DLPack
consumer (issue 17): `torch.from_dlpack` of a CUDA batch is the pipeline's
device memory (same address, no copy) and equals the CPU backend's batch
within the kernel tolerances of tests/device_stage.rs.

Not run without torch or a CUDA device (skipped, with the reason); with
GPUFEED_REQUIRE_GPU=1 that is a failure instead. CI has neither. Runs
under pytest, or alone where pytest is missing (the GPU box):
`python3 python/tests/test_torch_cuda.py` exits non-zero on a failure.
"""

import gc
import os
import pathlib
import sys

try:
    import pytest
except ImportError:  # the GPU box may lack pytest: see __main__
    pytest = None

SAMPLE = pathlib.Path(__file__).resolve().parents[2] / "data" / "sample"
REQUIRE = os.environ.get("GPUFEED_REQUIRE_GPU") == "1"


class NotRun(Exception):
    """A test that cannot run here, outside pytest."""


def not_run(reason):
    if REQUIRE:
        raise AssertionError(f"GPUFEED_REQUIRE_GPU=1 but {reason}")
    if pytest is not None:
        pytest.skip(reason)
    raise NotRun(reason)


def need_cuda():
    """torch with a CUDA device, and gpufeed."""
    try:
        import torch
    except ImportError:
        not_run("torch is not installed")
    if not torch.cuda.is_available():
        not_run("torch sees no CUDA device")
    import gpufeed

    return torch, gpufeed


def pipelines(gpufeed, **kw):
    """The same settings on the CUDA and the CPU backend."""
    kw.setdefault("batch_size", 4)
    kw.setdefault("size", 32)
    kw.setdefault("workers", 2)
    return (
        gpufeed.Pipeline(str(SAMPLE), device="cuda:0", **kw),
        gpufeed.Pipeline(str(SAMPLE), device="cpu", **kw),
    )


def test_cuda_batches_reach_torch_without_a_copy_and_match_the_cpu():
    torch, gpufeed = need_cuda()
    # CPU decoding on both, so the GPU kernels alone differ: tolerance as
    # in tests/device_stage.rs (f32 1e-4, f16 one step, labels exact).
    for dtype, tol in [("float32", 1e-4), ("float16", None)]:
        gpu, cpu = pipelines(gpufeed, dtype=dtype, gpu_decode=False)
        n = 0
        for epoch in range(2):
            for (gi, gl), (ci, cl) in zip(gpu.epoch(epoch), cpu.epoch(epoch)):
                assert gi.__dlpack_device__() == (2, 0)
                ptr = gi.data_ptr
                x = torch.from_dlpack(gi)
                assert x.is_cuda and x.device.index == 0
                assert x.data_ptr() == ptr, "torch copied the batch"
                want = torch.from_dlpack(ci)
                assert x.shape == want.shape and x.dtype == want.dtype
                got = x.cpu()
                if tol is not None:
                    bad = int(((got - want).abs() > tol).sum())
                else:
                    # One f16 step: compare the bit patterns.
                    a = got.view(torch.int16).int()
                    b = want.view(torch.int16).int()
                    bad = int(((a - b).abs() > 1).sum())
                assert bad == 0, f"{dtype}: {bad} elements outside the tolerance"
                assert torch.equal(torch.from_dlpack(gl).cpu(), torch.from_dlpack(cl))
                n += 1
        assert n == 14, n


def test_nvjpeg_batches_match_the_cpu_backend():
    torch, gpufeed = need_cuda()
    # Both nvJPEG routes (half the engine's images on CUDA); pixels differ
    # from the CPU decoder's, so per batch PSNR >= 30 dB over u8, as
    # tests/device_stage.rs holds the Rust side.
    kw = dict(dtype="uint8", normalize=False, layout="nhwc", hardware_decode_share=0.5)
    gpu, cpu = pipelines(gpufeed, **kw)
    worst = float("inf")
    for (gi, _), (ci, _) in zip(gpu.epoch(0), cpu.epoch(0)):
        a = torch.from_dlpack(gi).cpu().double()
        b = torch.from_dlpack(ci).double()
        mse = max(float(((a - b) ** 2).mean()), 1e-12)
        worst = min(worst, 10 * torch.log10(torch.tensor(255.0 ** 2 / mse)).item())
    print(f"nvJPEG batches against the CPU backend: worst {worst:.1f} dB")
    assert worst >= 30.0, worst


def test_a_cuda_tensor_outlives_the_pipeline():
    torch, gpufeed = need_cuda()
    p, _ = pipelines(gpufeed, dtype="float32", shuffle=False)
    epoch = p.epoch(0)
    images, labels = next(epoch)
    x = torch.from_dlpack(images)
    want = x.clone()
    del epoch
    for e in range(1, 4):
        assert sum(1 for _ in p.epoch(e)) == 7
    p.close()
    del p
    gc.collect()
    torch.cuda.synchronize()
    assert torch.equal(x, want)


def test_a_thousand_cuda_batches_do_not_pile_up():
    torch, gpufeed = need_cuda()
    # Each batch's slot goes back when torch frees its tensor; a slot kept
    # would stall the pipeline within its few slots, long before 1,000.
    p = gpufeed.Pipeline(str(SAMPLE), device="cuda:0", batch_size=28, size=16, prefetch=1)
    n = 0
    for e in range(1000):
        for images, _ in p.epoch(e):
            torch.from_dlpack(images)
            n += 1
    assert n == 1000


if __name__ == "__main__":
    failed = 0
    for name, f in sorted(globals().items()):
        if not (name.startswith("test_") and callable(f)):
            continue
        try:
            f()
            print(f"{name} ... ok")
        except NotRun as e:
            print(f"{name} ... not run: {e}")
        except Exception as e:  # report every test, then fail
            failed += 1
            print(f"{name} ... FAILED: {e!r}")
    sys.exit(1 if failed else 0)
