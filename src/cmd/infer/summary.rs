//! The lines `segtool infer` ends with: the run's summary and the images it skipped.

use segtool_model_spec::process::memory_kib;

use super::pipeline::{Busy, Failure, Stage};

/// `; 12 batches, mean batch 3.50` for a batch server, nothing for one session.
pub(super) fn batching_note(stage: &Stage) -> String {
    match stage {
        Stage::Server(server) => {
            let stats = server.stats();
            format!(
                "; {} batches, mean batch {:.2}",
                stats.batches(),
                stats.mean_batch_size()
            )
        }
        Stage::Single(_) => String::new(),
    }
}

/// The run's summary: images, throughput, the engine, busy time per stage and the peak
/// RSS (what a robot or edge box has to budget for).
pub(super) fn summary_line(
    images: usize,
    target: &str,
    wall: f64,
    engine: &str,
    busy: &Busy,
    flicker: &str,
) -> String {
    let peak = memory_kib("VmHWM")
        .map(|kib| format!("; peak RSS {} MiB", kib / 1024))
        .unwrap_or_default();
    format!(
        "{images} image(s) -> {target} in {wall:.2} s ({:.1} img/s, {engine}; busy s: \
         decode {:.2}, normalise {:.2}, engine {:.2}, post+write {:.2}{peak}){flicker}",
        images as f64 / wall.max(1e-9),
        busy.decode.as_secs_f64(),
        busy.normalise.as_secs_f64(),
        busy.engine.as_secs_f64(),
        busy.post.as_secs_f64(),
    )
}

/// `processed 7 images, 2 failed: a.png, b.png` (the first few failed files named; each
/// was reported with its reason when it was skipped).
pub(super) fn skipped_summary(processed: usize, skipped: &[Failure]) -> String {
    const NAMED: usize = 10;
    let plural = |n: usize| if n == 1 { "image" } else { "images" };
    let mut names: Vec<String> = skipped
        .iter()
        .take(NAMED)
        .map(|f| f.path.display().to_string())
        .collect();
    if skipped.len() > NAMED {
        names.push(format!("and {} more", skipped.len() - NAMED));
    }
    format!(
        "processed {processed} {}, {} failed: {}",
        plural(processed),
        skipped.len(),
        names.join(", ")
    )
}
