//! The engines of several devices behind one front: placement, drain, health and metrics.
//!
//! Each device has its own [`Engine`] (decoder, thread, slots). A new stream goes to the engine
//! with the most free slots, ties to the lowest index, and stays there: its [`Stream`] holds its
//! engine, so every later frame, reset and end goes to that engine. A device that failed (or
//! whose engine stopped) takes no new streams; the others go on. A one-device server is a pool of
//! one, so there is one code path.

use std::sync::atomic::{AtomicBool, Ordering};

use chorus_core::{Error, Result};

use crate::engine::{DecoderInfo, Engine, EngineConfig};
use crate::error::StreamError;
use crate::metrics::ErrorCounts;
use crate::prometheus::{render, DeviceSeries};
use crate::stream::{Stream, StreamInput};
use crate::DecoderFactory;

const OP_NEW: &str = "EnginePool::new";
const OP_START: &str = "EnginePool::start";
/// Why a device whose engine stopped without failing takes no streams.
const STOPPED: &str = "the engine has stopped";

/// What the server counts outside any device.
#[derive(Default)]
pub struct PoolMetrics {
    /// Streams refused before they were placed, or ended by the server itself (protocol errors,
    /// timeouts, writes that never finished), by kind.
    pub errors: ErrorCounts,
}

/// One device as a health check sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceStatus {
    pub device: usize,
    /// The decoder's description (device name, precision).
    pub name: String,
    pub max_streams: usize,
    pub live_streams: usize,
    /// Slots a new stream could take (0 once the device takes no streams).
    pub free_slots: usize,
    /// Why the device takes no streams: it failed, or its engine stopped.
    pub failure: Option<String>,
}

impl DeviceStatus {
    /// Whether the device decodes and takes new streams.
    pub fn healthy(&self) -> bool {
        self.failure.is_none()
    }
}

/// Every device's status and the pool's drain flag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolStatus {
    pub devices: Vec<DeviceStatus>,
    pub draining: bool,
}

impl PoolStatus {
    /// Whether the pool takes new streams: not draining, and at least one device healthy.
    pub fn ready(&self) -> bool {
        !self.draining && self.devices.iter().any(DeviceStatus::healthy)
    }

    /// Streams holding a slot, over every device.
    pub fn live_streams(&self) -> usize {
        self.devices.iter().map(|d| d.live_streams).sum()
    }

    /// Slots a new stream could take, over every device.
    pub fn free_slots(&self) -> usize {
        self.devices.iter().map(|d| d.free_slots).sum()
    }

    /// Slots of every device.
    pub fn max_streams(&self) -> usize {
        self.devices.iter().map(|d| d.max_streams).sum()
    }
}

/// One engine per device.
pub struct EnginePool {
    engines: Vec<Engine>,
    /// The model's dimensions (the same on every device), the slots of all of them, and a
    /// description of the devices.
    info: DecoderInfo,
    draining: AtomicBool,
    metrics: PoolMetrics,
}

impl From<Engine> for EnginePool {
    /// A pool of one engine.
    fn from(engine: Engine) -> Self {
        Self {
            info: engine.info().clone(),
            engines: vec![engine],
            draining: AtomicBool::new(false),
            metrics: PoolMetrics::default(),
        }
    }
}

impl EnginePool {
    /// Starts one engine per `(device, factory)`: the first alone (it fills the on-disk kernel
    /// cache that the others then read instead of writing it at once), the rest side by side.
    /// Fails, naming the device, when any of them fails to start.
    pub fn start(devices: Vec<(usize, DecoderFactory)>, config: EngineConfig) -> Result<Self> {
        let mut devices = devices.into_iter();
        let Some((device, factory)) = devices.next() else {
            return Err(Error::config(OP_START, "no device given"));
        };
        let mut engines = vec![start_named(device, factory, config.clone())?];
        let rest: Vec<Result<Engine>> = std::thread::scope(|scope| {
            let handles: Vec<_> = devices
                .map(|(device, factory)| {
                    let config = config.clone();
                    scope.spawn(move || start_named(device, factory, config))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(Error::config(OP_START, "an engine's start panicked"))
                    })
                })
                .collect()
        });
        for engine in rest {
            engines.push(engine?);
        }
        Self::new(engines)
    }

    /// A pool of engines already started; their device numbers must differ and they must serve
    /// the same model with the same queue bounds.
    pub fn new(engines: Vec<Engine>) -> Result<Self> {
        let Some(first) = engines.first() else {
            return Err(Error::config(OP_NEW, "no engine given"));
        };
        let (a, ca) = (first.info(), first.config());
        for (i, e) in engines.iter().enumerate() {
            if engines[..i].iter().any(|o| o.device() == e.device()) {
                return Err(Error::config(
                    OP_NEW,
                    format!("device {} is given twice", e.device()),
                ));
            }
            let (b, cb) = (e.info(), e.config());
            let model = |d: &DecoderInfo| (d.codebook_size, d.max_codebooks, d.latent_dim);
            let bounds = |c: &EngineConfig| (c.max_pending_frames, c.max_undelivered_frames);
            if model(a) != model(b) || bounds(ca) != bounds(cb) {
                return Err(Error::config(
                    OP_NEW,
                    format!(
                        "device {} (codebooks, codebook size, latent, queue bounds: {:?}, {:?}) \
                         differs from device {} ({:?}, {:?})",
                        e.device(),
                        model(b),
                        bounds(cb),
                        first.device(),
                        model(a),
                        bounds(ca)
                    ),
                ));
            }
        }
        let info = DecoderInfo {
            max_slots: engines.iter().map(|e| e.info().max_slots).sum(),
            largest_batch: engines
                .iter()
                .map(|e| e.info().largest_batch)
                .max()
                .unwrap_or(0),
            description: describe(&engines),
            ..a.clone()
        };
        Ok(Self {
            engines,
            info,
            draining: AtomicBool::new(false),
            metrics: PoolMetrics::default(),
        })
    }

    /// The model's dimensions; `max_slots` counts every device's slots.
    pub fn info(&self) -> &DecoderInfo {
        &self.info
    }

    /// The queue bounds (the same on every device).
    pub fn config(&self) -> &EngineConfig {
        // Both constructors refuse an empty pool.
        self.engines[0].config()
    }

    /// The engines, in the order given.
    pub fn engines(&self) -> &[Engine] {
        &self.engines
    }

    /// What the server counts outside any device.
    pub fn metrics(&self) -> &PoolMetrics {
        &self.metrics
    }

    /// Opens a stream on the engine with the most free slots (ties: the lowest index), or says at
    /// once why not: busy when every healthy device is full.
    pub fn open(&self, input: StreamInput) -> std::result::Result<Stream, StreamError> {
        if self.draining.load(Ordering::SeqCst) {
            return Err(StreamError::Draining);
        }
        let free: Vec<Option<usize>> = self
            .engines
            .iter()
            .map(|e| {
                let st = e.status();
                (!st.stopped && !st.draining).then_some(st.free_slots)
            })
            .collect();
        let mut full_slots = 0;
        for i in placement_order(&free) {
            match self.engines[i].open(input) {
                Ok(stream) => return Ok(stream),
                // Filled, drained or failed since its status was read: the next may have room.
                Err(StreamError::Busy { max_slots }) => full_slots += max_slots,
                Err(StreamError::Stopped | StreamError::Draining) => {}
                Err(e) => return Err(e),
            }
        }
        if full_slots > 0 {
            Err(StreamError::Busy {
                max_slots: full_slots,
            })
        } else if self.engines.iter().any(|e| e.status().draining) {
            Err(StreamError::Draining)
        } else {
            Err(StreamError::Stopped)
        }
    }

    /// Refuses new streams on every device from now on; open streams carry on.
    pub fn drain(&self) {
        self.draining.store(true, Ordering::SeqCst);
        for e in &self.engines {
            e.drain();
        }
    }

    /// Every device's gauges and state.
    pub fn status(&self) -> PoolStatus {
        let devices = self
            .engines
            .iter()
            .map(|e| {
                let st = e.status();
                let failure = match (st.failed, st.stopped) {
                    (true, _) => Some(e.failure().unwrap_or_else(|| STOPPED.into())),
                    (false, true) => Some(STOPPED.into()),
                    (false, false) => None,
                };
                DeviceStatus {
                    device: e.device(),
                    name: e.info().description.clone(),
                    max_streams: e.info().max_slots,
                    live_streams: st.live_streams,
                    free_slots: if failure.is_none() { st.free_slots } else { 0 },
                    failure,
                }
            })
            .collect();
        PoolStatus {
            devices,
            draining: self.draining.load(Ordering::SeqCst),
        }
    }

    /// Every engine's metrics in the Prometheus text format, each series labelled with its device.
    pub fn render_metrics(&self) -> String {
        let status = self.status();
        let series: Vec<DeviceSeries<'_>> = self
            .engines
            .iter()
            .zip(&status.devices)
            .map(|(e, st)| DeviceSeries {
                device: st.device,
                metrics: e.metrics(),
                live_streams: st.live_streams,
                free_slots: st.free_slots,
            })
            .collect();
        render(&series, &self.metrics.errors)
    }
}

/// Starts one engine, naming its device in a start-up error.
fn start_named(device: usize, factory: DecoderFactory, config: EngineConfig) -> Result<Engine> {
    Engine::start_on(device, factory, config)
        .map_err(|e| Error::config(OP_START, format!("device {device}: {e}")))
}

/// One description for the pool: the decoder's own when there is one device, `N x` it when every
/// device describes itself alike, else each device's.
fn describe(engines: &[Engine]) -> String {
    let first = engines
        .first()
        .map(|e| e.info().description.clone())
        .unwrap_or_default();
    if engines.iter().all(|e| e.info().description == first) {
        return match engines.len() {
            1 => first,
            n => format!("{n} x {first}"),
        };
    }
    engines
        .iter()
        .map(|e| format!("device {}: {}", e.device(), e.info().description))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The engines to try for a new stream: the most free slots first, ties to the lowest index;
/// `None` (an engine that takes no streams) is left out.
pub(crate) fn placement_order(free: &[Option<usize>]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..free.len()).filter(|&i| free[i].is_some()).collect();
    // A stable sort keeps index order among equals.
    order.sort_by_key(|&i| std::cmp::Reverse(free[i]));
    order
}

#[cfg(test)]
mod tests {
    use super::placement_order;

    #[test]
    fn most_free_slots_first_and_ties_to_the_lowest_index() {
        assert_eq!(placement_order(&[Some(3), Some(5), Some(5)]), [1, 2, 0]);
        assert_eq!(placement_order(&[Some(2), Some(2)]), [0, 1]);
        assert_eq!(placement_order(&[Some(0), None, Some(1)]), [2, 0]);
        assert!(placement_order(&[None, None]).is_empty());
    }
}
