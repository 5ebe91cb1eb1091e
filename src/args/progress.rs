//! The training loops' progress on stderr: an indicatif bar on a terminal, else the
//! loops' plain progress lines.

use std::sync::OnceLock;

use indicatif::ProgressBar;
use segtool_train::progress::Progress;

/// One loop's bar, drawn from its first [`Progress::start`].
#[derive(Default)]
pub struct Bar(OnceLock<ProgressBar>);

impl Bar {
    fn with(&self, f: impl FnOnce(&ProgressBar)) {
        if let Some(bar) = self.0.get() {
            f(bar);
        }
    }
}

impl Progress for Bar {
    fn start(&self, total: u64, done: u64) {
        let bar = segtool_train::trainer::progress_bar(total, true);
        bar.set_position(done);
        bar.reset_eta();
        let _ = self.0.set(bar);
    }

    fn advance(&self) {
        self.with(|b| b.inc(1));
    }

    fn message(&self, text: String) {
        self.with(|b| b.set_message(text));
    }

    fn line(&self, text: String) {
        // No terminal (CI logs, pipes): indicatif draws nothing, the lines stand in.
        self.with(|b| {
            if b.is_hidden() {
                eprintln!("{text}");
            }
        });
    }

    fn finish(&self, text: Option<String>) {
        self.with(|b| match text {
            Some(text) => b.finish_with_message(text),
            None => b.finish(),
        });
    }
}
