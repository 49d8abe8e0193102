//! The planner against hand-made files and the repository's: tables,
//! chains, markers libjpeg refuses, every cut and flip.

use super::*;

const PROGRESSIVE: &[u8] = include_bytes!("../../../tests/data/go/video-001.progressive.jpeg");

#[test]
fn folds_the_standard_luminance_dc_table() {
    // T.81 Table K.3: 0 is "00", 1..=5 are "010".."110", then one code
    // each of lengths 4 to 9, all ones but the last bit.
    let mut bits = [0u8; 17];
    bits[1..].copy_from_slice(&[0, 1, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0]);
    let vals: Vec<u8> = (0..12).collect();
    let t = fold(&bits, &vals).unwrap();
    assert!(t.look[..128].iter().all(|&e| e == (2 << 8)));
    assert_eq!(t.look[0b010_000000], (3 << 8) | 1);
    assert_eq!(t.look[0b110_111111], (3 << 8) | 5);
    assert_eq!(t.look[0b1110_00000], (4 << 8) | 6);
    assert_eq!(t.look[0b1111_11110], (9 << 8) | 11);
    assert_eq!(t.look[0b1111_11111], 0, "no code of 9 bits or fewer");
    assert_eq!((t.maxcode[1], t.maxcode[2], t.maxcode[3]), (-1, 0, 6));
    assert_eq!((t.maxcode[9], t.maxcode[10]), (510, -1));
    assert!(t.dc_ok);
}

#[test]
fn refuses_a_table_with_too_many_codes_of_one_length() {
    let mut bits = [0u8; 17];
    bits[1] = 3;
    assert!(fold(&bits, &[0, 1, 2]).is_err());
    bits[1] = 1;
    assert!(fold(&bits, &[]).is_err(), "fewer symbols than codes");
}

#[test]
fn plans_a_progressive_file_and_a_sequential_one() {
    let p = plan(PROGRESSIVE, u64::MAX).unwrap();
    assert_eq!((p.width, p.height, p.comps.len()), (150, 103, 3));
    // 4:4:4: one block per component per MCU, 150 / 8 and 103 / 8
    // rounded up.
    assert_eq!((p.mcus_x, p.mcus_y), (19, 13));
    for c in &p.comps {
        assert_eq!((c.stride, c.rows, c.bw, c.bh), (19, 13, 19, 13));
    }
    assert!(p.comps.iter().all(|c| c.quant.is_some()));
    for s in &p.scans {
        assert!((s.offset + s.length) as usize <= PROGRESSIVE.len());
    }
    // The DC scans, then each component's AC scans, file order within.
    let chains = p.chains();
    assert_eq!(chains.len(), 4);
    assert!(chains[0].iter().all(|&i| p.scans[i].ss == 0));
    for (c, chain) in chains[1..].iter().enumerate() {
        assert!(chain.windows(2).all(|w| w[0] < w[1]));
        assert!(chain.iter().all(|&i| p.scans[i].comps[0].0 as usize == c));
    }
    assert!(!p.sequential && p.complete);
    // The same picture, baseline: one interleaved scan of whole
    // blocks, one chain.
    let baseline = include_bytes!("../../../tests/data/go/video-001.jpeg");
    let b = plan(baseline, u64::MAX).unwrap();
    assert!(b.sequential && b.complete);
    assert_eq!((b.width, b.height, b.scans.len()), (150, 103, 1));
    let s = &b.scans[0];
    assert_eq!((s.ss, s.se, s.ah, s.al, s.comps.len()), (0, 63, 0, 0, 3));
    assert!(
        s.comps
            .iter()
            .all(|&(_, dc, ac)| dc != u16::MAX && ac != u16::MAX)
    );
    assert_eq!(b.chains(), vec![vec![0]]);
    assert!(matches!(
        plan(&baseline[..baseline.len() / 2], u64::MAX),
        Ok(Plan {
            sequential: true,
            ..
        })
    ));
    let mut twelve = baseline.to_vec();
    let sof = twelve.windows(2).position(|w| w == [0xFF, 0xC0]).unwrap();
    twelve[sof + 4] = 12;
    assert!(matches!(
        plan(&twelve, u64::MAX),
        Err(SampleError::Unsupported(_))
    ));
    assert!(matches!(
        plan(PROGRESSIVE, 100),
        Err(SampleError::TooLarge { .. })
    ));
}

#[test]
fn refuses_the_markers_libjpeg_refuses_and_skips_what_it_skips() {
    let baseline = include_bytes!("../../../tests/data/go/video-001.jpeg");
    let eoi = baseline.len() - 2;
    assert_eq!(&baseline[eoi..], [0xFF, 0xD9]);
    // An unknown marker where EOI was (a fuzz seed's mutation that
    // libjpeg-turbo refuses: "Unsupported marker type 0xf8"), and a
    // second SOI.
    for m in [0xF8u8, 0x02, 0xC8, 0xDE, 0xD8] {
        let mut v = baseline.to_vec();
        v[eoi + 1] = m;
        v.extend_from_slice(&[0xFF, 0xD9]);
        assert!(
            matches!(plan(&v, u64::MAX), Err(SampleError::Corrupt(_))),
            "marker 0x{m:02X}"
        );
    }
    // A comment of length 0 before the frame: libjpeg skips no bytes,
    // and so does the plan; a DQT of length 0 is refused.
    for (m, ok) in [(0xFEu8, true), (0xDB, false)] {
        let mut v = baseline[..2].to_vec();
        v.extend_from_slice(&[0xFF, m, 0, 0]);
        v.extend_from_slice(&baseline[2..]);
        assert_eq!(plan(&v, u64::MAX).is_ok(), ok, "marker 0x{m:02X}");
    }
}

/// A DHT segment of one table: `class` and `slot`, one code of one
/// bit for `symbol`.
fn dht(class: u8, slot: u8, symbol: u8) -> Vec<u8> {
    let mut v = vec![0xFF, 0xC4, 0, 20, (class << 4) | slot, 1];
    v.extend_from_slice(&[0; 15]);
    v.push(symbol);
    v
}

/// A progressive 8×8 grey file: its DC scan, then `n` AC scans each
/// after a DHT of AC slot 0 whose symbol is `symbol(k)`.
fn many_ac_scans(n: usize, symbol: impl Fn(usize) -> u8) -> Vec<u8> {
    let mut v = vec![0xFF, 0xD8, 0xFF, 0xDB, 0, 67, 0];
    v.extend_from_slice(&[1; 64]);
    v.extend_from_slice(&[0xFF, 0xC2, 0, 11, 8, 0, 8, 0, 8, 1, 1, 0x11, 0]);
    v.extend(dht(0, 0, 0));
    v.extend_from_slice(&[0xFF, 0xDA, 0, 8, 1, 1, 0x00, 0, 0, 0x00, 0x00]);
    for k in 0..n {
        v.extend(dht(1, 0, symbol(k)));
        v.extend_from_slice(&[0xFF, 0xDA, 0, 8, 1, 1, 0x00, 1, 63, 0x00, 0x00]);
    }
    v.extend_from_slice(&[0xFF, 0xD9]);
    v
}

#[test]
fn a_plan_holds_the_tables_its_scans_use_once() {
    let p = plan(PROGRESSIVE, u64::MAX).unwrap();
    // Thousands of definitions no scan uses, before the frame, leave
    // the plan as it was.
    let mut v = PROGRESSIVE[..2].to_vec();
    for k in 0..5000 {
        v.extend(dht(1, 3, k as u8));
    }
    let shift = (v.len() - 2) as u32;
    v.extend_from_slice(&PROGRESSIVE[2..]);
    let q = plan(&v, u64::MAX).unwrap();
    assert_eq!(q.tables, p.tables);
    for (a, b) in q.scans.iter().zip(&p.scans) {
        assert_eq!((a.offset, &a.comps), (b.offset + shift, &b.comps));
    }
    // A table with three codes of one bit: refused where a scan uses
    // it, as libjpeg refuses it (when the scan starts), not otherwise.
    let bad = [
        0xFF, 0xC4, 0, 22, 0x13, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3,
    ];
    let mut v = PROGRESSIVE[..2].to_vec();
    v.extend_from_slice(&bad);
    v.extend_from_slice(&PROGRESSIVE[2..]);
    assert_eq!(plan(&v, u64::MAX).unwrap().tables, p.tables);
    let mut used = many_ac_scans(1, |_| 1);
    let last = used.windows(2).rposition(|w| w == [0xFF, 0xDA]).unwrap();
    let mut bad0 = bad.to_vec();
    bad0[4] = 0x10;
    used.splice(last..last, bad0);
    assert!(matches!(
        plan(&used, u64::MAX),
        Err(SampleError::Corrupt(_))
    ));
    // Each scan's table redefined, always the same: one AC table.
    let same = plan(&many_ac_scans(100, |_| 1), u64::MAX).unwrap();
    assert_eq!((same.scans.len(), same.tables.len()), (101, 2));
    assert!(same.scans[1..].iter().all(|s| s.comps[0].2 == 1));
    // A new table per scan: distinct ones up to MAX_TABLES, each scan
    // naming its own, then a CPU file.
    let distinct = plan(&many_ac_scans(MAX_TABLES - 1, |k| k as u8 + 1), u64::MAX).unwrap();
    assert_eq!(distinct.tables.len(), MAX_TABLES);
    for (k, s) in distinct.scans[1..].iter().enumerate() {
        assert_eq!(
            distinct.tables[s.comps[0].2 as usize].symbols[0],
            k as u8 + 1
        );
    }
    assert!(matches!(
        plan(&many_ac_scans(MAX_TABLES, |k| k as u8 + 1), u64::MAX),
        Err(SampleError::Unsupported(_))
    ));
}

#[test]
fn next_ff_finds_the_first_0xff() {
    for len in 0..40 {
        for at in 0..=len {
            let mut v = vec![0x7Fu8; len];
            if at < len {
                v[at] = 0xFF;
                if at + 3 < len {
                    v[at + 3] = 0xFF;
                }
            }
            for from in 0..=len {
                let want = (from..len).find(|&i| v[i] == 0xFF).unwrap_or(len);
                assert_eq!(next_ff(&v, from), want, "len {len} at {at} from {from}");
            }
        }
    }
}

#[test]
fn every_cut_and_flip_is_a_plan_or_an_error() {
    for n in 0..PROGRESSIVE.len() {
        let _ = plan(&PROGRESSIVE[..n], u64::MAX);
    }
    let mut v = PROGRESSIVE.to_vec();
    for i in 0..v.len().min(2000) {
        for bit in [0x01u8, 0x80] {
            v[i] ^= bit;
            if let Ok(p) = plan(&v, u64::MAX) {
                for s in &p.scans {
                    assert!((s.offset + s.length) as usize <= v.len());
                }
            }
            v[i] ^= bit;
        }
    }
}
