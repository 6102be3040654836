//! The encode engines of several devices behind one front ([`crate::stage::pool`]): a new stream
//! opens on the healthy device with the most free slots and stays there; busy only when every
//! device is full. A one-device server is a pool of one.

use std::sync::Arc;

use chorus_core::Result;

use super::engine::{
    EncodeConfig, EncodeEngine, EncodeError, EncodeInfo, EncodeStream, EncoderFactory,
};
use super::metrics::EncodeMetrics;
use crate::stage::pool::{
    start_pool, Capacity, DeviceStage, MemberStatus, Seat, StagePool, Tried, Unplaced,
};

/// One encode engine per device.
pub struct EncodePool {
    pool: StagePool<Arc<EncodeEngine>>,
    /// The encoder's dimensions; `max_streams` counts every device, `description` names them.
    info: EncodeInfo,
    /// Connection counters (wire bytes, errors): the device's own with one device.
    metrics: Arc<EncodeMetrics>,
}

impl From<Arc<EncodeEngine>> for EncodePool {
    /// A pool of one engine.
    fn from(engine: Arc<EncodeEngine>) -> Self {
        let capacity = Capacity {
            seats: engine.info().max_streams,
            blocks: 0,
        };
        let health = engine.health().clone();
        let pool = StagePool::new(vec![(engine.device(), engine, capacity, health)])
            // A pool of one device cannot name it twice.
            .unwrap_or_else(|_| unreachable!("one device"));
        Self::from_pool(pool)
    }
}

impl EncodePool {
    /// Starts one encode engine per device (the first alone, the rest side by side); fails,
    /// naming the device, when any fails to start.
    pub fn start_on(
        devices: Vec<DeviceStage<EncoderFactory>>,
        config: EncodeConfig,
    ) -> Result<Self> {
        let pool = start_pool(devices, |d, health| {
            let engine =
                EncodeEngine::start_watched(d.device, d.factory, config.clone(), d.fault, health)?;
            let capacity = Capacity {
                seats: engine.info().max_streams,
                blocks: 0,
            };
            Ok((engine, capacity))
        })?;
        Ok(Self::from_pool(pool))
    }

    fn from_pool(pool: StagePool<Arc<EncodeEngine>>) -> Self {
        let metrics = pool.front_metrics(|m| m.metrics());
        let first = pool.first();
        let description = match pool.len() {
            1 => first.info().description.clone(),
            n => format!("{n} x {}", first.info().description),
        };
        let info = EncodeInfo {
            description,
            max_streams: pool.total(|m| m.info().max_streams),
            ..first.info().clone()
        };
        Self {
            pool,
            info,
            metrics,
        }
    }

    pub fn info(&self) -> &EncodeInfo {
        &self.info
    }

    /// The queue bounds (the same on every device).
    pub fn config(&self) -> &EncodeConfig {
        self.pool.first().config()
    }

    /// Connection counters (wire bytes, errors).
    pub fn metrics(&self) -> &Arc<EncodeMetrics> {
        &self.metrics
    }

    /// Streams holding a slot, over every device.
    pub fn live_streams(&self) -> usize {
        self.pool
            .members()
            .iter()
            .map(|m| m.engine.live_streams())
            .sum()
    }

    /// Every device's slots and health.
    pub fn devices(&self) -> Vec<MemberStatus> {
        let live: Vec<usize> = self
            .pool
            .members()
            .iter()
            .map(|m| m.engine.live_streams())
            .collect();
        let mut status = self.pool.status();
        // The engine's own count: a slot stays taken until its worker frees it.
        for (s, l) in status.iter_mut().zip(live) {
            s.live = l;
        }
        status
    }

    /// Refuses new streams on every device from now on.
    pub fn drain(&self) {
        for m in self.pool.members() {
            m.engine.drain();
        }
    }

    /// Opens a stream on the device with the most free slots (validated by the caller).
    pub fn open(
        &self,
        n_q: usize,
        latents: bool,
    ) -> std::result::Result<PooledStream, EncodeError> {
        let placed = self
            .pool
            .place(0, |engine, seat| match engine.open(n_q, latents) {
                Ok(stream) => Tried::Placed(PooledStream {
                    stream,
                    _seat: seat,
                }),
                Err(e @ (EncodeError::Busy(_) | EncodeError::Failed(_))) => Tried::Next(e),
                Err(e) => Tried::Final(e),
            });
        placed.map_err(|u| match u {
            Unplaced::Refused(e) => e,
            Unplaced::AllFull(_) => EncodeError::Busy(self.info.max_streams),
            Unplaced::NoDevice(why) => EncodeError::Failed(format!("no device encodes now: {why}")),
        })
    }

    /// Appends the encode metrics: one device's as they are, several labelled by device.
    pub fn render_metrics(&self, out: &mut String) {
        self.pool.render_metrics(
            out,
            |e, out| out.push_str(&e.metrics().render(e.live_streams(), e.info().max_streams)),
            |out| out.push_str(&self.metrics.render_front()),
        );
    }
}

/// An encode stream and its seat on its device.
pub struct PooledStream {
    stream: EncodeStream,
    _seat: Seat,
}

impl std::ops::Deref for PooledStream {
    type Target = EncodeStream;

    fn deref(&self) -> &EncodeStream {
        &self.stream
    }
}

impl std::ops::DerefMut for PooledStream {
    fn deref_mut(&mut self) -> &mut EncodeStream {
        &mut self.stream
    }
}
