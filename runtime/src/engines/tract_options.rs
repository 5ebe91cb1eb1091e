//! [`TractOptions`]: how a tract engine runs. Outside `engines::tract` so that
//! [`crate::SegmenterOptions`] has the same fields in builds without the `tract` feature.

/// How a tract engine (`TractEngine`) runs. Start from [`TractOptions::new`] (the defaults).
///
/// ```
/// use segtool_runtime::TractOptions;
/// // A file from elsewhere whose first input and output are not the image and the scores.
/// let options = TractOptions::new().with_threads(2).with_io_names("pixel_values", "logits");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TractOptions {
    /// Threads of the engine's pool; `None` (default): all cores
    /// (`std::thread::available_parallelism`). 1 runs on the calling thread alone.
    pub threads: Option<usize>,
    /// The graph input to feed and output to read (a model card's); `None`: the first
    /// of each.
    pub io_names: Option<(String, String)>,
}

impl TractOptions {
    /// The defaults: all cores.
    pub fn new() -> Self {
        Self::default()
    }

    /// `n` threads for this engine's pool (0 means the default, all cores).
    pub fn with_threads(mut self, n: usize) -> Self {
        self.threads = (n > 0).then_some(n);
        self
    }

    /// Feeds input `input` and reads output `output` (a model card's names).
    pub fn with_io_names(mut self, input: impl Into<String>, output: impl Into<String>) -> Self {
        self.io_names = Some((input.into(), output.into()));
        self
    }

    /// The thread count the engine will use.
    pub fn resolved_threads(&self) -> usize {
        self.threads.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        })
    }
}
