//! The lanes' rescue after a panic, their busy measure, their turns and
//! their idle growth.

use super::{Busy, Lanes, Rescue};

#[test]
fn busy_counts_the_union_of_overlapping_calls() {
    use std::time::{Duration, Instant};
    let b = Busy::default();
    assert_eq!(b.take(), (Duration::ZERO, 0));
    let start = Instant::now();
    b.enter(3);
    b.enter(2);
    std::thread::sleep(Duration::from_millis(20));
    b.exit();
    std::thread::sleep(Duration::from_millis(20));
    let t0 = Instant::now();
    let (mid, items) = b.take();
    let whole = start.elapsed();
    assert_eq!(items, 5);
    // One call or the other covered both sleeps: counted once (the
    // union), never as the two calls' summed time.
    assert!(mid >= Duration::from_millis(40), "{mid:?}");
    assert!(mid <= whole, "{mid:?} > {whole:?}");
    b.exit();
    let gap = t0.elapsed();
    std::thread::sleep(Duration::from_millis(20));
    // Idle time after the last call is not counted.
    let (idle, items) = b.take();
    assert_eq!(items, 0);
    assert!(idle <= gap, "{idle:?} > {gap:?}");
}

/// A rescue whose wait succeeds where `settles`, declining `q` as
/// `q + 1000`.
fn rescue(settles: bool) -> Rescue<u32, u32, u32> {
    Rescue {
        settle: if settles { |_| true } else { |_| false },
        decline: std::sync::Arc::new(|q| q + 1000),
    }
}

#[test]
fn a_panicking_call_is_declined_and_its_lane_stops() {
    let lanes = Lanes::new(
        "test",
        vec![0u32, 100],
        |s: &mut u32, q: &mut u32| {
            assert!(*q != 7, "lane panics on 7");
            *s += 1;
            *q * 2
        },
        rescue(true),
    )
    .unwrap();
    let mut tickets: Vec<_> = (0..20)
        .filter(|&q| q != 7)
        .map(|q| lanes.submit(q))
        .collect();
    let rescued = lanes.submit(7);
    assert_eq!(rescued.wait(), Some(1007));
    assert_eq!(lanes.stopped(), 1);
    let mut first = tickets.remove(0);
    while !first.ready() {
        std::thread::yield_now();
    }
    assert_eq!(first.wait(), Some(0));
    // Requests queued on the stopped lane before it stopped are
    // declined there; the rest go to the other lane. None is lost.
    for (q, t) in (1..20).filter(|&q| q != 7).zip(tickets) {
        let got = t.wait().unwrap();
        assert!(got == q * 2 || got == q + 1000, "{q}: {got}");
    }
    let after: Vec<_> = (20..30).map(|q| lanes.submit(q).wait()).collect();
    assert_eq!(after, (20..30).map(|q| Some(q * 2)).collect::<Vec<_>>());
}

#[test]
fn with_every_lane_stopped_requests_are_declined() {
    let lanes = Lanes::new(
        "test",
        vec![0u32, 0],
        |_: &mut u32, q: &mut u32| -> u32 { panic!("lane panics on {q}") },
        rescue(true),
    )
    .unwrap();
    let got: Vec<_> = (0..6).map(|q| lanes.submit(q).wait()).collect();
    assert_eq!(got, (0..6).map(|q| Some(q + 1000)).collect::<Vec<_>>());
    assert_eq!(lanes.stopped(), 2);
    let mut turn = 0;
    assert_eq!(lanes.submit_among(9, 1..2, &mut turn).wait(), Some(1009));
}

#[test]
fn a_lane_set_is_live_while_one_of_its_lanes_is() {
    let lanes = Lanes::new(
        "test",
        vec![0u32; 4],
        |_: &mut u32, q: &mut u32| -> u32 {
            assert!(*q < 100, "lane panics on {q}");
            *q
        },
        rescue(true),
    )
    .unwrap();
    let (all, low) = (
        super::LaneSet::all(lanes.stop_flags()),
        super::LaneSet::new(lanes.stop_flags(), 0..2),
    );
    let high = super::LaneSet::new(lanes.stop_flags(), 2..4);
    assert!(all.any_live() && low.any_live() && high.any_live());
    let mut turn = 0;
    for q in [100, 101] {
        assert_eq!(
            lanes.submit_among(q, 0..2, &mut turn).wait(),
            Some(q + 1000)
        );
    }
    // Lanes 0 and 1 stopped: their set is dead, the others live.
    assert!(!low.any_live());
    assert!(all.any_live() && high.any_live());
    // A range past the pool holds no live lane.
    assert!(!super::LaneSet::new(lanes.stop_flags(), 4..6).any_live());
}

#[test]
fn an_unsettled_lane_answers_nothing() {
    let lanes = Lanes::new(
        "test",
        vec![0u32],
        |_: &mut u32, q: &mut u32| -> u32 { panic!("lane panics on {q}") },
        rescue(false),
    )
    .unwrap();
    // The device may still write where the files would go: no answer,
    // and the caller fails those files with an error.
    assert_eq!(lanes.submit(1).wait(), None);
    assert_eq!(lanes.stopped(), 1);
}

#[test]
fn a_panicking_call_leaves_the_busy_measure() {
    let busy = std::sync::Arc::new(Busy::default());
    let run = super::counted(
        |_: &mut u32, q: &mut Vec<u32>| -> u32 {
            assert!(q.is_empty(), "panics");
            0
        },
        busy.clone(),
        Vec::len,
    );
    let lanes = Lanes::new(
        "test",
        vec![0u32],
        run,
        Rescue {
            settle: |_| true,
            decline: std::sync::Arc::new(|_| 1),
        },
    )
    .unwrap();
    assert_eq!(lanes.submit(vec![3]).wait(), Some(1));
    std::thread::sleep(std::time::Duration::from_millis(20));
    // No call is under way: the busy time stops growing.
    let (_, items) = busy.take();
    assert_eq!(items, 1);
    let t = busy.total();
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(busy.total(), t);
}

/// A lane's state for [`idle_lanes_grow_when_a_call_raises_the_shared_sizes`].
struct Tended {
    id: usize,
    generation: std::sync::Arc<std::sync::atomic::AtomicU64>,
    grown: crossbeam_channel::Sender<usize>,
}

#[test]
fn idle_lanes_grow_when_a_call_raises_the_shared_sizes() {
    use std::sync::atomic::Ordering::SeqCst;
    let generation = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (grown, grew) = crossbeam_channel::unbounded();
    let states = (0..3)
        .map(|id| Tended {
            id,
            generation: generation.clone(),
            grown: grown.clone(),
        })
        .collect();
    // A request raises the shared sizes by `q`; one of 99 panics.
    let lanes = Lanes::tended(
        "test",
        states,
        |s: &mut Tended, q: &mut u64| {
            assert!(*q != 99, "lane panics on 99");
            s.generation.fetch_add(*q, SeqCst);
            s.id
        },
        Rescue {
            settle: |_| true,
            decline: std::sync::Arc::new(|_| usize::MAX),
        },
        Some(super::Tend {
            generation: |s: &Tended| s.generation.load(SeqCst),
            grow: |s: &mut Tended| s.grown.send(s.id).unwrap(),
        }),
    )
    .unwrap();
    let wait = |n: usize| -> Vec<usize> {
        let mut got: Vec<usize> = (0..n)
            .map(|_| {
                grew.recv_timeout(std::time::Duration::from_secs(60))
                    .expect("an idle lane grew")
            })
            .collect();
        got.sort_unstable();
        got
    };
    // Lane 0's call raised them: lanes 1 and 2 grow, lane 0 (already
    // grown by its call) does not.
    assert_eq!(lanes.submit(1).wait(), Some(0));
    assert_eq!(wait(2), [1, 2]);
    // A call that raises nothing rings no lane.
    assert_eq!(lanes.submit(0).wait(), Some(1));
    assert_eq!(lanes.submit(5).wait(), Some(2));
    assert_eq!(wait(2), [0, 1], "only lane 2's call raised them");
    assert!(grew.try_recv().is_err(), "lane 1's call rang no lane");
    // A lane that stopped after a panic leaves its state alone.
    assert_eq!(lanes.submit(99).wait(), Some(usize::MAX));
    assert_eq!(lanes.submit(3).wait(), Some(1));
    assert_eq!(wait(1), [2]);
    drop(lanes);
    assert!(grew.try_recv().is_err(), "the stopped lane 0 grew");
}

#[test]
fn a_kind_of_request_keeps_to_its_lanes() {
    // Each lane answers with its own index.
    let lanes = Lanes::new(
        "test",
        vec![0usize, 1, 2, 3, 4],
        |s: &mut usize, _q: &mut ()| *s,
        Rescue {
            settle: |_| true,
            decline: std::sync::Arc::new(|()| usize::MAX),
        },
    )
    .unwrap();
    let (mut a, mut b) = (0, 0);
    let got = |among: std::ops::Range<usize>, turn: &mut usize| {
        (0..6)
            .map(|_| lanes.submit_among((), among.clone(), turn).wait().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(got(0..2, &mut a), [0, 1, 0, 1, 0, 1]);
    assert_eq!(got(2..5, &mut b), [2, 3, 4, 2, 3, 4]);
    // Ranges past the pool fall back on its lanes, never panic.
    let (mut c, mut d) = (0, 0);
    assert_eq!(got(7..9, &mut c), [4, 0, 4, 0, 4, 0]);
    assert_eq!(got(3..3, &mut d), [3, 3, 3, 3, 3, 3]);
}
