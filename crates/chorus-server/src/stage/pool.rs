//! One worker per device behind one front, for every model stage and the encoder: a new job goes
//! to the healthy device with the most free room, and refusing it as busy waits until every
//! device is full.
//!
//! Room is kept at the front, in a [`Ledger`] per device: placing a job reserves a [`Seat`] (one
//! slot, and the KV blocks its worst case needs where seats reserve KV), and the seat travels with
//! the job to its owner thread, which drops it when the job leaves the stage. The front therefore
//! never counts less than the stage holds, so a device the ledger finds room on admits the job.
//! A device whose thread panicked is marked failed ([`Health`]) and takes no new jobs; the others
//! go on. A one-device server is a pool of one, and places every job on it as it always has (its
//! owner thread says busy itself, with its own message).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use chorus_core::{Error, Result};

use super::error::{StageError, StageErrorCode};

const OP_NEW: &str = "StagePool::new";
/// The device of a stage or encoder started without a device list.
pub const DEFAULT_DEVICE: usize = 0;

/// A device's stage, to be built on its owner thread by `factory`.
pub struct DeviceStage<F> {
    /// The device's number (a CUDA ordinal, or a stand-in's index): the `device` label.
    pub device: usize,
    pub factory: F,
    /// A switch that makes this device's thread fail, as a device error would.
    pub fault: Option<FaultSwitch>,
}

impl<F> DeviceStage<F> {
    pub fn new(device: usize, factory: F) -> Self {
        Self {
            device,
            factory,
            fault: None,
        }
    }

    /// Starts this device's owner thread `chorus-{kind}-{device}`, watched for failure with
    /// `health`; `build` makes its owner there from the factory and the device number. Its
    /// queue holds `queued` starts, and at least one for each of the device's seats, so that a
    /// job holding a seat is never refused for a full queue.
    pub(crate) fn spawn_owner<S, O, I>(
        self,
        kind: &str,
        queued: usize,
        health: Arc<Health>,
        build: impl FnOnce(F, usize) -> Result<(O, I)> + Send + 'static,
    ) -> Result<(super::owner::OwnerThread<S>, I)>
    where
        F: Send + 'static,
        S: Send + 'static,
        O: super::owner::Owner<Start = S>,
        I: Seated + Send + 'static,
    {
        let Self {
            device,
            factory,
            fault,
        } = self;
        let watch = super::owner::Watch {
            device,
            health,
            fault,
        };
        super::owner::OwnerThread::spawn(
            &format!("chorus-{kind}-{device}"),
            move |info: &I| queued.max(info.seats()),
            watch,
            move || build(factory, device),
        )
    }
}

/// What a device's stage reports at start-up: how many jobs it runs at once.
pub(crate) trait Seated {
    fn seats(&self) -> usize;
}

/// Trips a device's owner thread: it panics before its next step, which ends that device's jobs
/// with an error naming it and takes the device out of placement, exactly as a failing device
/// does. For drills of the failure path and the tests that prove it.
#[derive(Clone, Debug, Default)]
pub struct FaultSwitch(Arc<AtomicBool>);

impl FaultSwitch {
    pub fn trip(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub(crate) fn tripped(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Why a device takes no new jobs, once it has failed.
#[derive(Debug, Default)]
pub(crate) struct Health(Mutex<Option<String>>);

impl Health {
    /// Records the failure (the first one sticks).
    pub(crate) fn fail(&self, why: String) {
        let mut f = lock(&self.0);
        if f.is_none() {
            *f = Some(why);
        }
    }

    pub(crate) fn failure(&self) -> Option<String> {
        lock(&self.0).clone()
    }
}

/// What one device holds: job slots, and KV blocks when a job's seat reserves them (0: blocks
/// are not counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Capacity {
    pub seats: usize,
    pub blocks: usize,
}

/// Slots and blocks in use on one device, as the front counts them.
#[derive(Debug)]
pub(crate) struct Ledger {
    capacity: Capacity,
    used: Mutex<Capacity>,
}

impl Ledger {
    fn new(capacity: Capacity) -> Arc<Self> {
        Arc::new(Self {
            capacity,
            used: Mutex::new(Capacity {
                seats: 0,
                blocks: 0,
            }),
        })
    }

    fn used(&self) -> Capacity {
        *lock(&self.used)
    }
}

/// One job's share of a device: freed when dropped (by the owner thread, as the job leaves the
/// stage, or with a job that never reached it).
#[derive(Debug)]
pub struct Seat {
    ledger: Arc<Ledger>,
    blocks: usize,
}

impl Drop for Seat {
    fn drop(&mut self) {
        let mut used = lock(&self.ledger.used);
        used.seats = used.seats.saturating_sub(1);
        used.blocks = used.blocks.saturating_sub(self.blocks);
    }
}

/// One device of a pool.
pub(crate) struct Member<M> {
    pub(crate) device: usize,
    pub(crate) engine: M,
    ledger: Arc<Ledger>,
    health: Arc<Health>,
}

/// A device as `/healthz` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberStatus {
    pub device: usize,
    /// Job slots of the device.
    pub slots: usize,
    /// Jobs holding a slot.
    pub live: usize,
    /// KV blocks of the device (0 where seats reserve none) and those jobs reserve.
    pub kv_blocks: usize,
    pub kv_reserved: usize,
    /// Why the device takes no new jobs.
    pub failure: Option<String>,
}

impl MemberStatus {
    /// The JSON object of one device in `/healthz`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "device": self.device,
            "state": if self.failure.is_none() { "ok" } else { "failed" },
            "slots": self.slots,
            "live": self.live,
            "kv_blocks": self.kv_blocks,
            "kv_reserved": self.kv_reserved,
            "error": self.failure,
        })
    }
}

/// What one device said to a job placed on it.
pub(crate) enum Tried<T, E> {
    Placed(T),
    /// Refused for good: the same would happen on any device.
    Final(E),
    /// This device cannot take it now (its queue is full, or it stopped): try the next.
    Next(E),
}

/// Why a job was placed nowhere.
#[derive(Debug)]
pub(crate) enum Unplaced<E> {
    /// The last device tried refused it (or, with one device, the only one).
    Refused(E),
    /// Every device of several is full: what each holds, in words.
    AllFull(String),
    /// No device takes jobs: why, in words.
    NoDevice(String),
}

/// One worker per device and the front's count of what each holds.
pub(crate) struct StagePool<M> {
    members: Vec<Member<M>>,
    /// Held while a placement reads the ledgers and reserves, so two jobs never both take the
    /// last room of a device.
    placing: Mutex<()>,
}

impl<M> StagePool<M> {
    /// A pool of devices already started, each with its capacity and health; their numbers must
    /// differ.
    pub(crate) fn new(members: Vec<(usize, M, Capacity, Arc<Health>)>) -> Result<Self> {
        if members.is_empty() {
            return Err(Error::config(OP_NEW, "no device given"));
        }
        for (i, (d, ..)) in members.iter().enumerate() {
            if members[..i].iter().any(|(o, ..)| o == d) {
                return Err(Error::config(OP_NEW, format!("device {d} is given twice")));
            }
        }
        let members = members
            .into_iter()
            .map(|(device, engine, capacity, health)| Member {
                device,
                engine,
                ledger: Ledger::new(capacity),
                health,
            })
            .collect();
        Ok(Self {
            members,
            placing: Mutex::new(()),
        })
    }

    pub(crate) fn members(&self) -> &[Member<M>] {
        &self.members
    }

    /// The first device's engine (every device serves the same model).
    pub(crate) fn first(&self) -> &M {
        // `new` refuses an empty pool.
        &self.members[0].engine
    }

    pub(crate) fn len(&self) -> usize {
        self.members.len()
    }

    /// The engine front's counters: the one device's own, or with several a fresh set for the
    /// refusals counted before a job reached any of them.
    pub(crate) fn front_metrics<T: Default>(&self, of: impl Fn(&M) -> &Arc<T>) -> Arc<T> {
        match self.members.len() {
            1 => of(self.first()).clone(),
            _ => Arc::new(T::default()),
        }
    }

    /// `f` summed over every device (seats, KV blocks).
    pub(crate) fn total(&self, f: impl Fn(&M) -> usize) -> usize {
        self.members.iter().map(|m| f(&m.engine)).sum()
    }

    /// Places a job that needs one slot and `blocks` KV blocks: on the healthy device with the
    /// most free blocks (where blocks are counted) or slots, ties to the lowest index; `submit`
    /// hands it over with its seat. A device that says `Next` is passed over for the next one.
    pub(crate) fn place<T, E>(
        &self,
        blocks: usize,
        mut submit: impl FnMut(&M, Seat) -> Tried<T, E>,
    ) -> std::result::Result<T, Unplaced<E>> {
        let mut last = None;
        let mut tried = vec![false; self.members.len()];
        loop {
            let Some((i, seat)) = self.reserve(blocks, &tried)? else {
                return Err(last.map_or_else(
                    || Unplaced::NoDevice(self.describe_failures()),
                    Unplaced::Refused,
                ));
            };
            tried[i] = true;
            match submit(&self.members[i].engine, seat) {
                Tried::Placed(t) => return Ok(t),
                Tried::Final(e) => return Err(Unplaced::Refused(e)),
                Tried::Next(e) => last = Some(e),
            }
        }
    }

    /// Picks the device for the next try and reserves its seat; `None` when no untried healthy
    /// device is left.
    #[allow(clippy::type_complexity)]
    fn reserve<E>(
        &self,
        blocks: usize,
        tried: &[bool],
    ) -> std::result::Result<Option<(usize, Seat)>, Unplaced<E>> {
        let _placing = lock(&self.placing);
        let candidates: Vec<(usize, Capacity)> = self
            .members
            .iter()
            .enumerate()
            .filter(|(i, m)| !tried[*i] && m.health.failure().is_none())
            .map(|(i, m)| (i, free(m)))
            .collect();
        let fits = |f: &Capacity| f.seats >= 1 && f.blocks >= blocks;
        let room = |i: usize, f: &Capacity| {
            if self.members[i].ledger.capacity.blocks > 0 {
                f.blocks
            } else {
                f.seats
            }
        };
        let best = candidates
            .iter()
            .filter(|(_, f)| fits(f))
            // `max_by_key` keeps the last of equals: compare reversed indices for the lowest.
            .max_by_key(|(i, f)| (room(*i, f), std::cmp::Reverse(*i)))
            .copied();
        let pick = match best {
            Some((i, _)) => i,
            // Full everywhere: a pool of one lets its owner thread refuse (with its own message,
            // as a one-device server always has); several say which device holds what.
            None if self.members.len() > 1 && !candidates.is_empty() => {
                return Err(Unplaced::AllFull(self.describe_load()))
            }
            None => match candidates.first() {
                Some((i, _)) => *i,
                None => return Ok(None),
            },
        };
        let ledger = &self.members[pick].ledger;
        let mut used = lock(&ledger.used);
        used.seats += 1;
        used.blocks += blocks;
        drop(used);
        let seat = Seat {
            ledger: ledger.clone(),
            blocks,
        };
        Ok(Some((pick, seat)))
    }

    /// Every device's slots, KV blocks and health.
    pub(crate) fn status(&self) -> Vec<MemberStatus> {
        self.members
            .iter()
            .map(|m| {
                let used = m.ledger.used();
                MemberStatus {
                    device: m.device,
                    slots: m.ledger.capacity.seats,
                    live: used.seats.min(m.ledger.capacity.seats),
                    kv_blocks: m.ledger.capacity.blocks,
                    kv_reserved: used.blocks.min(m.ledger.capacity.blocks),
                    failure: m.health.failure(),
                }
            })
            .collect()
    }

    /// Appends a stage's metrics: a one-device pool's as `render` writes them, several devices'
    /// family by family with a `device` label, followed by the refusals `front` counted before
    /// any device.
    pub(crate) fn render_metrics(
        &self,
        out: &mut String,
        render: impl Fn(&M, &mut String),
        front: impl Fn(&mut String),
    ) {
        if self.members.len() == 1 {
            render(self.first(), out);
            return;
        }
        let texts: Vec<(usize, String)> = self
            .members
            .iter()
            .map(|m| {
                let mut t = String::new();
                render(&m.engine, &mut t);
                (m.device, t)
            })
            .collect();
        let mut refused = String::new();
        front(&mut refused);
        let mut sources: Vec<(Option<usize>, &str)> =
            texts.iter().map(|(d, t)| (Some(*d), t.as_str())).collect();
        sources.push((None, &refused));
        out.push_str(&super::labels::merge_by_device(&sources));
    }

    fn describe_load(&self) -> String {
        self.status()
            .iter()
            .map(|s| match (&s.failure, s.kv_blocks) {
                (Some(_), _) => format!("device {} failed", s.device),
                (None, 0) => format!("device {}: {} of {} slots", s.device, s.live, s.slots),
                (None, b) => format!(
                    "device {}: {} of {} slots, {} of {b} KV blocks reserved",
                    s.device, s.live, s.slots, s.kv_reserved
                ),
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn describe_failures(&self) -> String {
        self.status()
            .iter()
            .map(|s| match &s.failure {
                Some(f) => f.clone(),
                None => format!("device {} has stopped", s.device),
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// What a device has free by the front's count.
fn free<M>(m: &Member<M>) -> Capacity {
    let used = m.ledger.used();
    Capacity {
        seats: m.ledger.capacity.seats.saturating_sub(used.seats),
        blocks: m.ledger.capacity.blocks.saturating_sub(used.blocks),
    }
}

/// Starts one worker per device with `start`: the first alone (it fills the on-disk kernel cache
/// that the others then read instead of each writing it), the rest side by side. Fails, naming
/// the device, when any of them fails to start.
pub(crate) fn start_all<F: Send, M: Send>(
    devices: Vec<DeviceStage<F>>,
    start: impl Fn(DeviceStage<F>) -> Result<M> + Sync,
) -> Result<Vec<M>> {
    const OP: &str = "StagePool::start";
    let named = |d: DeviceStage<F>| {
        let device = d.device;
        start(d).map_err(|e| Error::config(OP, format!("device {device}: {e}")))
    };
    let mut devices = devices.into_iter();
    let Some(first) = devices.next() else {
        return Err(Error::config(OP, "no device given"));
    };
    let mut started = vec![named(first)?];
    let rest: Vec<Result<M>> = std::thread::scope(|scope| {
        let handles: Vec<_> = devices
            .map(|d| {
                let named = &named;
                scope.spawn(move || named(d))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::config(OP, "a stage's start panicked")))
            })
            .collect()
    });
    for m in rest {
        started.push(m?);
    }
    Ok(started)
}

/// Starts every device with `start`, which returns its engine and capacity, and pools them.
pub(crate) fn start_pool<F: Send, M: Send>(
    devices: Vec<DeviceStage<F>>,
    start: impl Fn(DeviceStage<F>, Arc<Health>) -> Result<(M, Capacity)> + Sync,
) -> Result<StagePool<M>> {
    let started = start_all(devices, |d| {
        let health = Arc::new(Health::default());
        let device = d.device;
        let (m, capacity) = start(d, health.clone())?;
        Ok((device, m, capacity, health))
    })?;
    StagePool::new(started)
}

/// The error a job placed on no device gets; `jobs` names what the stage runs ("songs").
pub(crate) fn unplaced_error(u: Unplaced<StageError>, jobs: &str) -> StageError {
    match u {
        Unplaced::Refused(e) => e,
        Unplaced::AllFull(load) => StageError::new(
            StageErrorCode::Busy,
            format!("busy: every device is full ({load})"),
        ),
        Unplaced::NoDevice(why) => {
            StageError::internal(format!("no device takes {jobs} now: {why}"))
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means a thread panicked while holding it; the counts stay usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(caps: &[(usize, usize)]) -> StagePool<usize> {
        let members = caps
            .iter()
            .enumerate()
            .map(|(i, &(seats, blocks))| {
                (
                    i,
                    i,
                    Capacity { seats, blocks },
                    Arc::new(Health::default()),
                )
            })
            .collect();
        StagePool::new(members).unwrap()
    }

    /// Places one job and keeps its seat; returns the device it went to.
    fn take(
        p: &StagePool<usize>,
        blocks: usize,
        seats: &mut Vec<Seat>,
    ) -> std::result::Result<usize, String> {
        p.place(blocks, |&d, seat| {
            seats.push(seat);
            Tried::<usize, String>::Placed(d)
        })
        .map_err(|e| format!("{e:?}"))
    }

    #[test]
    fn jobs_go_to_the_most_free_and_ties_to_the_lowest_index() {
        let p = pool(&[(2, 0), (3, 0)]);
        let mut seats = Vec::new();
        let placed: Vec<usize> = (0..5).map(|_| take(&p, 0, &mut seats).unwrap()).collect();
        assert_eq!(placed, [1, 0, 1, 0, 1]);
        let full = take(&p, 0, &mut seats).unwrap_err();
        assert!(
            full.contains("AllFull") && full.contains("device 1: 3 of 3 slots"),
            "{full}"
        );
        // A seat dropped frees its device.
        seats.remove(0);
        assert_eq!(take(&p, 0, &mut seats).unwrap(), 1);
    }

    #[test]
    fn blocks_rank_devices_and_a_device_without_enough_is_skipped() {
        let p = pool(&[(4, 10), (4, 6)]);
        let mut seats = Vec::new();
        assert_eq!(take(&p, 5, &mut seats).unwrap(), 0);
        // Device 0 has 5 free, device 1 has 6: the larger goes first.
        assert_eq!(take(&p, 5, &mut seats).unwrap(), 1);
        assert_eq!(take(&p, 5, &mut seats).unwrap(), 0);
        let e = take(&p, 2, &mut seats).unwrap_err();
        assert!(e.contains("10 of 10 KV blocks"), "{e}");
    }

    #[test]
    fn a_pool_of_one_hands_a_full_device_its_job_to_refuse() {
        let p = pool(&[(1, 0)]);
        let mut seats = Vec::new();
        assert_eq!(take(&p, 0, &mut seats).unwrap(), 0);
        assert_eq!(take(&p, 0, &mut seats).unwrap(), 0);
    }

    #[test]
    fn failed_devices_and_next_answers_are_passed_over() {
        let members = vec![
            (
                0,
                0,
                Capacity {
                    seats: 4,
                    blocks: 0,
                },
                Arc::new(Health::default()),
            ),
            (
                5,
                1,
                Capacity {
                    seats: 2,
                    blocks: 0,
                },
                Arc::new(Health::default()),
            ),
            (
                7,
                2,
                Capacity {
                    seats: 1,
                    blocks: 0,
                },
                Arc::new(Health::default()),
            ),
        ];
        let health0 = members[0].3.clone();
        let p = StagePool::new(members).unwrap();
        health0.fail("device 0: the stage panicked".into());
        let mut seats = Vec::new();
        // Device 5 (index 1) says its queue is full; device 7 takes the job.
        let got = p.place(0, |&i, seat| {
            if i == 1 {
                return Tried::Next("queue full".to_string());
            }
            seats.push(seat);
            Tried::Placed(i)
        });
        assert_eq!(got.unwrap(), 2);
        // The refused try freed its seat.
        assert_eq!(p.status()[1].live, 0);
        assert_eq!(
            p.status()[0].failure.as_deref(),
            Some("device 0: the stage panicked")
        );
        // Device 5 says it stopped and device 7 is full: busy, naming what each holds.
        let full = p.place(0, |_, _| Tried::<(), _>::Next("stopped".to_string()));
        assert!(
            matches!(full, Err(Unplaced::AllFull(ref e)) if e.contains("device 7: 1 of 1 slots")),
            "{full:?}"
        );
        // With room on both, both stopped: the last refusal.
        seats.clear();
        let none = p.place(0, |_, _| Tried::<(), _>::Next("stopped".to_string()));
        assert!(
            matches!(none, Err(Unplaced::Refused(ref e)) if e == "stopped"),
            "{none:?}"
        );
        health0.fail("again".into());
        assert_eq!(
            p.status()[0].failure.as_deref(),
            Some("device 0: the stage panicked")
        );
    }

    #[test]
    fn a_pool_of_failed_devices_says_why() {
        let members = vec![(
            3,
            0,
            Capacity {
                seats: 1,
                blocks: 0,
            },
            Arc::new(Health::default()),
        )];
        members[0].3.fail("device 3: the step panicked".into());
        let p = StagePool::new(members).unwrap();
        match p.place(0, |_, _| Tried::<(), String>::Placed(())) {
            Err(Unplaced::NoDevice(why)) => assert!(why.contains("device 3"), "{why}"),
            other => panic!("{other:?}"),
        }
        let twice = vec![
            (
                1,
                0,
                Capacity {
                    seats: 1,
                    blocks: 0,
                },
                Arc::new(Health::default()),
            ),
            (
                1,
                1,
                Capacity {
                    seats: 1,
                    blocks: 0,
                },
                Arc::new(Health::default()),
            ),
        ];
        let e = StagePool::new(twice).err().unwrap().to_string();
        assert!(e.contains("device 1 is given twice"), "{e}");
    }
}
