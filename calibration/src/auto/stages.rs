//! The stages of [`auto_calibrate`](super::auto_calibrate), one function each: the
//! checks of its inputs, the ranking of the layers, the search, the timing and the
//! final check. The table they fill ([`Table`]) is the trade-off the result reports.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use ndarray::Array4;
use segtool_onnx::proto::ModelProto;

use super::engine::{MixEngine, MixSession};
use super::evaluator::{Evaluator, Score};
use super::search::{search_bound, search_widening, Measured, Search};
use super::{AutoOptions, Candidate, FinalCheck, Row, RowKind, Target, Trial};
use crate::report::CompareOptions;
use crate::{qdq, rewrite_with, Calibrated, CalibrationError, CalibrationOptions, Feed};

/// Refuses what the search cannot measure honestly: no images, a validation image that
/// also calibrates, a target out of range, a speed target that nothing times, fractions
/// outside [0, 1).
pub(super) fn check_inputs(
    calib_images: &[PathBuf],
    val_images: &[PathBuf],
    auto: &AutoOptions,
) -> Result<(), CalibrationError> {
    let input = |s: String| Err(CalibrationError::Input(s));
    if calib_images.is_empty() || val_images.is_empty() {
        return input(
            "--auto needs calibration images and held-out validation images (at least one each)"
                .into(),
        );
    }
    let calib_set: HashSet<PathBuf> = calib_images.iter().map(|p| canonical(p)).collect();
    if let Some(p) = val_images
        .iter()
        .find(|p| calib_set.contains(&canonical(p)))
    {
        return input(format!(
            "{}: a validation image is also a calibration image (the target must be measured on held-out images)",
            p.display()
        ));
    }
    match auto.target {
        Target::MinAgreement(a) if !(0.0..=1.0).contains(&a) => {
            return input(format!("--min-agreement {a} is not a fraction in [0, 1]"))
        }
        Target::MaxMiouDrop(p) if !(p >= 0.0) => {
            return input(format!("--max-miou-drop {p} must be >= 0 (mIoU points)"))
        }
        Target::MaxMiouDrop(_) if auto.labels.is_none() => {
            return input("--max-miou-drop needs --labels (masks of the validation images)".into())
        }
        _ => {}
    }
    match auto.min_speedup {
        Some(s) if !(s > 0.0 && s.is_finite()) => {
            return input(format!("--min-speedup {s} must be a speed-up above 0"))
        }
        // An untimed speed target could only pass unchecked.
        Some(s) if auto.latency_runs == 0 => {
            return input(format!(
                "--min-speedup {s} needs timing: --latency-runs must be at least 1"
            ))
        }
        _ => {}
    }
    if !(0.0..1.0).contains(&auto.final_check) || !(0.0..1.0).contains(&auto.confidence) {
        return input(format!(
            "--final-check {} and --confidence {} must be fractions in [0, 1)",
            auto.final_check, auto.confidence
        ));
    }
    Ok(())
}

fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// Every quantised layer, worst SNR against fp32 first (the calibration report's
/// ranking, on the calibration images); ties in graph order.
pub(super) fn rank_layers(
    model: &ModelProto,
    cal: &Calibrated,
    calib_images: &[PathBuf],
    feed: &Feed,
    calib: &CalibrationOptions,
    auto: &AutoOptions,
) -> Result<Vec<Candidate>, CalibrationError> {
    let g = qdq::graph(model)?;
    let snr = crate::report::compare(
        model,
        &cal.model,
        &cal.plan.layer_outputs,
        calib_images,
        feed,
        calib.method.name(),
        &CompareOptions {
            samples: auto.snr_samples.max(1),
            labels: None,
            latency_runs: 0,
            threads: calib.threads,
        },
    )?;
    let by_output: BTreeMap<&str, (f64, f64)> = snr
        .layers
        .iter()
        .map(|l| (l.name.as_str(), (l.snr_db, l.cosine)))
        .collect();
    let mut ranked: Vec<(usize, Candidate)> = cal
        .plan
        .nodes
        .iter()
        .zip(&cal.plan.layer_outputs)
        .enumerate()
        .map(|(order, (&idx, out))| {
            let (snr_db, cosine) = by_output.get(out.as_str()).copied().unwrap_or((200.0, 1.0));
            let node = g.node[idx].name.clone();
            let output = out.clone();
            (
                order,
                Candidate {
                    node,
                    output,
                    snr_db,
                    cosine,
                    cost: None,
                },
            )
        })
        .collect();
    ranked.sort_by(|(oa, a), (ob, b)| a.snr_db.total_cmp(&b.snr_db).then(oa.cmp(ob)));
    Ok(ranked.into_iter().map(|(_, c)| c).collect())
}

/// The model with `float` (and `--keep-float`) left in float and every other layer of the
/// plan quantised with the calibration's thresholds, encoded.
pub(super) fn mix_bytes(
    model: &ModelProto,
    cal: &Calibrated,
    calib: &CalibrationOptions,
    float: &[String],
) -> Result<Vec<u8>, CalibrationError> {
    let keep = [&calib.keep_float[..], float].concat();
    let plan = qdq::plan(model, &keep, calib.layout)?;
    let m = rewrite_with(model, &plan, &cal.thresholds, calib, cal.samples, &keep)?;
    Ok(prost::Message::encode_to_vec(&m))
}

/// The trade-off table as it fills: rows and their models in the same order (fp32,
/// all-INT8, then each step of the search), and the row chosen so far.
pub(super) struct Table {
    pub(super) rows: Vec<Row>,
    pub(super) models: Vec<Vec<u8>>,
    pub(super) chosen: Option<usize>,
}

impl Table {
    /// fp32 and all-INT8, the latter measured; all-INT8 is chosen when it meets the
    /// target.
    pub(super) fn start(
        ev: &Evaluator,
        fp32: &[u8],
        int8: &[u8],
        auto: &AutoOptions,
    ) -> Result<Self, CalibrationError> {
        let s = ev.evaluate(int8)?;
        let fp32_row = Row {
            kind: RowKind::Fp32,
            float_layers: Vec::new(),
            agreement: 1.0,
            agreement_bound: 1.0,
            miou: ev.miou_fp32,
            latency_ms: 0.0,
            size_bytes: fp32.len() as u64,
            meets_target: true,
        };
        let int8_row = Row {
            kind: RowKind::Int8,
            float_layers: Vec::new(),
            agreement: s.agreement,
            agreement_bound: s.bound,
            miou: s.miou,
            latency_ms: 0.0,
            size_bytes: int8.len() as u64,
            meets_target: meets(auto, ev, &s),
        };
        let chosen = int8_row.meets_target.then_some(1);
        Ok(Self {
            rows: vec![fp32_row, int8_row],
            models: vec![fp32.to_vec(), int8.to_vec()],
            chosen,
        })
    }

    /// Times every row's model on `x`, interleaved in rounds; medians.
    pub(super) fn time(
        &mut self,
        x: &Array4<f32>,
        engine: &MixEngine,
        threads: Option<usize>,
        auto: &AutoOptions,
    ) -> Result<(), CalibrationError> {
        let mut sessions = self
            .models
            .iter()
            .map(|m| MixSession::open(engine, m, threads, None))
            .collect::<Result<Vec<_>, _>>()?;
        for s in sessions.iter_mut() {
            for _ in 0..2 {
                s.run_discard(x.view())?;
            }
        }
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); sessions.len()];
        for _ in 0..auto.latency_rounds.max(1) {
            for (s, t) in sessions.iter_mut().zip(times.iter_mut()) {
                for _ in 0..auto.latency_runs {
                    let start = Instant::now();
                    s.run_discard(x.view())?;
                    t.push(start.elapsed().as_secs_f64() * 1e3);
                }
            }
        }
        for (row, mut t) in self.rows.iter_mut().zip(times) {
            t.sort_by(f64::total_cmp);
            row.latency_ms = t[t.len() / 2];
        }
        Ok(())
    }

    /// When the chosen mix runs slower than fp32, chooses the fastest row that meets the
    /// target and beats fp32, else fp32 itself; returns the mix passed over. Nothing
    /// changes when nothing was timed or no mix was chosen.
    pub(super) fn prefer_faster_than_fp32(&mut self) -> Option<usize> {
        let chosen = self.chosen.filter(|&i| i > 0)?;
        let fp32 = self.rows[0].latency_ms;
        if fp32 <= 0.0 || self.rows[chosen].latency_ms < fp32 {
            return None;
        }
        let faster = (1..self.rows.len())
            .filter(|&i| self.rows[i].meets_target && self.rows[i].latency_ms < fp32)
            .min_by(|&a, &b| self.rows[a].latency_ms.total_cmp(&self.rows[b].latency_ms));
        self.chosen = Some(faster.unwrap_or(0));
        Some(chosen)
    }
}

fn meets(auto: &AutoOptions, ev: &Evaluator, s: &Score) -> bool {
    auto.target.met_by(s.bound, s.miou, ev.miou_fp32)
}

fn metric(auto: &AutoOptions, s: &Score) -> f64 {
    match auto.target {
        Target::MinAgreement(_) => s.bound,
        Target::MaxMiouDrop(_) => s.miou.unwrap_or(f64::NEG_INFINITY),
    }
}

/// The search over the worst `auto.candidates` layers, widened to every layer when no mix
/// of those meets the target (module docs, step 3). Adds a row per mix measured, the
/// chosen one first when one meets the target; returns the layers searched and the
/// trials in order.
pub(super) fn search(
    table: &mut Table,
    ev: &Evaluator,
    model: &ModelProto,
    cal: &Calibrated,
    every_layer: &[Candidate],
    calib: &CalibrationOptions,
    auto: &AutoOptions,
) -> Result<(Vec<Candidate>, Vec<Trial>), CalibrationError> {
    let candidates: Vec<Candidate> = every_layer.iter().take(auto.candidates).cloned().collect();
    if candidates.is_empty() {
        return Ok((candidates, Vec::new()));
    }
    let mix = |float: &[String]| mix_bytes(model, cal, calib, float);
    let progress = &calib.progress;
    // At most: the candidates' search, then (widened) every layer's.
    let bound = search_bound(candidates.len())
        + match every_layer.len() > candidates.len() {
            true => search_bound(every_layer.len()),
            false => 0,
        };
    progress.start("search", bound as u64, 0);
    let started = Instant::now();
    let mut trials: Vec<Trial> = Vec::new();
    let mut measure = |set: &[String], what: String| -> Result<Measured, CalibrationError> {
        let bytes = mix(set)?;
        let score = ev.evaluate(&bytes)?;
        let ok = meets(auto, ev, &score);
        trials.push(Trial {
            step: trials.len() + 1,
            layer: what.clone(),
            agreement: score.agreement,
            agreement_bound: score.bound,
            miou: score.miou,
        });
        let done = trials.len();
        let elapsed = started.elapsed().as_secs_f64();
        let left = elapsed / done as f64 * bound.saturating_sub(done) as f64;
        let figure = metric(auto, &score);
        progress.advance(1);
        progress.message(format!("{what}: {} {figure:.4}", auto.target.metric_name()));
        progress.line(format!(
            "evaluation {done} (at most {bound}): {what}, {} {figure:.4}{}; {elapsed:.0} s, at most ~{left:.0} s left",
            super::metric_label(auto),
            if ok { ", meets the target" } else { "" },
        ));
        Ok(Measured {
            float: set.to_vec(),
            agreement: score.agreement,
            agreement_bound: score.bound,
            miou: score.miou,
            ok,
            bytes,
        })
    };
    let nodes = |c: &[Candidate]| c.iter().map(|c| c.node.clone()).collect::<Vec<_>>();
    let widening = format!(
        "no mix of the {} worst layers meets {}: widening the search to all {} quantised layers",
        candidates.len(),
        auto.target.describe(),
        every_layer.len()
    );
    let (found, widened) = search_widening(
        &nodes(&candidates),
        &nodes(every_layer),
        &mut measure,
        &mut || progress.line(widening.clone()),
    )?;
    progress.finish(None);
    let Search {
        measured,
        reachable,
    } = found;
    // Rows: the chosen mix first among the steps when one meets the target.
    for m in measured {
        table.rows.push(Row {
            kind: RowKind::Step(m.float.len()),
            float_layers: m.float,
            agreement: m.agreement,
            agreement_bound: m.agreement_bound,
            miou: m.miou,
            latency_ms: 0.0,
            size_bytes: m.bytes.len() as u64,
            meets_target: m.ok,
        });
        table.models.push(m.bytes);
    }
    table.chosen = reachable.then_some(2);
    let searched = match widened {
        true => every_layer.to_vec(),
        false => candidates,
    };
    Ok((searched, trials))
}

/// `model` on the images held out of the search (module docs, step 5).
pub(super) fn final_check(
    check: &Evaluator,
    model: &[u8],
    auto: &AutoOptions,
) -> Result<FinalCheck, CalibrationError> {
    let s = check.evaluate(model)?;
    Ok(FinalCheck {
        images: check.len(),
        agreement: s.agreement,
        miou: s.miou,
        miou_fp32: check.miou_fp32,
        meets_target: auto.target.met_by(s.agreement, s.miou, check.miou_fp32),
    })
}

/// How the result names where it measured: `ONNX Runtime CPU, 2 threads`.
pub(super) fn engine_label(engine: &MixEngine, threads: Option<usize>) -> String {
    match engine.threads(threads) {
        Some(n) => format!("{engine}, {n} thread(s)"),
        None => format!("{engine}, the engine's default threads"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(rows: &[(RowKind, f64, bool)], chosen: Option<usize>) -> Table {
        let rows = rows
            .iter()
            .map(|&(kind, latency_ms, meets_target)| Row {
                kind,
                float_layers: Vec::new(),
                agreement: 1.0,
                agreement_bound: 1.0,
                miou: None,
                latency_ms,
                size_bytes: 1,
                meets_target,
            })
            .collect::<Vec<_>>();
        let models = (0..rows.len()).map(|i| vec![i as u8]).collect();
        Table {
            rows,
            models,
            chosen,
        }
    }

    #[test]
    fn a_mix_slower_than_fp32_is_passed_over_for_the_fastest_that_meets_the_target() {
        use RowKind::*;
        let rows = [
            (Fp32, 10.0, true),
            (Int8, 4.0, false),
            (Step(2), 12.0, true),
            (Step(3), 8.0, true),
            (Step(4), 9.0, true),
        ];
        let mut t = table(&rows, Some(2));
        assert_eq!(t.prefer_faster_than_fp32(), Some(2));
        assert_eq!(t.chosen, Some(3));

        // No mix that meets the target beats fp32: fp32 itself.
        let slow = [
            (Fp32, 10.0, true),
            (Int8, 4.0, false),
            (Step(2), 10.0, true),
        ];
        let mut t = table(&slow, Some(2));
        assert_eq!(t.prefer_faster_than_fp32(), Some(2));
        assert_eq!(t.chosen, Some(0));

        // Faster, untimed, or nothing chosen: unchanged.
        let mut t = table(&rows[..4], Some(3));
        assert_eq!((t.prefer_faster_than_fp32(), t.chosen), (None, Some(3)));
        let untimed = [(Fp32, 0.0, true), (Int8, 0.0, true)];
        let mut t = table(&untimed, Some(1));
        assert_eq!((t.prefer_faster_than_fp32(), t.chosen), (None, Some(1)));
        let mut t = table(&rows, None);
        assert_eq!((t.prefer_faster_than_fp32(), t.chosen), (None, None));
    }
}
