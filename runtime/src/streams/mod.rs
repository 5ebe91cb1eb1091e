//! The streams that feed a [`BatchServer`]: frames in order ([`OrderedStream`]), the
//! newest frame of a live camera ([`LatestStream`]), and many cameras on one model
//! ([`MultiStream`]). Each is a way of submitting to the server's queue and collecting
//! its answers; the public face is [`crate::batching`].

mod latest;
mod multi;
mod ordered;

pub use latest::{Backlog, DropReason, Latency, LatestStats, LatestStream, LiveFrame, LiveOutcome};
pub use multi::{MultiStream, SourceConfig, SourceError, SourceFrame, SourceStats};
pub use ordered::OrderedStream;

use crate::server::BatchServer;

impl BatchServer {
    /// An ordered stream with at most `window` frames pushed but not yet collected
    /// (at least 1); see [`OrderedStream`].
    pub fn ordered_stream(&self, window: usize) -> OrderedStream {
        OrderedStream::new(self.queue(), window)
    }

    /// A newest-frame stream holding at most `slot` frames not yet started (at least
    /// 1): a newer frame replaces the oldest of them; see [`LatestStream`].
    pub fn latest_stream(&self, slot: usize) -> LatestStream {
        LatestStream::new(self.queue(), slot)
    }

    /// Many cameras on this server's model: named sources, each with its own slot and
    /// deadline, batched across the cameras (see [`MultiStream`]).
    pub fn multi_stream(&self) -> MultiStream {
        MultiStream::new(self.queue())
    }
}
