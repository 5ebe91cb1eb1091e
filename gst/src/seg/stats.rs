//! The element's counters and latency record, read through the `stats` property and
//! reported on the bus.

use std::collections::VecDeque;
use std::sync::Weak;
use std::time::Duration;

use super::shared::SharedModel;

/// Latencies kept for the percentiles (the newest ones).
const WINDOW: usize = 1024;

/// What happened to the frames since the element started.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    /// Frames that reached the element.
    pub frames_in: u64,
    /// Frames pushed with their result.
    pub answered: u64,
    /// Live mode: frames dropped because a newer one replaced them or their deadline
    /// passed.
    pub dropped: u64,
    /// Frames discarded by a flush (a seek) before their result was pushed.
    pub flushed: u64,
    /// Frames whose run failed.
    pub failed: u64,
    /// Arrival-to-push latency of the newest answered frames.
    latencies: VecDeque<Duration>,
    /// The engine and provider in use, e.g. `ort/cpu`.
    pub provider: String,
    /// Drops already reported on the bus.
    pub dropped_reported: u64,
    /// The shared model (`model-instance-id`) and the element's source in it.
    pub shared: Option<(Weak<SharedModel>, String)>,
}

impl Stats {
    /// Fresh counters for a model running on `provider`.
    pub fn new(provider: String) -> Self {
        Self {
            provider,
            ..Self::default()
        }
    }

    /// Records one answered frame's latency.
    pub fn answered(&mut self, latency: Duration) {
        self.answered += 1;
        if self.latencies.len() == WINDOW {
            self.latencies.pop_front();
        }
        self.latencies.push_back(latency);
    }

    /// Nearest-rank percentile `p` (0..=100) of the recorded latencies.
    pub fn percentile(&self, p: f64) -> Option<Duration> {
        if self.latencies.is_empty() {
            return None;
        }
        let mut sorted: Vec<Duration> = self.latencies.iter().copied().collect();
        sorted.sort();
        let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
        Some(sorted[rank.clamp(1, sorted.len()) - 1])
    }

    /// The `stats` property's value.
    pub fn to_structure(&self) -> gst::Structure {
        let ms = |d: Option<Duration>| d.map_or(0.0, |d| d.as_secs_f64() * 1e3);
        let mut s = gst::Structure::builder("segtool/stats")
            .field("frames-in", self.frames_in)
            .field("answered", self.answered)
            .field("dropped", self.dropped)
            .field("flushed", self.flushed)
            .field("failed", self.failed)
            .field("latency-p50-ms", ms(self.percentile(50.0)))
            .field("latency-p99-ms", ms(self.percentile(99.0)))
            .field("provider", &self.provider);
        if let Some((model, source)) = &self.shared {
            if let Some(model) = model.upgrade() {
                let (runs, largest) = model.runs();
                s = s
                    .field("model-instance-id", &model.id)
                    .field("source", source)
                    .field("shared-elements", model.elements() as u32)
                    .field("model-opened-by", &model.opened_by)
                    .field("model-opens", model.opens)
                    .field("engine-runs", runs)
                    .field("largest-batch", largest as u32);
            }
        }
        s.build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut s = Stats::default();
        assert_eq!(s.percentile(50.0), None);
        for ms in 1..=100 {
            s.answered(Duration::from_millis(ms));
        }
        assert_eq!(s.percentile(50.0), Some(Duration::from_millis(50)));
        assert_eq!(s.percentile(99.0), Some(Duration::from_millis(99)));
        assert_eq!(s.answered, 100);
    }
}
