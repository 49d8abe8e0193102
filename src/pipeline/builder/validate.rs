//! The checks of `PipelineBuilder::build()` that need no device: each
//! setting's range, the views, mixup against the source, and whether the
//! batch buffers fit the host's memory (issue 15).

use super::{Device, PipelineBuilder};
use crate::augment::{DType, Transform, View};
use crate::error::{Error, Result};
use crate::sampler::Sampler;
use crate::source::Source;

impl PipelineBuilder {
    /// Check every setting without starting anything (no device, no
    /// threads, no allocation): the errors [`build`](Self::build) would
    /// give for these settings, save those only a device can tell. For
    /// tools that validate several configurations before running any.
    pub fn check(&self) -> Result<()> {
        self.validate().map(drop)
    }

    /// The sample order of these settings over `source`.
    pub(super) fn sampler(&self, source: &Source) -> Result<Sampler> {
        let sampler = Sampler::new(
            source.len(),
            self.seed,
            self.shuffle,
            self.rank,
            self.world_size,
            self.shard_mode,
        )?;
        match self.stream_buffer {
            None => Ok(sampler),
            Some(buffer) => {
                let sizes = source.shard_sizes().ok_or_else(|| {
                    Error::Config("stream_shards needs a Source::webdataset source".into())
                })?;
                sampler.stream_shards(&sizes, buffer)
            }
        }
    }

    /// The checks of `build()` that need no device; returns the views.
    pub(super) fn validate(&self) -> Result<Vec<View>> {
        let bad = |m: String| Err(Error::Config(m));
        let Some(source) = &self.source else {
            return bad("no source: call .source(Source::image_folder(..)?)".into());
        };
        self.sampler(source)?;
        if self.batch_size == 0 {
            return bad("batch_size must be at least 1".into());
        }
        for (what, n) in [("readers", Some(self.readers)), ("workers", self.workers)] {
            if let Some(n) = n
                && !(1..=MAX_THREADS).contains(&n)
            {
                return bad(format!("{what} {n} outside 1..={MAX_THREADS}"));
            }
        }
        if !(1..=MAX_PREFETCH).contains(&self.prefetch) {
            return bad(format!(
                "prefetch {} outside 1..={MAX_PREFETCH}",
                self.prefetch
            ));
        }
        let views = self.views.clone().unwrap_or_else(|| {
            vec![View {
                height: self.size.0,
                width: self.size.1,
                transform: self.transform,
                flip_h: self.flip_h.unwrap_or(self.transform.default_flip_h()),
                flip_v: self.flip_v,
                count: 1,
                photo: Default::default(),
            }]
        });
        if views.is_empty() {
            return bad("views: at least one view is needed".into());
        }
        for v in &views {
            check_view(v).map_err(Error::Config)?;
        }
        if let Some(m) = &self.mixup {
            if let Some(e) = m.check() {
                return bad(e);
            }
            if views.len() != 1 || views[0].count != 1 {
                return bad("mixup: needs a single view with one draw per sample".into());
            }
            let classes = source.classes().len();
            if classes > m.num_classes {
                return bad(format!(
                    "mixup: num_classes {} but the source has {classes} classes",
                    m.num_classes
                ));
            }
        }
        if self.dtype == DType::U8 && self.normalize.is_some() {
            return bad(
                "u8 output holds raw 0..=255 values: set .normalize(None) or a float \
                 dtype"
                    .into(),
            );
        }
        if let Some(n) = self.normalize
            && (n.std.iter().any(|&s| !s.is_finite() || s <= 0.0)
                || n.mean.iter().any(|m| !m.is_finite()))
        {
            return bad(format!("normalize std must be positive and finite: {n:?}"));
        }
        if let Some(b) = self.staging_bytes
            && !(1..=1 << 40).contains(&b)
        {
            return bad(format!("staging_bytes {b} outside 1..=2^40"));
        }
        if !(1..=MAX_IN_FLIGHT).contains(&self.in_flight) {
            return bad(format!(
                "batches_in_flight {} outside 1..={MAX_IN_FLIGHT}",
                self.in_flight
            ));
        }
        if self.engine_call > MAX_ENGINE_CALL {
            return bad(format!(
                "engine_call_images {} above {MAX_ENGINE_CALL}",
                self.engine_call
            ));
        }
        if self.decoder_memory < MIN_DECODER_MEMORY {
            return bad(format!(
                "decoder_memory_limit {} below {MIN_DECODER_MEMORY} bytes (1 MiB)",
                self.decoder_memory
            ));
        }
        if self.kernel_memory < MIN_DECODER_MEMORY {
            return bad(format!(
                "kernel_memory_limit {} below {MIN_DECODER_MEMORY} bytes (1 MiB)",
                self.kernel_memory
            ));
        }
        if !(0.0..=1.0).contains(&self.hardware_share) {
            return bad(format!(
                "hardware_decode_share {} outside 0..=1",
                self.hardware_share
            ));
        }
        if self.max_pixels == 0 {
            return bad("max_pixels must be at least 1".into());
        }
        // Issue 15: a configuration whose buffers cannot fit is refused
        // here, with the bytes it needs, not ended by the OOM killer later.
        // (`Device::Auto` is counted as the CPU backend: the larger.)
        let buffers = crate::pipeline::host_memory::fixed_host_bytes(
            self.batch_size,
            &views,
            self.dtype,
            self.prefetch,
            !matches!(self.device, Device::Cuda(_)),
            self.staging_bytes
                .unwrap_or(self.batch_size.saturating_mul(256 << 10)),
        );
        if let Some(available) = crate::pipeline::host_memory::mem_available()
            && buffers > available
        {
            return bad(format!(
                "this configuration needs {buffers} bytes ({:.1} GiB) of host memory for its \
                 batch buffers, more than the {available} bytes ({:.1} GiB) available: lower \
                 batch_size, the output size, the views or prefetch",
                buffers as f64 / (1u64 << 30) as f64,
                available as f64 / (1u64 << 30) as f64
            ));
        }
        Ok(views)
    }
}

/// Reader or worker threads allowed: far above any machine's cores, low
/// enough that a typo (`--workers 10000`) is refused instead of starting
/// ten thousand threads.
const MAX_THREADS: usize = 1024;

/// Batches made ahead allowed.
const MAX_PREFETCH: usize = 64;

/// Batches decoding at once allowed: each holds a decode arena.
const MAX_IN_FLIGHT: usize = 16;

/// The largest `engine_call_images`: a batch's worth and more.
const MAX_ENGINE_CALL: usize = 1 << 16;

/// The smallest `decoder_memory_limit`: below a mebibyte not even a small
/// photo's buffers fit, and every image would go to the CPU.
const MIN_DECODER_MEMORY: u64 = 1 << 20;

fn check_view(v: &View) -> std::result::Result<(), String> {
    let (h, w) = (v.height, v.width);
    if h == 0 || w == 0 || h > 16384 || w > 16384 {
        return Err(format!("output size {h}x{w} outside 1..=16384"));
    }
    if v.count == 0 || v.count > 64 {
        return Err(format!("view count {} outside 1..=64", v.count));
    }
    if let Some(e) = v.photo.check(w, h) {
        return Err(e);
    }
    for p in [v.flip_h, v.flip_v] {
        if !(0.0..=1.0).contains(&p) {
            return Err(format!("flip probability {p} outside 0..=1"));
        }
    }
    match v.transform {
        Transform::Resize => {}
        Transform::RandomResizedCrop { scale, ratio } => {
            if !(scale.0 > 0.0 && scale.0 <= scale.1 && scale.1.is_finite()) {
                return Err(format!(
                    "RandomResizedCrop scale {scale:?}: need 0 < lo <= hi"
                ));
            }
            if !(ratio.0 > 0.0 && ratio.0 <= ratio.1 && ratio.1.is_finite()) {
                return Err(format!(
                    "RandomResizedCrop ratio {ratio:?}: need 0 < lo <= hi"
                ));
            }
        }
        Transform::CenterCrop { resize } => {
            if resize == 0 {
                return Err("CenterCrop resize must be at least 1".into());
            }
        }
    }
    Ok(())
}
