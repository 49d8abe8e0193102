//! A lane's buffers kept at the lanes' [`Marks`] between calls
//! (`cuda::lanes::Tend`, issue 16, item 5).

use std::sync::Arc;

use cudarc::driver::{CudaStream, DeviceRepr, ValidAsZeroBits};

use super::{Buffers, Grown, OTHERS, STAGING};
use crate::error::{Error, Result};

impl<T: DeviceRepr + ValidAsZeroBits> Grown<T> {
    /// Grown to `n` elements where fewer (none: left as it is).
    pub(super) fn tended(&mut self, stream: &Arc<CudaStream>, n: usize) -> Result<()> {
        if n > 0 {
            self.marked(stream, n)?;
        }
        Ok(())
    }

    pub(super) fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |b| b.len())
    }
}

impl Buffers {
    /// The other buffers' sizes for the lanes' [`Marks`], in the order
    /// [`tend`](Self::tend) reads them: the staging's bytes, the
    /// descriptors' elements.
    fn others(&self) -> [usize; OTHERS] {
        [
            self.staging.bytes(),
            self.chains.len(),
            self.scans.len(),
            self.tables.len(),
            self.planes.len(),
            self.colors.len(),
            self.status.len(),
            self.sub_first.len(),
            self.sync.len(),
        ]
    }

    /// Note this lane's buffers in the lanes' marks, after a call.
    pub(crate) fn note(&self) {
        self.marks.note(self.others());
    }

    /// The lanes' marks' generation ([`Marks::generation`]).
    pub(crate) fn generation(&self) -> u64 {
        self.marks.generation()
    }

    /// Grow every buffer to the lanes' marks, between calls (on the lane's
    /// thread, its stream idle): a lane idle while the others met larger
    /// calls holds what they hold before its next call (issue 16, item 5:
    /// nothing grows after the first epoch).
    pub(crate) fn tend(&mut self) -> Result<()> {
        let s = self.stream.clone();
        self.ctx
            .bind_to_thread()
            .map_err(Error::cuda("bind context"))?;
        let ([bytes, coefs], o) = self.marks.current();
        self.data.tended(&s, bytes)?;
        self.coef.tended(&s, coefs)?;
        self.samples.tended(&s, coefs)?;
        self.staging.reserve(&self.ctx, o[STAGING])?;
        self.chains.tended(&s, o[1])?;
        self.scans.tended(&s, o[2])?;
        self.tables.tended(&s, o[3])?;
        self.planes.tended(&s, o[4])?;
        self.colors.tended(&s, o[5])?;
        self.status.tended(&s, o[6])?;
        self.sub_first.tended(&s, o[7])?;
        self.sync.tended(&s, o[8])
    }
}
