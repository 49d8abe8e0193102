//! The device stage's nvJPEG route (issues 5 and 16): decode groups.
//!
//! nvJPEG-route samples decode into a group's arena: those a worker began
//! as they arrive (their device phase queued at once), the rest at an
//! engine lane, when the group is sealed (about a batch at a time) or, with
//! `engine_call_images(n)`, n at a time as they come, so that the engine
//! starts on a batch while it is still filling and its calls fit its
//! cores (issue 16, items 2 and 3). Several
//! groups decode at once (`PipelineBuilder::batches_in_flight`), one arena
//! each; the batch thread collects a group when its samples reach their
//! batch positions, so positions still follow sampler order and the
//! failures, never timing.
//!
//! An arena goes back to the pool once its group's last sample is placed
//! and the launches that read it are queued (after the slot's flush, an
//! event marks them); it takes new decodes only after that event.

use super::cuda::NvRoute;
use super::cuda::{CudaArena, JpegJob, JpegOutcome, RouteCounts, Submitted};
use super::handoff::{Jpeg, Placed, Staged, shift};
use super::{DeviceStage, Engine, Slot};
use crate::decode::nvjpeg::Roi;
use crate::error::{Error, Result, SampleError};

/// A decode arena: device memory nvJPEG writes decoded images into.
#[derive(Debug)]
pub(crate) enum Arena {
    Cuda(CudaArena),
    /// Host memory, shared with the stage's list that the emulated
    /// launches read; its buffer never moves or changes size, so the
    /// addresses tiles hold stay valid.
    Emu(super::emu::EmuArena),
}

/// A group's work at the routes.
#[derive(Debug)]
enum Flight {
    /// The submission, and the entry of each of its jobs.
    Cuda(Submitted, Vec<usize>),
    Emu(
        crate::cuda::lanes::Ticket<super::emu::EmuReply>,
        Vec<(usize, Option<Roi>)>,
    ),
    /// Files for the scan kernels at an emulated progressive lane, and
    /// their entries.
    EmuProg(
        crate::cuda::lanes::Ticket<super::emu::EmuProgReply>,
        Vec<usize>,
    ),
}

/// One sample of a group: where its image goes in the arena, its draws,
/// and how its decoding came out once known.
#[derive(Debug)]
struct Entry {
    at: usize,
    width: u32,
    height: u32,
    params: Vec<crate::augment::params::SampleParams>,
    outcome: Option<JpegOutcome>,
}

/// Consecutive nvJPEG-route samples decoding into one arena.
#[derive(Debug)]
pub(crate) struct Group {
    /// Before `arena`: dropping them waits for the engine's writes. In
    /// submission order.
    flight: Vec<Flight>,
    arena: Option<Arena>,
    used: usize,
    entries: Vec<Entry>,
    /// Jobs not yet submitted, with their entry.
    jobs: Vec<(usize, JpegJob)>,
    /// Entries placed (or failed) so far, in order.
    next: usize,
    sealed: bool,
}

impl Group {
    /// Samples put into the group.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn sealed(&self) -> bool {
        self.sealed
    }

    /// Whether the next sample's outcome is known.
    pub(crate) fn collected(&self) -> bool {
        self.entries
            .get(self.next)
            .is_some_and(|e| e.outcome.is_some())
    }

    /// Whether the next sample decoded (its outcome must be known).
    pub(crate) fn next_ok(&self) -> bool {
        matches!(
            self.entries.get(self.next).and_then(|e| e.outcome.as_ref()),
            Some(Ok(_))
        )
    }

    /// Whether every sample was taken and no more can come.
    pub(crate) fn done(&self) -> bool {
        self.sealed && self.next == self.entries.len()
    }
}

impl DeviceStage {
    /// A group with a free arena, once the launches that read the arena
    /// last have finished; `None` while every arena is in use.
    pub(crate) fn open_group(&self) -> Result<Option<Group>> {
        let Ok(mut arena) = self.arenas.1.try_recv() else {
            return Ok(None);
        };
        // An emulated arena needs no wait: its launches ran before they
        // returned.
        if let (Engine::Cuda(e), Arena::Cuda(a)) = (&self.engine, &mut arena)
            && let Err(err) = e.reuse_arena(a)
        {
            let _ = self.arenas.0.try_send(arena);
            return Err(err);
        }
        Ok(Some(Group {
            flight: Vec::new(),
            arena: Some(arena),
            used: 0,
            entries: Vec::new(),
            jobs: Vec::new(),
            next: 0,
            sealed: false,
        }))
    }

    /// Whether `j` fits the group's arena.
    pub(crate) fn group_fits(&self, g: &Group, j: &Jpeg) -> bool {
        !g.sealed && g.used + j.need() <= self.arena
    }

    /// Put an nvJPEG-route sample into the (open) group: one a worker began
    /// is finished now (its device phase queued into the arena, overlapping
    /// the rest of the batch); the others wait for the group's sealing.
    pub(crate) fn put_jpeg(
        &self,
        g: &mut Group,
        mut j: Jpeg,
        counts: &mut RouteCounts,
    ) -> Result<()> {
        if !self.group_fits(g, &j) {
            return Err(Error::Device(
                "JPEG put into a full or sealed group (stage bug)".into(),
            ));
        }
        let at = g.used;
        g.used += j.need();
        let roi = j.window();
        // A failed device phase leaves the sample to the group's routes.
        let begun = j
            .staged
            .take()
            .and_then(|staged| self.finish_staged(g, at, &j, roi, staged).ok());
        if begun.is_some() {
            counts.cuda += 1;
        }
        let entry = g.entries.len();
        g.entries.push(Entry {
            at,
            width: j.width,
            height: j.height,
            params: std::mem::take(&mut j.params),
            outcome: begun.map(|()| Ok(roi)),
        });
        if begun.is_none() {
            g.jobs.push((
                entry,
                JpegJob {
                    bytes: j.bytes,
                    width: j.width,
                    height: j.height,
                    at,
                    roi,
                    to_engine: j.to_engine,
                    mcu: j.mcu,
                    kernels: j.kernels,
                    plan: j.plan,
                    progressive: j.progressive,
                },
            ));
            if self.engine_call > 0 && g.jobs.len() >= self.engine_call {
                self.dispatch(g, counts)?;
            }
        }
        Ok(())
    }

    /// Queue the rest of a worker's decode of `j` into the arena at `at`.
    fn finish_staged(
        &self,
        g: &mut Group,
        at: usize,
        j: &Jpeg,
        roi: Option<Roi>,
        staged: Staged,
    ) -> Result<()> {
        match (&self.engine, g.arena.as_mut(), staged) {
            (Engine::Cuda(e), Some(Arena::Cuda(a)), Staged::Cuda(lease)) => {
                e.decode_staged(a, at, (j.width, j.height), roi, lease)
            }
            (Engine::Emu(_), Some(Arena::Emu(a)), Staged::Emu(px)) => {
                let mut a = a.lock().unwrap_or_else(|p| p.into_inner());
                a.get_mut(at..at + px.len())
                    .ok_or_else(|| Error::Device("staged image outside the arena".into()))?
                    .copy_from_slice(&px);
                Ok(())
            }
            #[allow(unreachable_patterns)]
            _ => Err(Error::Device("staged decode of another engine".into())),
        }
    }

    /// Close the group to new samples and start decoding the ones no
    /// worker began; returns at once (the engine's share runs at a lane).
    pub(crate) fn seal(&self, g: &mut Group, counts: &mut RouteCounts) -> Result<()> {
        if g.sealed {
            return Ok(());
        }
        g.sealed = true;
        self.dispatch(g, counts)
    }

    /// Start decoding the group's waiting jobs: one engine call (or the
    /// emulated engine's), and on CUDA what the engine does not take.
    fn dispatch(&self, g: &mut Group, counts: &mut RouteCounts) -> Result<()> {
        if g.jobs.is_empty() {
            return Ok(());
        }
        let Some(route) = &self.jpeg else {
            return Err(Error::Device("JPEG group without a JPEG route".into()));
        };
        let (entries, jobs): (Vec<usize>, Vec<JpegJob>) =
            std::mem::take(&mut g.jobs).into_iter().unzip();
        let mut route = route.lock().unwrap_or_else(|p| p.into_inner());
        let flight = match (&self.engine, g.arena.as_ref(), &mut *route) {
            (Engine::Cuda(e), Some(Arena::Cuda(a)), JpegRoute::Cuda(r)) => {
                Flight::Cuda(e.submit_jpegs(a, jobs, r, counts)?, entries)
            }
            (Engine::Emu(_), Some(Arena::Emu(arena)), JpegRoute::Emu(route)) => {
                let job = |j: JpegJob| super::emu::EmuJob {
                    bytes: j.bytes,
                    size: (j.width, j.height),
                    roi: j.roi,
                    arena: arena.clone(),
                    at: j.at,
                    plan: j.plan,
                    progressive: j.progressive,
                };
                // Files for the scan kernels go to the progressive lanes
                // where there are some, whole, as on CUDA.
                let route = &mut *route;
                let (entries, jobs) = match &route.prog {
                    Some(prog) => {
                        let (p, rest): (Vec<_>, Vec<_>) =
                            entries.into_iter().zip(jobs).partition(|(_, j)| j.kernels);
                        for (group, among, turn) in
                            route.prog_kinds.split(p, |(_, j)| j.progressive)
                        {
                            if group.is_empty() {
                                continue;
                            }
                            let (k, p): (Vec<usize>, Vec<JpegJob>) = group.into_iter().unzip();
                            let t =
                                prog.submit_among(p.into_iter().map(job).collect(), among, turn);
                            g.flight.push(Flight::EmuProg(t, k));
                        }
                        rest.into_iter().unzip()
                    }
                    None => (entries, jobs),
                };
                if jobs.is_empty() {
                    return Ok(());
                }
                // Every other job takes the crop-region route here, as on
                // a hardware engine with ROI support: the decoded window
                // is packed at its own width, and placement must shift the
                // draws to it. CI checks that bookkeeping bit for bit.
                let placed = entries
                    .iter()
                    .zip(&jobs)
                    .map(|(&k, j)| (k, j.roi))
                    .collect();
                Flight::Emu(
                    route.engine.submit(jobs.into_iter().map(job).collect()),
                    placed,
                )
            }
            #[allow(unreachable_patterns)]
            _ => return Err(Error::Device("JPEG route of another engine".into())),
        };
        g.flight.push(flight);
        Ok(())
    }

    /// Whether the sealed group's decoding has come back (never blocks).
    pub(crate) fn group_ready(&self, g: &mut Group) -> bool {
        g.sealed
            && g.flight.iter_mut().all(|f| match f {
                Flight::Cuda(s, _) => s.ready(),
                Flight::Emu(t, _) => t.ready(),
                Flight::EmuProg(t, _) => t.ready(),
            })
    }

    /// Wait for the group's decoding and record each sample's outcome;
    /// seals the group first if it is open.
    pub(crate) fn collect(&self, g: &mut Group, counts: &mut RouteCounts) -> Result<()> {
        self.seal(g, counts)?;
        if g.flight.is_empty() {
            return Ok(());
        }
        let Some(route) = &self.jpeg else {
            return Err(Error::Device("JPEG group without a JPEG route".into()));
        };
        let mut route = route.lock().unwrap_or_else(|p| p.into_inner());
        for flight in std::mem::take(&mut g.flight) {
            self.land(g, flight, &mut route, counts)?;
        }
        Ok(())
    }

    /// Wait for one submission and record its samples' outcomes.
    fn land(
        &self,
        g: &mut Group,
        flight: Flight,
        route: &mut JpegRoute,
        counts: &mut RouteCounts,
    ) -> Result<()> {
        match (flight, &self.engine, g.arena.as_mut(), route) {
            (
                Flight::Cuda(sub, entries),
                Engine::Cuda(e),
                Some(Arena::Cuda(a)),
                JpegRoute::Cuda(r),
            ) => {
                // The bytes are done with: the engine's writes are complete
                // and the other routes copied what they need.
                let (outcomes, _bytes) = e.complete_jpegs(a, sub, r, counts)?;
                for (k, o) in entries.into_iter().zip(outcomes) {
                    g.entries[k].outcome = Some(o);
                }
            }
            (Flight::Emu(t, placed), Engine::Emu(_), Some(Arena::Emu(_)), JpegRoute::Emu(_)) => {
                let (gpu, cpu) = (&mut counts.hardware, &mut counts.cpu);
                let got = emu_answers(t.wait(), placed.len(), "engine", gpu, cpu);
                for ((k, roi), got) in placed.into_iter().zip(got) {
                    g.entries[k].outcome = Some(got.map(|_| roi));
                }
            }
            (
                Flight::EmuProg(t, entries),
                Engine::Emu(_),
                Some(Arena::Emu(_)),
                JpegRoute::Emu(_),
            ) => {
                let (gpu, cpu) = (&mut counts.progressive, &mut counts.cpu);
                let got = emu_answers(t.wait(), entries.len(), "scan-kernel", gpu, cpu);
                for (k, got) in entries.into_iter().zip(got) {
                    // Whole images: placement shifts nothing.
                    g.entries[k].outcome = Some(got.map(|_| None));
                }
            }
            #[allow(unreachable_patterns)]
            _ => return Err(Error::Device("JPEG route of another engine".into())),
        }
        Ok(())
    }

    /// Take the group's next sample, collected: placed in the arena (ready
    /// for [`place`](Self::place)) or with the error that stopped it on
    /// every route.
    pub(crate) fn take_entry(
        &self,
        g: &mut Group,
    ) -> Result<std::result::Result<Placed, SampleError>> {
        let base = match g.arena.as_ref() {
            Some(a) => self.arena_base(a),
            None => return Err(Error::Device("group without an arena (stage bug)".into())),
        };
        let Some(e) = g.entries.get_mut(g.next) else {
            return Err(Error::Device(
                "more JPEGs taken than put (stage bug)".into(),
            ));
        };
        let Some(outcome) = e.outcome.take() else {
            return Err(Error::Device(
                "JPEG taken before its group was collected (stage bug)".into(),
            ));
        };
        g.next += 1;
        let mut params = std::mem::take(&mut e.params);
        Ok(outcome.map(|decoded| {
            let (width, height) = match decoded {
                None => (e.width, e.height),
                Some(r) => {
                    shift(&mut params, r.x, r.y);
                    (r.w, r.h)
                }
            };
            Placed {
                src: base + e.at as u64,
                width,
                height,
                params,
            }
        }))
    }

    fn arena_base(&self, a: &Arena) -> u64 {
        match (&self.engine, a) {
            (Engine::Cuda(e), Arena::Cuda(c)) => e.arena_base(c),
            (_, Arena::Emu(v)) => v.lock().unwrap_or_else(|p| p.into_inner()).as_ptr() as u64,
            _ => 0,
        }
    }

    /// A group whose samples are all taken: its arena waits in `slot`
    /// (whose tiles may read it) until the slot's next flush; without a
    /// slot, no tile reads it and it goes back now.
    pub(crate) fn retire(&self, mut g: Group, slot: Option<&mut Slot>) {
        drop(std::mem::take(&mut g.flight));
        if let Some(a) = g.arena.take() {
            match slot {
                Some(s) => s.arenas.push(a),
                None => self.release(a),
            }
        }
    }

    /// Give back the arena of a group that no batch will read (an
    /// abandoned epoch), once the engine is done with it.
    pub(crate) fn abandon(&self, g: Group) {
        self.retire(g, None);
    }

    /// Back to the pool, marked on the stream after the launches queued
    /// so far (those that read it).
    pub(super) fn release(&self, mut a: Arena) {
        if let (Engine::Cuda(e), Arena::Cuda(c)) = (&self.engine, &mut a) {
            // A failed record leaves the arena unmarked: its next user
            // waits for nothing. Only a dead context fails here, and then
            // nothing runs on the device anyway.
            let _ = e.release_arena(c);
        }
        let _ = self.arenas.0.try_send(a);
    }
}

/// An emulated `lane`'s answers to its `n` jobs, counted: in `gpu` those
/// its device decoded (`true`), in `cpu` those decoded on the CPU after its
/// call was declined (`false`); an error for each job it gave no answer.
fn emu_answers(
    reply: Option<Vec<std::result::Result<bool, SampleError>>>,
    n: usize,
    lane: &str,
    gpu: &mut u64,
    cpu: &mut u64,
) -> Vec<std::result::Result<bool, SampleError>> {
    let mut reply = reply.unwrap_or_default().into_iter();
    (0..n)
        .map(|_| {
            let got = reply.next().unwrap_or_else(|| {
                Err(SampleError::Panic(format!(
                    "the emulated {lane} lane decoding it gave no answer"
                )))
            });
            match got {
                Ok(true) => *gpu += 1,
                Ok(false) => *cpu += 1,
                Err(_) => {}
            }
            got
        })
        .collect()
}

/// Who decodes the nvJPEG route's images.
#[allow(clippy::large_enum_variant)] // One per pipeline; boxing buys nothing.
pub(super) enum JpegRoute {
    Cuda(NvRoute),
    /// The emulated device plays a hardware engine: lanes that decode
    /// with the CPU decoder, answered into the group's arena. The same
    /// bookkeeping, checkable without a GPU.
    Emu(EmuRoute),
}

impl JpegRoute {
    /// Its lane pools' stop flags (`Stats::lanes_stopped`).
    pub(super) fn stop_flags(&self) -> Vec<crate::cuda::lanes::StopFlags> {
        match self {
            JpegRoute::Cuda(r) => r.stop_flags(),
            JpegRoute::Emu(r) => std::iter::once(r.engine.stop_flags())
                .chain(r.prog.as_ref().map(|p| p.stop_flags()))
                .collect(),
        }
    }
}

/// The emulated device's decoders of the nvJPEG route.
pub(super) struct EmuRoute {
    /// The engine's stand-in.
    pub(super) engine: crate::cuda::lanes::Lanes<Vec<super::emu::EmuJob>, super::emu::EmuReply>,
    /// Progressive lanes (`PipelineBuilder::progressive_kernels`).
    pub(super) prog:
        Option<crate::cuda::lanes::Lanes<Vec<super::emu::EmuJob>, super::emu::EmuProgReply>>,
    /// Which of them take which files, as on CUDA.
    pub(super) prog_kinds: super::KernelLanes,
}
