//! Timing one engine for auto: a frame of the deployment's size through the whole
//! pipeline (preprocess, engine, decode), one warm-up run, then up to [`RUNS`] timed runs
//! or until the engine's share of the time cap is spent, whichever comes first. The
//! median is the engine's figure.
//!
//! The cap ([`DEFAULT_BUDGET`], or `SEGTOOL_AUTO_BUDGET_S`) bounds the whole measurement:
//! each engine gets what is left divided by the engines still to time, and always at
//! least its warm-up and one timed run (an engine too slow for its share is measured
//! once, not skipped, so that the choice still sees it).

use std::time::{Duration, Instant};

use image::RgbImage;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::segmenter::{EngineKind, Segmenter};

/// Timed runs per engine, after the warm-up.
pub(in crate::segmenter) const RUNS: usize = 5;

/// The time cap for timing every engine, unless `SEGTOOL_AUTO_BUDGET_S` says otherwise.
pub(in crate::segmenter) const DEFAULT_BUDGET: Duration = Duration::from_secs(30);

/// The input size timed when neither the options (`fixed_size`) nor the graph fix one.
pub(in crate::segmenter) const DEFAULT_SIZE: (usize, usize) = (512, 512);

/// The largest frame auto times with (4096 x 4096 pixels): a larger fixed size is not
/// timed (its probe alone would take gigabytes), and a rule decides instead.
pub(in crate::segmenter) const MAX_PROBE_PIXELS: usize = 4096 * 4096;

/// What one engine measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(in crate::segmenter) struct Timing {
    pub engine: EngineKind,
    /// The median of the timed runs, in milliseconds.
    pub median_ms: f64,
    /// How many timed runs the median is of.
    pub runs: usize,
}

/// The time cap: `SEGTOOL_AUTO_BUDGET_S` (seconds, a positive number), else
/// [`DEFAULT_BUDGET`]; a value that does not parse is an error naming it.
pub(in crate::segmenter) fn budget() -> std::result::Result<Duration, String> {
    parse_budget(std::env::var("SEGTOOL_AUTO_BUDGET_S").ok().as_deref())
}

fn parse_budget(value: Option<&str>) -> std::result::Result<Duration, String> {
    match value {
        None => Ok(DEFAULT_BUDGET),
        Some(text) => match text.trim().parse::<f64>() {
            Ok(s) if s > 0.0 && s.is_finite() => Ok(Duration::from_secs_f64(s)),
            _ => Err(format!(
                "SEGTOOL_AUTO_BUDGET_S={text:?}: expected a positive number of seconds"
            )),
        },
    }
}

/// A frame to time with: a smooth pattern, so that no engine meets a degenerate input.
pub(in crate::segmenter) fn probe_frame((height, width): (usize, usize)) -> RgbImage {
    RgbImage::from_fn(width as u32, height as u32, |x, y| {
        image::Rgb([(x % 256) as u8, (y % 256) as u8, ((x + y) % 256) as u8])
    })
}

/// Times `segmenter` on `frame` until `deadline` (see the module docs).
pub(in crate::segmenter) fn time(
    segmenter: &mut Segmenter,
    engine: EngineKind,
    frame: &RgbImage,
    deadline: Instant,
) -> Result<Timing> {
    segmenter.segment(frame)?;
    let mut times = Vec::with_capacity(RUNS);
    while times.len() < RUNS {
        let start = Instant::now();
        segmenter.segment(frame)?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
        if Instant::now() >= deadline {
            break;
        }
    }
    Ok(Timing {
        engine,
        median_ms: median(&mut times),
        runs: times.len(),
    })
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// The timings as one line, fastest first: `onnxruntime 4.1 ms, tract 9.0 ms (median of
/// 5 runs each)`.
pub(in crate::segmenter) fn describe(timings: &[Timing]) -> String {
    let mut sorted: Vec<&Timing> = timings.iter().collect();
    sorted.sort_by(|a, b| a.median_ms.total_cmp(&b.median_ms));
    let parts: Vec<String> = sorted
        .iter()
        .map(|t| {
            let runs = match t.runs {
                1 => " (1 run)".to_string(),
                n if n < RUNS => format!(" ({n} runs)"),
                _ => String::new(),
            };
            format!("{} {:.1} ms{runs}", engine_name(t.engine), t.median_ms)
        })
        .collect();
    format!("{} (median of up to {RUNS} runs each)", parts.join(", "))
}

/// The engine's name as [`crate::expert::Engine::name`] gives it.
pub(in crate::segmenter) fn engine_name(kind: EngineKind) -> &'static str {
    match kind {
        EngineKind::Ort => "onnxruntime",
        other => other.as_str(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_the_report_line() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        let t = |engine, median_ms, runs| Timing {
            engine,
            median_ms,
            runs,
        };
        let line = describe(&[
            t(EngineKind::Tract, 9.04, RUNS),
            t(EngineKind::Ort, 4.06, RUNS),
            t(EngineKind::OpenVino, 30.0, 1),
        ]);
        assert_eq!(
            line,
            "onnxruntime 4.1 ms, tract 9.0 ms, openvino 30.0 ms (1 run) \
             (median of up to 5 runs each)"
        );
    }

    #[test]
    fn the_budget_is_a_positive_number_of_seconds_or_the_default() {
        assert_eq!(parse_budget(None), Ok(DEFAULT_BUDGET));
        assert_eq!(parse_budget(Some("2.5")), Ok(Duration::from_millis(2500)));
        for bad in ["-1", "0", "soon", "inf"] {
            let e = parse_budget(Some(bad)).unwrap_err();
            assert!(e.contains("SEGTOOL_AUTO_BUDGET_S"), "{e}");
        }
    }
}
