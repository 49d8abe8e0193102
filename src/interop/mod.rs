//! Handing batches to other frameworks without a copy (issue 17).

#[cfg(feature = "candle")]
pub mod candle;
pub mod dlpack;
