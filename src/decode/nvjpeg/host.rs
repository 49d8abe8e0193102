//! Single images decoded on the GPU and copied back: the hook the GPU tests
//! compare against the CPU decoder, for each nvJPEG route.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream, DevicePtrMut};

use super::Roi;
use super::batched::{BatchedDecoder, Dest};
use super::decoupled::DecoupledDecoder;
use crate::error::{Error, Result};

/// Which nvJPEG route a [`HostDecoder`] takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The NVJPG hardware engine (batched API, one image per batch).
    Hardware,
    /// CUDA through the batched API (host Huffman): the pipeline's CUDA
    /// route until the decoupled API replaced it; kept as a reference.
    CudaBatched,
    /// CUDA through the decoupled API: host Huffman on this thread, GPU
    /// Huffman for large images; crop windows supported.
    CudaDecoupled,
}

enum Inner {
    Batched(BatchedDecoder),
    Decoupled(DecoupledDecoder),
}

/// Decodes single JPEGs on CUDA device 0 through one nvJPEG [`Route`] and
/// copies them back. One decoder, stream and context for all calls:
/// creating a hardware decoder (handle, state, pre-allocated pool) per
/// image costs more than the decode.
pub struct HostDecoder {
    // Field order is drop order: the decoder before the stream and context
    // it ran on.
    dec: Inner,
    route: Route,
    stream: Arc<CudaStream>,
    ctx: Arc<CudaContext>,
}

impl std::fmt::Debug for HostDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostDecoder")
            .field("route", &self.route)
            .finish_non_exhaustive()
    }
}

impl HostDecoder {
    /// A decoder for `route`; an error without a device, nvJPEG, or (for
    /// [`Route::Hardware`]) the engine.
    pub fn new(route: Route) -> Result<HostDecoder> {
        let drv = Error::cuda("decoder stream");
        let ctx = crate::cuda::context(0)?;
        let stream = ctx.new_stream().map_err(drv)?;
        let dec = match route {
            Route::Hardware => Inner::Batched(BatchedDecoder::new(true, 1, None)?),
            Route::CudaBatched => Inner::Batched(BatchedDecoder::new(false, 1, None)?),
            Route::CudaDecoupled => Inner::Decoupled(DecoupledDecoder::new(&ctx, 2, None)?),
        };
        Ok(HostDecoder {
            dec,
            route,
            stream,
            ctx,
        })
    }

    /// Decode the whole image (RGB, 8-bit). Dimensions are the header's.
    pub fn decode(&mut self, data: &[u8]) -> Result<crate::decode::Image> {
        self.run(data, None)
    }

    /// Decode only the window `(x, y, width, height)` (nvJPEG's ROI; the
    /// hardware engine and the decoupled CUDA route): the GPU tests compare
    /// it with a crop of the full decode. An error when the route, or this
    /// nvJPEG, cannot decode the window. As in the pipeline, a progressive
    /// image is decoded whole and the window cut from it (nvJPEG's windows
    /// of a damaged progressive file corrupted its heap on an H200).
    pub fn decode_window(
        &mut self,
        data: &[u8],
        (x, y, w, h): (u32, u32, u32, u32),
    ) -> Result<crate::decode::Image> {
        self.run(data, Some(Roi { x, y, w, h }))
    }

    /// Whether the last decode's Huffman decoding ran on the GPU (the
    /// decoupled route's `GPU_HYBRID` decoder, for baseline images of 1 MP
    /// and more); `false` on the other routes.
    pub fn gpu_huffman(&self) -> bool {
        match &self.dec {
            Inner::Decoupled(d) => d.last_gpu_huffman(),
            Inner::Batched(_) => false,
        }
    }

    fn run(&mut self, data: &[u8], want: Option<Roi>) -> Result<crate::decode::Image> {
        let header = crate::jpeg::parse_header(data, crate::jpeg::DEFAULT_MAX_PIXELS)
            .map_err(|e| Error::Device(format!("header: {e}")))?;
        if let Some(r) = want
            && (r.w == 0 || r.h == 0 || r.x + r.w > header.width || r.y + r.h > header.height)
        {
            return Err(Error::Device(format!("window {r:?} outside the image")));
        }
        // The window nvJPEG decodes: padded as the pipeline pads it
        // (`super::window`), then cropped to `want` on the host.
        let size = (header.width, header.height);
        let mcu = super::mcu_size(&header);
        let progressive = header.sof == crate::jpeg::SofKind::Progressive;
        let roi = want
            .filter(|_| super::takes_window(progressive))
            .map(|r| super::padded_window(r, size, mcu))
            .filter(|r| self.route != Route::Hardware || super::engine_takes_window(*r, size, mcu));
        let (w, h) = roi.map_or(size, |r| (r.w, r.h));
        let (w, h) = (w as usize, h as usize);
        let drv = Error::cuda("decode into a buffer");
        let stream = &self.stream;
        let mut buf = stream.alloc_zeros::<u8>(w * h * 3).map_err(drv)?;
        if let Inner::Batched(dec) = &mut self.dec {
            if roi.is_some() && self.route != Route::Hardware {
                return Err(Error::Device(
                    "window not supported by the batched CUDA decoder".into(),
                ));
            }
            if self.route == Route::Hardware {
                // What the engine's own query accepts but decodes wrongly
                // (the pipeline's workers check the same).
                let support = super::hardware_takes(&header)
                    .then(|| dec.hardware_support(data, roi))
                    .flatten();
                match support {
                    None => {
                        return Err(Error::Device(
                            "not supported by the hardware decoder".into(),
                        ));
                    }
                    Some(used) if used != roi => {
                        return Err(Error::Device(
                            "window not supported by the hardware decoder".into(),
                        ));
                    }
                    Some(_) => {}
                }
            }
        }
        {
            let (ptr, _record) = buf.device_ptr_mut(stream);
            self.ctx.bind_to_thread().map_err(drv)?;
            let dest = Dest { ptr, pitch: w * 3 };
            // SAFETY: `buf` holds w * h * 3 bytes (pitch w * 3, h rows: the
            // window's size with a ROI) and outlives the synchronize below,
            // as does `data`; the context was bound to this thread above.
            unsafe {
                match &mut self.dec {
                    Inner::Batched(dec) => {
                        dec.decode(&[data], &[dest], &[roi], stream.cu_stream().cast())
                    }
                    Inner::Decoupled(dec) => dec.decode(data, size, dest, roi, stream),
                }
            }?;
        }
        stream.synchronize().map_err(drv)?;
        let data = stream.clone_dtoh(&buf).map_err(drv)?;
        let decoded = crate::decode::Image {
            width: w as u32,
            height: h as u32,
            data,
        };
        let whole = Roi {
            x: 0,
            y: 0,
            w: size.0,
            h: size.1,
        };
        Ok(match want {
            Some(want) => crop(&decoded, want, roi.unwrap_or(whole)),
            None => decoded,
        })
    }
}

/// Window `want` (image coordinates) of `img`, which holds window `at`.
fn crop(img: &crate::decode::Image, want: Roi, at: Roi) -> crate::decode::Image {
    let inside = Roi {
        x: want.x - at.x,
        y: want.y - at.y,
        ..want
    };
    crate::decode::Image {
        width: want.w,
        height: want.h,
        data: img.window_rows(inside).flatten().copied().collect(),
    }
}
