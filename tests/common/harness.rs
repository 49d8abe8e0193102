//! The test runner of the integration tests that hold tests a machine may
//! be unable to run (no GPU, no NVRTC, no corpus): libtest-mimic, so that
//! such a test shows as `ignored, <reason>` in the runner's own summary
//! instead of `ok` (issue 15). It takes libtest's arguments (filters,
//! `--list`, `--ignored`, `--test-threads`, ...), so `cargo test` and
//! `cargo nextest` drive it as usual. Unlike libtest it does not capture a
//! test's output.

#![allow(unused_macros)]

use libtest_mimic::{Arguments, Completion, Trial};

/// Why a test did not run on this machine.
#[derive(Debug)]
pub(crate) struct NotRun(pub(crate) String);

/// What a test body returns when it may not be able to run here.
pub(crate) type Outcome = Result<(), NotRun>;

/// A test body's result: `()` (ran) or an [`Outcome`].
pub(crate) trait IntoOutcome {
    fn into_outcome(self) -> Outcome;
}

impl IntoOutcome for () {
    fn into_outcome(self) -> Outcome {
        Ok(())
    }
}

impl IntoOutcome for Outcome {
    fn into_outcome(self) -> Outcome {
        self
    }
}

/// A test's name and body.
pub(crate) type Test = (&'static str, fn() -> Outcome);

/// Run `tests` (name, body) with libtest's command line and exit. A body
/// that panics fails; one that returns `Err(NotRun)` is ignored with the
/// reason.
pub(crate) fn run(tests: Vec<Test>, serial: bool) -> ! {
    let (argv, filters) = split_filters(std::env::args().collect());
    let mut args = Arguments::from_iter(argv);
    if serial {
        args.test_threads = Some(1);
    }
    let exact = args.exact;
    let trials = tests
        .into_iter()
        .filter(|(name, _)| {
            filters.is_empty()
                || filters.iter().any(|f| {
                    if exact {
                        name == f
                    } else {
                        name.contains(f.as_str())
                    }
                })
        })
        .map(|(name, body)| {
            Trial::ignorable_test(name, move || match body() {
                Ok(()) => Ok(Completion::Completed),
                Err(NotRun(why)) => Ok(Completion::ignored_with(why)),
            })
        })
        .collect();
    libtest_mimic::run(&args, trials).exit()
}

/// libtest takes several filters (`test-x a b` runs the tests matching
/// either); libtest-mimic only one. So the filters are taken out of the
/// command line here and applied before it: the arguments without them,
/// and the filters.
fn split_filters(argv: Vec<String>) -> (Vec<String>, Vec<String>) {
    // libtest's options that take a value as the next argument.
    const VALUED: [&str; 5] = [
        "--test-threads",
        "--logfile",
        "--skip",
        "--color",
        "--format",
    ];
    let mut rest = Vec::with_capacity(argv.len());
    let mut filters = Vec::new();
    let mut value_next = false;
    for (i, a) in argv.into_iter().enumerate() {
        if i == 0 || value_next || a.starts_with('-') {
            value_next = VALUED.contains(&a.as_str());
            rest.push(a);
        } else {
            filters.push(a);
        }
    }
    (rest, filters)
}

/// `tests!(a, b, #[cfg(feature = "x")] c)` writes the `main` of a test
/// file whose `Cargo.toml` entry has `harness = false`: every listed
/// function (returning `()` or [`Outcome`]) is one test.
macro_rules! tests {
    ($($(#[$meta:meta])* $test:ident),* $(,)?) => {
        $crate::common::harness::main!(false, $($(#[$meta])* $test),*);
    };
}
pub(crate) use tests;

/// [`tests!`] for tests that measure the whole process (threads, RSS):
/// they run one at a time whatever `--test-threads` says.
macro_rules! serial_tests {
    ($($(#[$meta:meta])* $test:ident),* $(,)?) => {
        $crate::common::harness::main!(true, $($(#[$meta])* $test),*);
    };
}
pub(crate) use serial_tests;

macro_rules! main {
    ($serial:expr, $($(#[$meta:meta])* $test:ident),*) => {
        fn main() {
            let mut tests: Vec<$crate::common::harness::Test> = Vec::new();
            $(
                $(#[$meta])*
                tests.push((stringify!($test), || {
                    $crate::common::harness::IntoOutcome::into_outcome($test())
                }));
            )*
            $crate::common::harness::run(tests, $serial)
        }
    };
}
pub(crate) use main;
