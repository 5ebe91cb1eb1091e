//! Progress of a training loop, reported to whoever drives it: the library draws and
//! prints nothing itself; the `segtool` binary draws an indicatif bar (or, with no
//! terminal, writes the [`Progress::line`]s to stderr).

/// Receives a loop's progress ([`crate::run::run`], [`crate::Trainer::train_with`]).
/// Every method has a default that ignores it. Called from the training thread only.
pub trait Progress: Send + Sync {
    /// A loop of `total` iterations starts with `done` of them already done (a resume).
    fn start(&self, _total: u64, _done: u64) {}
    /// One more iteration done.
    fn advance(&self) {}
    /// A short status for a bar: loss, learning rate, ...
    fn message(&self, _text: String) {}
    /// A progress line for logs, meant for when no bar can be drawn (no terminal): every
    /// `log.every` iterations in a run, every 10% in [`crate::Trainer::train_with`].
    fn line(&self, _text: String) {}
    /// The loop ended, with a closing status when it has one.
    fn finish(&self, _text: Option<String>) {}
}

/// Reports nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct Silent;

impl Progress for Silent {}
