//! Tests of the launch descriptors: tables shared, chains split and
//! ordered, and (emulated) a batch decoded as its files alone.

use super::*;

/// The descriptors of a baseline file and its progressive twin.
fn two_files() -> Launch {
    let files: [&[u8]; 2] = [
        include_bytes!("../../../tests/data/go/video-001.jpeg"),
        include_bytes!("../../../tests/data/go/video-001.progressive.jpeg"),
    ];
    let mut l = Launch::default();
    for f in files {
        let p = plan(f, u64::MAX).unwrap();
        l.push(&p, 0, f.len(), &[0; 4]);
    }
    l
}

#[test]
fn a_launch_holds_each_table_once() {
    let files: [&[u8]; 2] = [
        include_bytes!("../../../tests/data/go/video-001.jpeg"),
        include_bytes!("../../../tests/data/go/video-001.progressive.jpeg"),
    ];
    let plans: Vec<Plan> = files.iter().map(|f| plan(f, u64::MAX).unwrap()).collect();
    let mut l = Launch::default();
    for _ in 0..3 {
        for (p, f) in plans.iter().zip(files) {
            assert!(l.push(p, 0, f.len(), &[0; 4]));
        }
    }
    // Every table once, whatever the files repeat.
    let mut distinct: Vec<&Folded> = Vec::new();
    for t in plans.iter().flat_map(|p| &p.tables) {
        if !distinct.contains(&t) {
            distinct.push(t);
        }
    }
    assert_eq!(l.tables.len(), distinct.len());
    assert!(l.tables.len() < 3 * plans.iter().map(|p| p.tables.len()).sum::<usize>());
    // Each scan names the table its plan names.
    let mut scans = l.scans.iter();
    for (p, _) in (0..3).flat_map(|_| plans.iter().zip(files)) {
        for chain in p.chains() {
            for i in chain {
                let g = scans.next().unwrap();
                for (k, &(_, dc, ac)) in p.scans[i].comps.iter().enumerate() {
                    for (got, want) in [(g.dc[k], dc), (g.ac[k], ac)] {
                        if want == u16::MAX {
                            assert_eq!(got, u16::MAX);
                        } else {
                            assert!(same(
                                &l.tables[usize::from(got)],
                                &p.tables[usize::from(want)]
                            ));
                        }
                    }
                }
            }
        }
    }
    assert!(scans.next().is_none());
}

/// One launch over the repository's JPEGs (sharing tables: the
/// hopper photos have the same four) decodes each as a launch of its
/// own does.
#[cfg(feature = "kernel-emu")]
#[test]
fn a_batch_decodes_each_file_as_alone() {
    let files = repo_jpegs(|_| true);
    assert!(files.len() >= 10, "{}", files.len());
    let with: Vec<(&Path, &[u8])> = files.iter().map(|(p, d)| (p.as_path(), &d[..])).collect();
    let batch = emu_coefficients_batch(&with, u64::MAX).unwrap();
    for ((path, data), got) in files.iter().zip(&batch) {
        let alone = emu_coefficients(path, data, u64::MAX).unwrap();
        assert!(got.status.iter().all(|&s| s == 0), "{}", path.display());
        assert_eq!(got.status, alone.status, "{}", path.display());
        assert!(got.comps == alone.comps, "{}", path.display());
    }
}

#[test]
fn a_launch_refuses_a_file_past_its_table_indices() {
    let f = include_bytes!("../../../tests/data/go/video-001.progressive.jpeg");
    let p = plan(f, u64::MAX).unwrap();
    let n = p.tables.len();
    assert!(n >= 2);
    let mut l = Launch::default();
    let blank = GfHuff {
        look: [0; 512],
        maxcode: [0; 18],
        valoff: [0; 18],
        symbols: [0; 256],
    };
    // Room for n - 1 more: refused, nothing added.
    l.tables = vec![blank; usize::from(u16::MAX) - n + 1];
    let before = (l.tables.len(), l.chains.len(), l.scans.len());
    assert!(!l.push(&p, 0, f.len(), &[0; 4]));
    assert_eq!((l.tables.len(), l.chains.len(), l.scans.len()), before);
    // Room for n: taken, the last index u16::MAX - 1.
    l.tables.pop();
    assert!(l.push(&p, 0, f.len(), &[0; 4]));
    assert_eq!(l.tables.len(), usize::from(u16::MAX));
}

#[test]
fn only_long_sequential_scans_are_split() {
    let mut l = two_files();
    // The baseline file's one chain: one scan, Ss 0 to Se 63.
    let seq = l.scans[l.chains[0].first_scan as usize];
    assert_eq!((l.chains[0].scans, seq.ss, seq.se), (1, 0, 63));
    let first = l.split(64);
    assert_eq!(first.len(), l.chains.len() + 1);
    assert_eq!(first[1], seq.length.div_ceil(64));
    // The progressive file's chains are not split, nor is anything at
    // 0 bytes, or at a size that leaves one subsequence.
    assert!(first[1..].iter().all(|&f| f == first[1]));
    assert!(l.split(0).iter().all(|&f| f == 0));
    assert!(l.split(seq.length).iter().all(|&f| f == 0));
    // Restart intervals split too (session 50: each starts a guess that
    // is exact), but not a second scan of the chain's, nor a band.
    l.scans[l.chains[0].first_scan as usize].restart = 4;
    assert_eq!(l.split(64), first);
    // One interval: a thread would decode it whole, twice.
    let mcus = l.chains[0].mcus_x * l.chains[0].mcus_y;
    l.scans[l.chains[0].first_scan as usize].restart = mcus;
    assert!(l.split(64).iter().all(|&f| f == 0));
    l.scans[l.chains[0].first_scan as usize].restart = mcus - 1;
    assert_eq!(l.split(64), first);
    l.scans[l.chains[0].first_scan as usize].se = 5;
    assert!(l.split(64).iter().all(|&f| f == 0));
}

#[test]
fn longest_chains_launch_first_and_statuses_come_back_in_push_order() {
    let mut l = two_files();
    let pushed = l.chains.clone();
    let work = |l: &Launch, c: &GfChain| -> u64 {
        let s = &l.scans[c.first_scan as usize..][..c.scans as usize];
        s.iter().map(|s| u64::from(s.length)).sum()
    };
    let order = l.longest_first();
    // A permutation, each launched chain the one pushed at `order[i]`,
    // in order of falling work.
    let mut seen = order.clone();
    seen.sort_unstable();
    assert_eq!(seen, (0..pushed.len() as u32).collect::<Vec<_>>());
    for (c, &from) in l.chains.iter().zip(&order) {
        assert_eq!(c.first_scan, pushed[from as usize].first_scan);
    }
    assert!(
        l.chains
            .windows(2)
            .all(|w| work(&l, &w[0]) >= work(&l, &w[1]))
    );
    // The baseline file's one chain holds all of its data, more than
    // any chain of the progressive file: launched first.
    assert_eq!(order[0], 0);
    // Launched chain i reports the index it was pushed at.
    assert_eq!(
        unpermute(&order, &order),
        (0..pushed.len() as u32).collect::<Vec<_>>()
    );
}

/// The repository's JPEGs (`tests/data`) that plan, and whose plan
/// `keep` takes, in name order.
#[cfg(feature = "kernel-emu")]
pub(crate) fn repo_jpegs(keep: impl Fn(&Plan) -> bool) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut files = Vec::new();
    for sub in ["go", "pillow"] {
        for e in std::fs::read_dir(dir.join(sub)).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_some_and(|x| x == "jpg" || x == "jpeg") {
                let data = std::fs::read(&path).unwrap();
                if plan(&data, u64::MAX).is_ok_and(|p| keep(&p)) {
                    files.push((path, data));
                }
            }
        }
    }
    files.sort();
    files
}
