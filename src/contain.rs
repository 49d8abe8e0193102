//! Panics in third-party decoders, contained to the sample that caused
//! them.
//!
//! A decoder fed hostile bytes is the most likely place for a bug; a panic
//! there must cost one sample, not the training run, and must not print
//! as if the program had crashed: it is counted and reported once, as the
//! sample's [`SampleError::Panic`](crate::error::SampleError::Panic), with
//! the file's name (issue 15). The process's panic hook stays as it was
//! for every other panic.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;

thread_local! {
    /// Set while this thread runs a contained call.
    static CONTAINED: Cell<bool> = const { Cell::new(false) };
}

/// Run `f`; a panic inside it becomes `Err(message)`, printed by no one.
pub(crate) fn contained<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !CONTAINED.with(Cell::get) {
                previous(info);
            }
        }));
    });
    let outer = CONTAINED.with(|c| c.replace(true));
    let r = catch_unwind(AssertUnwindSafe(f));
    CONTAINED.with(|c| c.set(outer));
    r.map_err(|p| message(&*p))
}

/// The text of a panic payload.
pub(crate) fn message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_contained_panic_is_its_message() {
        let r: Result<(), String> = super::contained(|| panic!("bad huffman {}", 7));
        assert_eq!(r.unwrap_err(), "bad huffman 7");
        assert_eq!(super::contained(|| 5).unwrap(), 5);
    }
}
