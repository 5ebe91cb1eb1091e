//! The libraries' progress on stderr: an indicatif bar per loop on a terminal, else the
//! loops' plain progress lines.

use std::sync::Mutex;

use indicatif::{ProgressBar, ProgressStyle};
use segtool_model_spec::progress::Progress;

/// Draws each loop it is told about ([`Progress::start`]) as a bar with rate and ETA,
/// replacing the previous loop's.
#[derive(Default)]
pub struct Bar(Mutex<Option<ProgressBar>>);

impl Bar {
    fn with(&self, f: impl FnOnce(&ProgressBar)) {
        if let Some(bar) = self.0.lock().expect("progress bar lock").as_ref() {
            f(bar);
        }
    }
}

impl Progress for Bar {
    fn start(&self, what: &str, total: u64, done: u64) {
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template(
                "{prefix:>9} [{bar:30}] {pos}/{len} {per_sec} ETA {eta} {msg}",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        bar.set_prefix(what.to_string());
        bar.set_position(done);
        bar.reset_eta();
        if let Some(old) = self.0.lock().expect("progress bar lock").replace(bar) {
            old.finish_and_clear();
        }
    }

    fn advance(&self, n: u64) {
        self.with(|b| b.inc(n));
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
