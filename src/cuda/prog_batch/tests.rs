//! How a batch's files reach the device: each byte once, where the
//! layout puts it, from the readers' blocks or the staging.

use super::{Marks, Upload, staging_len, uploads};

/// Replays `uploads` on the host: the device buffer it fills, and the
/// staging it reads (the unpinned files packed in order).
fn replay(files: &[Vec<u8>], pinned: &[bool]) -> (Vec<u8>, usize) {
    let lens: Vec<usize> = files.iter().map(Vec::len).collect();
    let (ups, staged) = uploads(&lens, pinned);
    let packed: Vec<u8> = files
        .iter()
        .zip(pinned)
        .filter(|(_, p)| !**p)
        .flat_map(|(f, _)| f.iter().copied())
        .collect();
    assert_eq!(packed.len(), staged);
    let mut device = vec![0u8; lens.iter().sum()];
    let mut written = vec![false; device.len()];
    for u in ups {
        let (from, at) = match u {
            Upload::File { file, at } => {
                assert!(pinned[file] && !files[file].is_empty());
                (&files[file][..], at)
            }
            Upload::Staged { from, at, len } => {
                assert!(len > 0);
                (&packed[from..from + len], at)
            }
        };
        for (i, &b) in from.iter().enumerate() {
            assert!(!written[at + i], "byte {} written twice", at + i);
            written[at + i] = true;
            device[at + i] = b;
        }
    }
    assert!(written.iter().all(|&w| w));
    let copies = uploads(&lens, pinned).0.len();
    (device, copies)
}

#[test]
fn every_file_lands_where_the_layout_puts_it() {
    let files: Vec<Vec<u8>> = (0..7u8)
        .map(|i| vec![i + 1; [3, 0, 5, 1, 4, 2, 6][usize::from(i)]])
        .collect();
    let whole: Vec<u8> = files.concat();
    // Every choice of pinned files, the empty one (file 1) among them.
    for mask in 0..1u32 << files.len() {
        let pinned: Vec<bool> = (0..files.len()).map(|i| mask >> i & 1 == 1).collect();
        let (device, copies) = replay(&files, &pinned);
        assert_eq!(device, whole, "pinned {pinned:?}");
        // A copy per pinned file, and one per run of the others.
        let nonempty: Vec<bool> = files
            .iter()
            .zip(&pinned)
            .filter(|(f, _)| !f.is_empty())
            .map(|(_, &p)| p)
            .collect();
        let runs = nonempty
            .iter()
            .enumerate()
            .filter(|&(i, &p)| !p && (i == 0 || nonempty[i - 1]))
            .count();
        assert_eq!(copies, nonempty.iter().filter(|&&p| p).count() + runs);
    }
}

#[test]
fn nothing_pinned_is_one_staged_copy() {
    let (ups, staged) = uploads(&[10, 20, 30], &[false; 3]);
    assert_eq!(
        ups,
        vec![Upload::Staged {
            from: 0,
            at: 0,
            len: 60
        }]
    );
    assert_eq!(staged, 60);
    let (ups, staged) = uploads(&[10, 20], &[true; 2]);
    assert_eq!(
        ups,
        vec![
            Upload::File { file: 0, at: 0 },
            Upload::File { file: 1, at: 10 }
        ]
    );
    assert_eq!(staged, 0);
}

/// The repository's JPEGs that the kernels convert, as one batch through
/// the layout and copies a CUDA lane makes (every other file from a
/// "pinned" block): each image equal to the same file decoded alone.
#[cfg(feature = "kernel-emu")]
#[test]
fn a_batch_through_the_lane_layout_equals_each_file_alone() {
    use crate::cuda::pixels::{converts, emu_rgb};
    let files = crate::cuda::progressive::tests::repo_jpegs(converts);
    assert!(files.len() >= 10, "{}", files.len());
    let with: Vec<(&std::path::Path, &[u8])> =
        files.iter().map(|(p, d)| (p.as_path(), &d[..])).collect();
    for pinned in [
        vec![false; files.len()],
        vec![true; files.len()],
        (0..files.len()).map(|i| i % 3 == 1).collect(),
    ] {
        let batch = super::emu_rgb_batch(&with, &pinned, u64::MAX).unwrap();
        for ((path, data), got) in files.iter().zip(&batch) {
            let alone = emu_rgb(path, data, u64::MAX).unwrap();
            assert!(got.status.iter().all(|&s| s == 0), "{}", path.display());
            assert_eq!(got.status, alone.status, "{}", path.display());
            assert_eq!((got.width, got.height), (alone.width, alone.height));
            assert!(got.pixels == alone.pixels, "{}", path.display());
        }
    }
}

/// The lanes' shared marks: a call under them is raised to them, one
/// over them moves them to twice itself, from the first call on, so that
/// the buffers grow in the first calls and a later call passes them only
/// where it is more than twice every call before. Each rise, and only a
/// rise, changes the generation (the idle lanes' cue to grow).
#[test]
fn marks_grow_to_twice_the_call_and_raise_smaller_calls() {
    let m = Marks::default();
    let g0 = m.generation();
    assert_eq!(m.raise([100, 10]), [200, 20], "twice the first call");
    let g1 = m.generation();
    assert_ne!(g0, g1);
    assert_eq!(m.raise([50, 5]), [200, 20], "raised to the marks");
    assert_eq!(m.raise([190, 20]), [200, 20], "within the marks");
    assert_eq!(m.generation(), g1, "nothing rose");
    assert_eq!(m.raise([210, 20]), [420, 20], "twice the call");
    assert_eq!(m.raise([0, 35]), [420, 70]);
    assert_ne!(m.generation(), g1);
}

/// The other buffers' marks ([`Marks::note`]) rise to the largest any lane
/// noted, each on its own, and a rise changes the generation.
#[test]
fn noted_buffers_rise_to_the_largest() {
    let m = Marks::default();
    let g = m.generation();
    let mut a = [0; super::OTHERS];
    a[0] = 5;
    a[3] = 7;
    m.note(a);
    let g1 = m.generation();
    assert_ne!(g, g1);
    let mut b = [0; super::OTHERS];
    b[0] = 3;
    b[8] = 1;
    m.note(b);
    let (sizes, others) = m.current();
    assert_eq!(sizes, [0, 0]);
    assert_eq!((others[0], others[3], others[8]), (5, 7, 1));
    let g2 = m.generation();
    assert_ne!(g1, g2);
    m.note(a);
    assert_eq!(m.generation(), g2, "nothing rose");
}

/// Without a bound a call is one part, its marks raised as `raise` does.
#[test]
fn unbounded_marks_keep_a_call_whole() {
    let m = Marks::default();
    let p = m.parts(&[[10, 1], [20, 2], [30, 3]]);
    assert_eq!(p.calls, vec![0..3]);
    assert!(p.refused.is_empty());
    assert_eq!(p.grow, [120, 12]);
    assert_eq!(m.parts(&[[70, 1]]).grow, [120, 12], "within the marks");
    assert_eq!(m.parts(&[[130, 1]]).grow, [260, 12], "twice the call");
}

/// With a bound (`PipelineBuilder::kernel_memory_limit`, issue 16 item
/// 5), a call is cut into runs of its files that fit one after another,
/// a file that does not fit beside them is left out, and the marks never hold
/// more than the bound: doubling stops where it would pass it.
#[test]
fn bounded_marks_cut_calls_and_stay_within_the_bound() {
    // Each file holds 10 + 3 x 10 = 40 bytes; the bound 100 takes two.
    let m = Marks::bounded(100);
    let p = m.parts(&[[10, 10]; 5]);
    assert_eq!(p.calls, vec![0..2, 2..4, 4..5]);
    assert!(p.refused.is_empty());
    assert_eq!(p.grow, [20, 20], "doubled would be 40 + 120 bytes");
    assert!(Marks::held(p.grow) <= 100);
    // A file of 130 bytes alone is refused; the runs around it stay
    // apart, and the marks are as they were.
    let p = m.parts(&[[10, 10], [10, 40], [10, 10]]);
    assert_eq!(p.calls, vec![0..1, 2..3]);
    assert_eq!(p.refused, vec![1]);
    assert_eq!(p.grow, [20, 20]);
    // A run is cut where the buffers grown for the runs before would
    // pass the bound with it: [40, 0] fits alone (40 + 60 with the
    // coefficients' mark), [40, 0] + [40, 0] does not, [40, 0] + [0, 20]
    // does.
    let p = m.parts(&[[40, 0], [40, 0], [0, 20]]);
    assert_eq!(p.calls, vec![0..1, 1..3]);
    assert_eq!(p.grow, [40, 20]);
    assert!(Marks::held(p.grow) <= 100);
    // Every call after fits the marks it raised.
    for sizes in [[[1, 1]; 40], [[5, 0]; 40], [[0, 6]; 40]] {
        let p = m.parts(&sizes);
        assert!(p.refused.is_empty());
        for r in p.calls {
            let sum = sizes[r]
                .iter()
                .fold([0, 0], |a, s| [a[0] + s[0], a[1] + s[1]]);
            assert!(sum[0] <= p.grow[0] && sum[1] <= p.grow[1]);
        }
        assert!(Marks::held(p.grow) <= 100, "{:?}", p.grow);
    }
}

/// The staging grows to twice a part's bytes, within the room the marks
/// give, and never for a part that fits or has nothing to
/// pack; the emulated lanes count theirs by the same rule.
#[test]
fn staging_grows_to_twice_within_the_room() {
    assert_eq!(
        staging_len(0, 0, 100),
        0,
        "all read into page-locked blocks"
    );
    assert_eq!(staging_len(0, 10, 100), 20, "twice");
    assert_eq!(staging_len(10, 15, 100), 30, "twice");
    assert_eq!(staging_len(10, 15, 12), 15, "twice passes the room");
    assert_eq!(staging_len(60, 70, 100), 100, "twice, cut to the room");
    assert_eq!(staging_len(20, 15, 100), 20, "fits");
    assert_eq!(
        staging_len(usize::MAX / 2 + 1, usize::MAX, usize::MAX),
        usize::MAX
    );
}

mod marks_hold {
    use super::Marks;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// What the lanes rely on, over calls of any sizes by lanes that
        /// share the marks: each call's files are its runs and refusals,
        /// every file once and in order; a run fits the marks it raised;
        /// the marks stay within the bound; and a file is refused only
        /// where the buffers, as they end up, could not take it within
        /// the bound (so a refusal costs a route, never the bound).
        #[test]
        fn parts_cover_every_file_once_and_keep_the_bound(
            cap in 1usize..4_000,
            calls in prop::collection::vec(
                prop::collection::vec((0usize..600, 0usize..400), 0..24),
                1..8,
            ),
        ) {
            let m = Marks::bounded(cap);
            for call in calls {
                let sizes: Vec<[usize; 2]> = call.iter().map(|&(b, c)| [b, c]).collect();
                let p = m.parts(&sizes);
                let mut seen: Vec<usize> = p.calls.iter().flat_map(|r| r.clone()).collect();
                for r in &p.calls {
                    prop_assert!(!r.is_empty());
                    let sum = sizes[r.clone()]
                        .iter()
                        .fold([0, 0], |a, s| [a[0] + s[0], a[1] + s[1]]);
                    prop_assert!(sum[0] <= p.grow[0] && sum[1] <= p.grow[1]);
                }
                prop_assert!(seen.windows(2).all(|w| w[0] < w[1]), "runs in order");
                for &i in &p.refused {
                    let s = sizes[i];
                    let with = [p.grow[0].max(s[0]), p.grow[1].max(s[1])];
                    prop_assert!(Marks::held(with) > cap, "file {} refused: {:?}", i, s);
                }
                seen.extend(&p.refused);
                seen.sort_unstable();
                prop_assert_eq!(seen, (0..sizes.len()).collect::<Vec<_>>());
                prop_assert!(Marks::held(p.grow) <= cap, "{:?} past {}", p.grow, cap);
                prop_assert_eq!(m.raise([0, 0]), p.grow, "the marks as reported");
            }
        }
    }
}
