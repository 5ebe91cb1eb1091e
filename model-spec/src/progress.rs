//! Progress of a long loop (training, evaluation, calibration passes), reported to
//! whoever drives it. Libraries draw and print nothing themselves; the `segtool` binary
//! draws an indicatif bar (or, with no terminal, writes the [`Progress::line`]s to
//! stderr), an embedding program logs or ignores it.

use std::fmt;
use std::sync::Arc;

/// Receives a loop's progress. Every method has a default that ignores it, so an
/// implementation picks what it shows. One reporter may see several loops in turn (a
/// calibration's range pass, then its histogram pass): each begins with
/// [`Progress::start`].
pub trait Progress: Send + Sync {
    /// A loop named `what` ("train", "eval", "range", ...) of `total` steps starts with
    /// `done` of them already done (a resume).
    fn start(&self, _what: &str, _total: u64, _done: u64) {}
    /// `n` more steps done.
    fn advance(&self, _n: u64) {}
    /// A short status for a bar: loss, learning rate, ...
    fn message(&self, _text: String) {}
    /// A progress line for logs, meant for when no bar can be drawn (no terminal).
    fn line(&self, _text: String) {}
    /// The loop ended, with a closing status when it has one.
    fn finish(&self, _text: Option<String>) {}
}

/// Reports nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct Silent;

impl Progress for Silent {}

/// A shared reporter that options structs can hold (they derive `Clone` and `Debug`);
/// the default is [`Silent`].
#[derive(Clone)]
pub struct Reporter(pub Arc<dyn Progress>);

impl Reporter {
    /// Reports to `progress`.
    pub fn new(progress: Arc<dyn Progress>) -> Self {
        Self(progress)
    }
}

impl Default for Reporter {
    fn default() -> Self {
        Self(Arc::new(Silent))
    }
}

impl fmt::Debug for Reporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Reporter")
    }
}

impl std::ops::Deref for Reporter {
    type Target = dyn Progress;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}
