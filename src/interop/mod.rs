//! Handing batches to other frameworks without a copy (issue 17).

pub mod dlpack;
