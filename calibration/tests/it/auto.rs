//! `--auto` and `compare` mechanics on a hand-made three-conv model whose INT8 damage has
//! two known sources: an outlier channel (x1000) in conv_b's input and a milder one (x30)
//! in conv_c's, each channel ignored by the conv that reads it (so fp32 is unaffected,
//! but a per-tensor int8 scale crushes the other channels). Keeping conv_b, then conv_c
//! float repairs it; the search must find the fewest float layers meeting the target,
//! which an exhaustive check over every subset confirms.

use std::path::{Path, PathBuf};

use prost::Message;
use segtool_calibration::auto::{
    auto_calibrate, final_check_split, holdout_split, AutoOptions, MixEngine, RowKind, Target,
};
use segtool_calibration::compare::{compare_models, CompareOptions};
use segtool_calibration::session::OrtModel;
use segtool_calibration::{calibrate, model_spec, CalibrationOptions, Feed, Method};
use segtool_onnx::proto::{
    tensor_value_info, DataType, Dim, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
    StringStringEntryProto, TensorProto,
};
use segtool_runtime::expert::{run_logits, OpenVinoEngine};
use segtool_runtime::openvino::{OpenVinoOptions, Precision};

mod fixture;
use fixture::*;

#[test]
fn auto_keeps_the_fewest_float_layers_that_meet_the_target() {
    let dir = tempfile::tempdir().unwrap();
    let model = chain_model();
    let fp32 = model.encode_to_vec();
    let images = write_images(dir.path(), 12);
    let (calib, val) = holdout_split(&images);
    assert_eq!((calib.len(), val.len()), (6, 6));
    assert_eq!(val[0], images[1]);

    let (by_subset, layers) = every_subset(&model, &fp32, &calib, &val);
    let best_of = |k: usize| {
        by_subset
            .iter()
            .filter(|(s, _)| s.len() == k)
            .map(|(_, a)| *a)
            .fold(0.0, f64::max)
    };
    let (int8, one, two) = (best_of(0), best_of(1), best_of(2));
    assert!(
        int8 < one && one < two,
        "the model should need two float layers: {int8} {one} {two}"
    );
    let target = (one + two) / 2.0;
    let auto = search_needs_two_layers(&model, &calib, &val, &by_subset, target, int8, one);
    timed_choice_is_never_slower(&model, &fp32, &calib, &val, &auto);
    // A target all-INT8 meets: no float layer.
    let easy = AutoOptions {
        target: Target::MinAgreement(int8 * 0.99),
        latency_runs: 0,
        ..auto.clone()
    };
    let r = auto_calibrate(&model, &calib, &val, &opts(), &easy).unwrap();
    assert_eq!(r.chosen, Some(1));
    assert_eq!(r.rows.len(), 2);

    // Out of reach of the one worst candidate: the search widens to every quantised
    // layer (all float is a valid answer) and finds the pair.
    let narrow = AutoOptions {
        candidates: 1,
        latency_runs: 0,
        ..auto.clone()
    };
    let r = auto_calibrate(&model, &calib, &val, &opts(), &narrow).unwrap();
    let chosen = r.chosen.expect("the widened search meets the target");
    assert_eq!(r.rows[chosen].float_layers.len(), 2, "{}", r.to_text());
    assert!(r.rows[chosen].agreement >= target);
    assert_eq!(r.candidates.len(), layers.len());

    // Validation images must be held out.
    let err = auto_calibrate(&model, &calib, &calib[..2], &opts(), &auto).unwrap_err();
    assert!(
        err.to_string().contains("also a calibration image"),
        "{err}"
    );
}

/// Every subset of the three quantised convs kept float, measured independently of the
/// search: `(subset, agreement)` per subset, and the layers' names.
/// Each layer's cost is what quantising it alone does to fp32's decisions, measured
/// independently here (calibrating with the other layers float), and the search's
/// candidates come costliest first, whatever their SNR.
#[test]
fn layers_are_ranked_by_what_each_costs_alone() {
    let dir = tempfile::tempdir().unwrap();
    let model = chain_model();
    let fp32 = model.encode_to_vec();
    let images = write_images(dir.path(), 12);
    let (calib, val) = holdout_split(&images);
    let (by_subset, layers) = every_subset(&model, &fp32, &calib, &val);
    let alone = |layer: &str| {
        let others: Vec<String> = layers
            .iter()
            .filter(|l| **l != layer)
            .map(|l| l.to_string())
            .collect();
        1.0 - by_subset.iter().find(|(s, _)| *s == others).unwrap().1
    };
    let auto = AutoOptions {
        target: Target::MinAgreement(1.0),
        candidates: 3,
        latency_runs: 0,
        final_check: 0.0,
        confidence: 0.0,
        cost_samples: val.len(),
        ..Default::default()
    };
    let r = auto_calibrate(&model, &calib, &val, &opts(), &auto).unwrap();
    eprintln!("{}", r.to_text());
    assert_eq!(r.cost_ranking.measured, 3, "{:?}", r.cost_ranking);
    assert_eq!(r.cost_ranking.images, val.len());
    let costs: Vec<(String, f64)> = r
        .candidates
        .iter()
        .map(|c| (c.node.clone(), c.cost.expect("every layer measured")))
        .collect();
    for (node, cost) in &costs {
        assert!(
            (cost - alone(node)).abs() < 1e-12,
            "{node}: {cost} vs {}",
            alone(node)
        );
    }
    assert!(costs.windows(2).all(|w| w[0].1 >= w[1].1), "{costs:?}");
    assert!(
        r.to_text().contains("ranked by cost: 3 of 3 layers"),
        "{}",
        r.to_text()
    );
    assert_eq!(r.to_json()["cost_ranking"]["measured"], 3);

    // No time for it: the SNR order, said as such.
    let snr_only = AutoOptions {
        cost_budget_s: 0.0,
        ..auto
    };
    let r = auto_calibrate(&model, &calib, &val, &opts(), &snr_only).unwrap();
    assert_eq!(r.cost_ranking.measured, 0);
    assert!(r.candidates.iter().all(|c| c.cost.is_none()));
    assert!(r.candidates.windows(2).all(|w| w[0].snr_db <= w[1].snr_db));
    assert!(
        r.to_text().contains("ranked by SNR alone"),
        "{}",
        r.to_text()
    );
}

fn every_subset(
    model: &ModelProto,
    fp32: &[u8],
    calib: &[PathBuf],
    val: &[PathBuf],
) -> (Vec<(Vec<String>, f64)>, [&'static str; 3]) {
    let reference = argmax(fp32, val);
    let mut counts = [0usize; 3];
    reference
        .iter()
        .flatten()
        .for_each(|&c| counts[c as usize] += 1);
    eprintln!("fp32 classes: {counts:?}");
    assert!(counts.iter().all(|&c| c > 20), "{counts:?}");
    let layers = ["conv_a", "conv_b", "logits"];
    let mut by_subset = Vec::new();
    for mask in 0u32..8 {
        let keep: Vec<String> = (0..3)
            .filter(|i| mask & (1 << i) != 0)
            .map(|i| layers[i].to_string())
            .collect();
        let o = CalibrationOptions {
            keep_float: keep.clone(),
            ..opts()
        };
        let q = calibrate(model, calib, &o).unwrap();
        let a = agreement(&argmax(&q.model, val), &reference);
        eprintln!("float {keep:?}: agreement {a:.4}");
        by_subset.push((keep, a));
    }
    (by_subset, layers)
}

/// A target between the best single layer (`one`) and the best pair: two layers needed,
/// and the search's rows, trials and outputs say so. Returns the search's options.
fn search_needs_two_layers(
    model: &ModelProto,
    calib: &[PathBuf],
    val: &[PathBuf],
    by_subset: &[(Vec<String>, f64)],
    target: f64,
    int8: f64,
    one: f64,
) -> AutoOptions {
    let layers = ["conv_a", "conv_b", "logits"];
    // A target between the best single layer and the best pair: two layers needed.
    // The search alone: every validation image searched, the pooled agreement as the
    // criterion (the margin is tested below).
    // Untimed, so that the choice is the accuracy search's alone (a timed run may pass a
    // mix over for running slower than fp32: checked below).
    let auto = AutoOptions {
        target: Target::MinAgreement(target),
        candidates: 3,
        latency_runs: 0,
        final_check: 0.0,
        confidence: 0.0,
        ..Default::default()
    };
    let r = auto_calibrate(model, calib, val, &opts(), &auto).unwrap();
    eprintln!("{}", r.to_text());
    let chosen = r.chosen.expect("a mix meets the target");
    let row = &r.rows[chosen];
    assert_eq!(row.kind, RowKind::Step(2));
    assert_eq!(row.float_layers.len(), 2);
    assert!(row.agreement >= target);
    // The search's figure is the independent one for the same set.
    let mut set = row.float_layers.clone();
    set.sort_by_key(|l| layers.iter().position(|x| x == l));
    let independent = by_subset.iter().find(|(s, _)| *s == set).unwrap().1;
    assert_eq!(row.agreement, independent);
    // The chosen mix is the first step row, then the other mixes measured: all three
    // candidates float (reachable), the bisection's k = 1 (conv_b alone, the worst SNR:
    // too little) and k = 2 (chosen); the refinement's trial without the second layer
    // failed, so it has no row.
    assert_eq!(chosen, 2);
    assert_eq!(r.rows[1].kind, RowKind::Int8);
    assert_eq!(r.rows[1].agreement, int8);
    let kinds: Vec<RowKind> = r.rows.iter().map(|x| x.kind).collect();
    assert_eq!(
        kinds,
        [
            RowKind::Fp32,
            RowKind::Int8,
            RowKind::Step(2),
            RowKind::Step(3),
            RowKind::Step(1)
        ]
    );
    assert_eq!(r.rows[4].float_layers, ["conv_b"]);
    assert_eq!(r.rows[4].agreement, one);
    assert!(r.rows.iter().all(|x| x.size_bytes > 0));
    // Evaluations: 3 float, 1 float, 2 float, then 1 refinement trial; within the bound
    // (the greedy search took 5 here, and N(N+1)/2 in general).
    assert_eq!(r.trials.len(), 4, "{:?}", r.trials);
    assert!(r.trials.len() <= segtool_calibration::auto::search_bound(3));
    assert_eq!(segtool_calibration::auto::search_bound(24), 1 + 5 + 5);
    assert_eq!(segtool_calibration::auto::search_bound(39), 1 + 6 + 6);
    let csv = r.csv();
    assert_eq!(csv.lines().count(), 6, "{csv}");
    assert!(csv.lines().nth(3).unwrap().ends_with(",true,true"), "{csv}");
    let json = r.to_json();
    assert_eq!(json["chosen"], row.label());
    let png = segtool_calibration::plot::tradeoff_png_bytes(&r).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    // The model written is that mix: same bytes as calibrating with those nodes float.
    let o = CalibrationOptions {
        keep_float: row.float_layers.clone(),
        ..opts()
    };
    assert_eq!(r.model, calibrate(model, calib, &o).unwrap().model);

    // Deterministic.
    let again = auto_calibrate(model, calib, val, &opts(), &auto).unwrap();
    assert_eq!(again.model, r.model);
    assert_eq!(again.chosen, r.chosen);

    auto
}

/// Timed: every row has its latency, and the chosen mix is never slower than fp32
/// (three 1x1 convs on 16x12 pixels: the Q/DQ work may well cost more than it saves).
fn timed_choice_is_never_slower(
    model: &ModelProto,
    fp32: &[u8],
    calib: &[PathBuf],
    val: &[PathBuf],
    auto: &AutoOptions,
) {
    let timed = AutoOptions {
        latency_runs: 3,
        latency_rounds: 2,
        ..auto.clone()
    };
    let t = auto_calibrate(model, calib, val, &opts(), &timed).unwrap();
    eprintln!("{}", t.to_text());
    assert!(t.rows.iter().all(|x| x.latency_ms > 0.0));
    let fp32_ms = t.rows[0].latency_ms;
    match (t.chosen, t.slower_mix) {
        (Some(2), None) => assert!(t.rows[2].latency_ms < fp32_ms),
        (Some(i), Some(2)) => {
            assert!(t.rows[2].latency_ms >= fp32_ms, "{}", t.to_text());
            assert!(i == 0 || (t.rows[i].meets_target && t.rows[i].latency_ms < fp32_ms));
            assert!(t.verdict().contains("runs at"), "{}", t.verdict());
            if i == 0 {
                assert_eq!(t.model, fp32, "fp32 chosen: the float model is written");
            }
        }
        other => panic!("{other:?}: {}", t.to_text()),
    }
}

/// The search judges and times mixes in OpenVINO when the model ships there: each row's
/// agreement is the one OpenVINO gives, and the row's latency is OpenVINO's.
#[test]
fn auto_judges_and_times_mixes_in_openvino() {
    let dir = tempfile::tempdir().unwrap();
    let model = chain_model();
    let fp32 = model.encode_to_vec();
    let images = write_images(dir.path(), 12);
    let (calib, val) = holdout_split(&images);
    let options = OpenVinoOptions {
        threads: Some(1),
        precision: Precision::F32,
        ..OpenVinoOptions::new()
    };
    let auto = AutoOptions {
        target: Target::MinAgreement(0.999),
        candidates: 3,
        latency_runs: 2,
        latency_rounds: 1,
        final_check: 0.0,
        confidence: 0.0,
        engine: MixEngine::openvino(options.clone()),
        ..Default::default()
    };
    let r = auto_calibrate(&model, &calib, &val, &opts(), &auto).unwrap();
    eprintln!("{}", r.to_text());
    assert!(
        r.engine.starts_with("OpenVINO CPU f32, 1 thread"),
        "{}",
        r.engine
    );
    assert!(r.to_text().contains("measured in OpenVINO CPU f32"));
    assert!(r.rows.iter().all(|x| x.latency_ms > 0.0));
    // Each mix's agreement is OpenVINO's, measured independently of the search.
    let reference = argmax_openvino(&fp32, &val, &options);
    assert_eq!(
        reference,
        argmax(&fp32, &val),
        "fp32 labels: OpenVINO against ORT"
    );
    for row in &r.rows[1..] {
        let o = CalibrationOptions {
            keep_float: row.float_layers.clone(),
            ..opts()
        };
        let mix = calibrate(&model, &calib, &o).unwrap().model;
        let want = agreement(&argmax_openvino(&mix, &val, &options), &reference);
        assert_eq!(row.agreement, want, "{}", row.label());
    }
}

#[test]
fn auto_searches_by_the_lower_bound_and_checks_on_held_out_images() {
    let dir = tempfile::tempdir().unwrap();
    let model = chain_model();
    let fp32 = model.encode_to_vec();
    let images = write_images(dir.path(), 16);
    let (calib, val) = holdout_split(&images);
    // A quarter of the 8 validation images, spread evenly, held out of the search.
    let (search, check) = final_check_split(&val, 0.25);
    assert_eq!(check, [val[3].clone(), val[7].clone()]);
    assert_eq!(search.len(), 6);
    assert_eq!(final_check_split(&val, 0.0).1.len(), 0);
    assert_eq!(final_check_split(&val[..1], 0.5).1.len(), 0);
    assert_eq!(final_check_split(&val, 0.99).0.len(), 1);

    let target = 0.999;
    let auto = AutoOptions {
        target: Target::MinAgreement(target),
        candidates: 3,
        latency_runs: 0,
        ..Default::default()
    };
    assert_eq!((auto.final_check, auto.confidence), (0.25, 0.95));
    let r = auto_calibrate(&model, &calib, &val, &opts(), &auto).unwrap();
    eprintln!("{}", r.to_text());
    assert_eq!(r.validation_images, 6);

    // The all-INT8 row's bound, from its per-image agreements on the search images and
    // the printed t table (0.95, 5 degrees of freedom: 2.015048).
    let reference = argmax(&fp32, &search);
    let int8 = argmax(&calibrate(&model, &calib, &opts()).unwrap().model, &search);
    let per_image: Vec<f64> = int8
        .iter()
        .zip(&reference)
        .map(|(a, b)| agreement(&[a.clone()], &[b.clone()]))
        .collect();
    let mean = per_image.iter().sum::<f64>() / 6.0;
    let sd = (per_image.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 5.0).sqrt();
    let want = mean - 2.015048 * sd / 6f64.sqrt();
    let got = r.rows[1].agreement_bound;
    assert!(
        sd > 0.0,
        "the images should differ in agreement: {per_image:?}"
    );
    assert!(
        (got - want).abs() <= 3e-3 * (mean - want),
        "bound {got}, table {want}"
    );
    assert_eq!(r.rows[1].agreement, agreement(&int8, &reference));
    // Every row is judged by its bound.
    for row in &r.rows[1..] {
        assert!(row.agreement_bound <= row.agreement + 1e-12, "{row:?}");
        assert_eq!(row.meets_target, row.agreement_bound >= target, "{row:?}");
    }

    // The final check: the model written, on the two held-out images, against fp32.
    let f = r.final_check.as_ref().expect("a final check");
    assert_eq!(f.images, 2);
    let held_out = agreement(&argmax(&r.model, &check), &argmax(&fp32, &check));
    assert_eq!(f.agreement, held_out);
    assert_eq!(f.meets_target, held_out >= target);
    let text = r.to_text();
    assert!(
        text.contains("final check on 2 validation images the search did not use"),
        "{text}"
    );
    assert!(text.contains("95% lower confidence bound"), "{text}");
    let json = r.to_json();
    assert_eq!(json["final_check"]["images"], 2);
    assert_eq!(json["confidence"], 0.95);
}

#[test]
fn compare_reports_every_shared_layer_in_graph_order() {
    let dir = tempfile::tempdir().unwrap();
    let model = chain_model();
    let images = write_images(dir.path(), 4);
    let spec = Feed::Spec(model_spec(&model).unwrap());
    // A model against itself: every layer exact.
    let same = compare_models(&model, &model, &images, &spec, &CompareOptions::default()).unwrap();
    let names: Vec<&str> = same.layers.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        names,
        ["conv_a", "relu_a", "scaled_a", "conv_b", "relu_b", "scaled_b", "logits"]
    );
    assert!(same.all_within());
    assert!(same
        .layers
        .iter()
        .all(|l| l.max_abs_diff == 0.0 && l.snr_db == 200.0));

    // fp32 vs all-INT8 (QDQ): the QDQ graph keeps the float names.
    let q = calibrate(&model, &images, &opts()).unwrap();
    let qm = ModelProto::decode(q.model.as_slice()).unwrap();
    let c = compare_models(&model, &qm, &images, &spec, &CompareOptions::default()).unwrap();
    eprintln!("{}", c.to_text());
    assert_eq!(c.layers.len(), 7);
    assert!(c.only_b > 0, "the QDQ graph adds (de)quantised tensors");
    assert_eq!(c.first_past().unwrap().name, "conv_a");
    // The worst layer by SNR is conv_b (its input's int8 scale is set by the x1000
    // channel), as the calibration report ranks it.
    let report = segtool_calibration::report::compare(
        &model,
        &q.model,
        &q.plan.layer_outputs,
        &images,
        &spec,
        "minmax",
        &segtool_calibration::report::CompareOptions {
            samples: 8,
            labels: None,
            latency_runs: 0,
            threads: Some(1),
        },
    )
    .unwrap();
    let worst_report: Vec<&str> = report.worst(3).iter().map(|l| l.name.as_str()).collect();
    let worst_compare: Vec<&str> = c
        .worst(7)
        .into_iter()
        .filter(|l| q.plan.layer_outputs.contains(&l.name))
        .map(|l| l.name.as_str())
        .collect();
    assert_eq!(worst_report, worst_compare);
    assert_eq!(worst_compare[0], "conv_b");
    // The SNR threshold picks the first layer that is really off.
    let snr = compare_models(
        &model,
        &qm,
        &images,
        &spec,
        &CompareOptions {
            tol: f64::INFINITY,
            min_snr_db: Some(c.layers[0].snr_db - 1.0),
            ..Default::default()
        },
    )
    .unwrap();
    assert_ne!(snr.first_past().unwrap().name, "conv_a");
    let json = c.to_json();
    assert_eq!(json["layers"].as_array().unwrap().len(), 7);
    assert_eq!(json["first_past_tolerance"], "conv_a");
}
