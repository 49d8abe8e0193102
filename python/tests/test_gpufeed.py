"""gpufeed's Python bindings on the CPU backend, through NumPy's DLPack
consumer (CI has no torch). Run: pytest python/tests (after
`pip install` of the wheel maturin builds from python/)."""

import gc
import os
import pathlib

import numpy as np
import pytest

import gpufeed

SAMPLE = pathlib.Path(__file__).resolve().parents[2] / "data" / "sample"


def pipeline(**kw):
    kw.setdefault("batch_size", 4)
    kw.setdefault("size", 32)
    kw.setdefault("device", "cpu")
    kw.setdefault("workers", 2)
    return gpufeed.Pipeline(str(SAMPLE), **kw)


def test_batches_are_numpy_arrays_without_a_copy():
    p = pipeline(dtype="float32")
    assert len(p) == 7
    n = 0
    for images, labels in p.epoch(0):
        assert images.__dlpack_device__() == (1, 0)
        ptr = images.data_ptr
        x = np.from_dlpack(images)
        assert x.ctypes.data == ptr, "NumPy copied the batch"
        y = np.from_dlpack(labels)
        assert x.shape == (4, 3, 32, 32) and x.dtype == np.float32
        assert y.dtype == np.uint32 and y.shape == (4,)
        assert set(y.tolist()) <= {0, 1, 2, 3}
        # Normalized with the ImageNet statistics: about zero-centred.
        assert -3.0 < float(x.mean()) < 3.0
        n += len(y)
    assert n == 28


def test_float16_nhwc_and_uint8():
    p = pipeline(dtype="float16", layout="nhwc")
    images, _ = next(iter(p.epoch(0)))
    x = np.from_dlpack(images)
    assert x.dtype == np.float16 and x.shape == (4, 32, 32, 3)
    p = pipeline(dtype="uint8", normalize=False)
    images, _ = next(iter(p.epoch(0)))
    x = np.from_dlpack(images)
    assert x.dtype == np.uint8 and x.max() > 100


def test_arrays_outlive_the_epoch_and_the_pipeline():
    p = pipeline(dtype="float32", shuffle=False)
    epoch = p.epoch(0)
    images, labels = next(epoch)
    x = np.from_dlpack(images)
    y = np.from_dlpack(labels)
    want = x.copy()
    want_y = y.copy()
    del epoch
    for e in range(1, 3):
        assert sum(1 for _ in p.epoch(e)) == 7
    p.close()
    del p
    gc.collect()
    np.testing.assert_array_equal(x, want)
    np.testing.assert_array_equal(y, want_y)


def test_same_seed_same_batches():
    a = [np.from_dlpack(i).copy() for i, _ in pipeline(seed=7).epoch(3)]
    b = [np.from_dlpack(i).copy() for i, _ in pipeline(seed=7).epoch(3)]
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_a_tensor_is_exported_once():
    images, _ = next(iter(pipeline().epoch(0)))
    np.from_dlpack(images)
    with pytest.raises(BufferError):
        np.from_dlpack(images)


def test_stats():
    p = pipeline()
    for _ in p.epoch(0):
        pass
    s = p.stats()
    assert s["samples"] == 28 and s["batches"] == 7
    assert s["errors"]["corrupt"] == 0
    # No hardware engine on the CPU backend.
    assert s["engine_busy_s"] == 0.0
    assert s["progressive_busy_s"] == 0.0
    assert s["decoder_allocations"] == 0
    assert s["decoder_pinned_wait_s"] == 0.0
    assert s["lanes_stopped"] == 0
    # The CPU backend holds no pinned or device pools and no nvJPEG; its
    # host buffers hold at least one photo's bytes and one decoded photo.
    m = dict(s["memory"])
    assert m.pop("read_buffer_bytes") > 1000
    assert m.pop("worker_scratch_bytes") > 3 * 64 * 64
    assert m == dict(
        pinned_bytes=0,
        device_bytes=0,
        slots=0,
        decoder_pinned_bytes=0,
        decoder_device_bytes=0,
        decoder_peak_bytes=0,
        kernel_device_bytes=0,
        read_buffer_pinned_bytes=0,
    )


def test_stats_in_the_middle_of_an_epoch():
    # Read while the pipeline's thread waits to hand over the next batch
    # (this used to wait for the epoch's end, which never came).
    p = pipeline()
    for i, _ in enumerate(p.epoch(0)):
        if i == 1:
            assert p.stats()["batches"] >= 2
    p.close()
    with pytest.raises(gpufeed.Error, match="closed"):
        p.stats()


def test_errors_name_the_file(tmp_path):
    with pytest.raises(gpufeed.Error, match="nonexistent"):
        gpufeed.Pipeline(str(tmp_path / "nonexistent"))
    for c in ["a", "b"]:
        (tmp_path / c).mkdir()
        (tmp_path / c / "x.jpg").write_bytes(b"not a jpeg")
    p = gpufeed.Pipeline(str(tmp_path), device="cpu", size=16, batch_size=2)
    with pytest.raises(gpufeed.Error, match="x.jpg"):
        for _ in p.epoch(0):
            pass
    with pytest.raises(ValueError, match="device"):
        pipeline(device="tpu")


def test_nvjpeg_settings_are_checked_and_ignored_on_the_cpu():
    # The CUDA backend's decode settings (issue 16): validated by the
    # builder everywhere, without effect on the CPU backend's batches.
    with pytest.raises(gpufeed.Error, match="batches_in_flight"):
        pipeline(batches_in_flight=0)
    with pytest.raises(gpufeed.Error, match="hardware_decode_share"):
        pipeline(hardware_decode_share=1.5)
    with pytest.raises(gpufeed.Error, match="decoder_memory_limit"):
        pipeline(decoder_memory_limit=1000)
    with pytest.raises(gpufeed.Error, match="kernel_memory_limit"):
        pipeline(kernel_memory_limit=1000)
    with pytest.raises(ValueError, match="auto"):
        pipeline(hardware_decode_share="sometimes")
    steered = pipeline(hardware_decode_share="auto")
    for (a, _), (b, _) in zip(steered.epoch(0), pipeline().epoch(0)):
        assert np.array_equal(np.from_dlpack(a), np.from_dlpack(b))
    tuned = pipeline(
        gpu_decode=False,
        hardware_decode_share=0.5,
        batches_in_flight=2,
        decoder_memory_limit=64 << 20,
        kernel_memory_limit=64 << 20,
    )
    plain = pipeline()
    for (a, la), (b, lb) in zip(tuned.epoch(0), plain.epoch(0)):
        assert np.array_equal(np.from_dlpack(a), np.from_dlpack(b))
        assert np.array_equal(np.from_dlpack(la), np.from_dlpack(lb))


def test_a_thousand_batches_do_not_pile_up():
    # Every batch's buffers go back when its arrays are collected.
    p = pipeline(batch_size=28, size=16, prefetch=1)
    n = 0
    for e in range(1000):
        for images, labels in p.epoch(e):
            np.from_dlpack(images)
            n += 1
    assert n == 1000


def pack(tmp_path, per_shard):
    """WebDataset shards of the sample set, as `gpufeed pack` writes them:
    KEY.jpg + KEY.cls per sample, in the folder's order."""
    import tarfile

    classes = sorted(d for d in SAMPLE.iterdir() if d.is_dir())
    files = [(f, label) for label, d in enumerate(classes)
             for f in sorted(d.rglob("*")) if f.suffix.lower() == ".jpg"]
    shards = []
    for n in range(0, len(files), per_shard):
        path = tmp_path / f"shard-{n // per_shard:06d}.tar"
        with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as t:
            for i, (f, label) in enumerate(files[n:n + per_shard], start=n):
                t.add(f, arcname=f"{i:09d}.jpg")
                cls = tmp_path / "cls"
                cls.write_text(str(label))
                t.add(cls, arcname=f"{i:09d}.cls")
        shards.append(str(path))
    return shards


def test_shards_give_the_folder_s_batches_and_stream(tmp_path):
    shards = pack(tmp_path, 8)
    kw = dict(batch_size=4, size=32, device="cpu", workers=2)
    folder = [(np.from_dlpack(i).copy(), np.from_dlpack(l).copy())
              for i, l in gpufeed.Pipeline(str(SAMPLE), **kw).epoch(0)]
    wds = [(np.from_dlpack(i).copy(), np.from_dlpack(l).copy())
           for i, l in gpufeed.Pipeline(shards=shards, **kw).epoch(0)]
    assert len(folder) == len(wds) == 7
    for (a, la), (b, lb) in zip(folder, wds):
        assert np.array_equal(la, lb) and np.array_equal(a, b)
    streamed = gpufeed.Pipeline(shards=shards, stream_shards=4, **kw)
    labels = np.concatenate([np.from_dlpack(l) for _, l in streamed.epoch(0)])
    assert sorted(labels.tolist()) == sorted(np.concatenate([l for _, l in folder]).tolist())
    with pytest.raises(ValueError):
        gpufeed.Pipeline(str(SAMPLE), shards=shards)


def test_dino_recipe_gives_every_view():
    p = pipeline(recipe="dino", batch_size=2, dtype="float16")
    images, labels = next(iter(p.epoch(0)))
    assert isinstance(images, tuple) and len(images) == 3
    shapes = [np.from_dlpack(v).shape for v in images]
    assert shapes == [(2, 3, 224, 224), (2, 3, 224, 224), (16, 3, 96, 96)]
    assert np.from_dlpack(labels).shape == (2,)
    with pytest.raises(ValueError, match="dino"):
        pipeline(recipe="mocov9")


def test_mixup_gives_soft_labels():
    p = pipeline(mixup=4, dtype="float32")
    for images, labels in p.epoch(0):
        y = np.from_dlpack(labels)
        assert y.dtype == np.float32 and y.shape == (len(y), 4)
        assert np.allclose(y.sum(axis=1), 1.0, atol=1e-5)
        # Label smoothing 0.1 over 4 classes: no entry below 0.025.
        assert float(y.min()) >= 0.025 - 1e-6
        assert np.from_dlpack(images).shape[0] == len(y)
    with pytest.raises(gpufeed.Error, match="num_classes"):
        pipeline(mixup=3)


def emulated(**kw):
    """A pipeline on the emulated device (a wheel built with the
    `kernel-emu` feature, as CI's is): the device stage's slots, without a
    GPU. Not run on a wheel without it, unless GPUFEED_REQUIRE_EMULATED=1
    makes that a failure."""
    try:
        return pipeline(device="emulated", **kw)
    except ValueError as e:
        if "emulated" not in str(e) or os.environ.get("GPUFEED_REQUIRE_EMULATED") == "1":
            raise
        pytest.skip("this wheel has no emulated device (built without kernel-emu)")


def test_a_held_batch_leaves_the_other_slots_to_the_epochs():
    # prefetch=2: three slots. The trainer keeps one batch and holds one
    # more while it asks for the next, as a Rust trainer does; the thread
    # between them must not hold a third (it ran one batch ahead and
    # found every slot lent: Error::SlotsHeld, H200, 2026-11-27).
    p = emulated(dtype="float32", shuffle=False)
    epoch = p.epoch(0)
    images, _ = next(epoch)
    x = np.from_dlpack(images)
    want = x.copy()
    del epoch
    for e in range(1, 6):
        assert sum(1 for _ in p.epoch(e)) == 7
    p.close()
    gc.collect()
    assert np.array_equal(x, want)


def test_a_trainer_that_holds_every_slot_gets_an_error_not_a_hang():
    p = emulated(prefetch=1)
    held = []
    with pytest.raises(gpufeed.Error, match="slots are held by the trainer"):
        for images, _ in p.epoch(0):
            held.append(np.from_dlpack(images))
    assert len(held) == 2


def test_starting_an_epoch_ends_the_open_one():
    p = emulated()
    first = p.epoch(0)
    next(first)
    # The open epoch kept the pipeline's thread waiting on it, and the
    # next epoch's start waited for that thread.
    assert sum(1 for _ in p.epoch(1)) == 7
    assert list(first) == []


def test_closing_ends_the_open_epoch():
    p = emulated()
    open_epoch = p.epoch(0)
    next(open_epoch)
    # The thread waited for the open epoch's next ask: close() joined it.
    p.close()
    assert list(open_epoch) == []
