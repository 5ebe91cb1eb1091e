//! QAT as `segtool train` runs it (`segtool_train::Run` with a `[quant]` section): a
//! float run's checkpoint as `model.init`, fake quantisation placed and calibrated at
//! the start, checkpoints that carry the QAT contract and export to INT8; a QAT run
//! stopped and resumed ends bit for bit where the uninterrupted one does (one thread);
//! resuming with another layout or weight range, a layout the export target cannot run,
//! and initial weights without BatchNorm statistics are refused by name.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use segtool_core::config::RunConfig;
use segtool_model_spec::qat::{QatSpec, QAT_METADATA_KEY, QAT_THRESHOLDS_TENSOR};
use segtool_train::session::{resolve_config, Event};
use segtool_train::{Checkpoint, Run, RunSummary};
use tch::Tensor;

/// Runs share libtorch's global RNG and thread count: one at a time, on one thread.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    tch::set_num_threads(1);
    guard
}

/// A shapes-tiny run in `dir` (tiny images, no TensorBoard), with `extra` overrides.
pub fn config(dir: &Path, extra: &[&str]) -> RunConfig {
    let mut sets = vec![
        format!("out_dir={}", dir.display()),
        "optim.iterations=4".into(),
        "optim.batch_size=2".into(),
        "optim.lr=0.01".into(),
        "data.workers=1".into(),
        "log.every=1".into(),
        "log.tensorboard=false".into(),
        "data.shapes_size=32".into(),
        "data.shapes_train_count=6".into(),
        "data.shapes_val_count=2".into(),
        "checkpoint.every=1".into(),
    ];
    sets.extend(extra.iter().map(|s| s.to_string()));
    let mut cfg = RunConfig::preset("shapes-tiny").unwrap();
    cfg.apply_overrides(&sets).unwrap();
    cfg
}

fn execute(run: Run<'_>) -> anyhow::Result<(RunSummary, Vec<Event>)> {
    let events = Mutex::new(Vec::new());
    let summary = run
        .threads(Some(1))
        .on_event(|e| events.lock().unwrap().push(e.clone()))
        .execute()?;
    Ok((summary, events.into_inner().unwrap()))
}

/// The error of a run that must be refused, with its causes.
fn refused(run: Run<'_>) -> String {
    match execute(run) {
        Ok(_) => panic!("the run was not refused"),
        Err(e) => format!("{e:#}"),
    }
}

/// The `[quant]` overrides of a QAT run from `init`.
pub fn quant(init: &Path, layout: &str, ranges: &str) -> Vec<String> {
    vec![
        format!("model.init={}", init.display()),
        format!("quant.layout={layout}"),
        format!("quant.ranges={ranges}"),
        "quant.weight_range=full".into(),
        "quant.calib_images=4".into(),
        "quant.freeze_bn_at=2".into(),
        "optim.lr=0.002".into(),
    ]
}

/// A float run of 4 iterations in `dir`; its last checkpoint.
pub fn float_run(dir: &Path) -> PathBuf {
    let (summary, _) = execute(Run::new(config(dir, &[]), tch::Device::Cpu, None)).unwrap();
    summary.last_checkpoint
}

/// Every tensor of two checkpoints (weights, BN statistics, thresholds, momentum) bit for
/// bit; the names differing, if any.
fn differing_tensors(a: &Path, b: &Path) -> Vec<String> {
    let read = |p: &Path| {
        let mut v = Tensor::read_safetensors(p).unwrap();
        v.sort_by(|x, y| x.0.cmp(&y.0));
        v
    };
    let (a, b) = (read(a), read(b));
    assert_eq!(
        a.iter().map(|x| &x.0).collect::<Vec<_>>(),
        b.iter().map(|x| &x.0).collect::<Vec<_>>()
    );
    let bits = |t: &Tensor| {
        Vec::<f32>::try_from(t.flatten(0, -1))
            .unwrap()
            .into_iter()
            .map(f32::to_bits)
            .collect::<Vec<_>>()
    };
    a.iter()
        .zip(&b)
        .filter(|((_, x), (_, y))| bits(x) != bits(y))
        .map(|((n, _), _)| n.clone())
        .collect()
}

fn sets(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn qat_run_from_a_float_checkpoint_resumes_bit_for_bit_and_exports_int8() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let float = float_run(&tmp.path().join("float"));
    for (layout, ranges) in [("ort-cpu", "ema"), ("portable", "lsq")] {
        let q = quant(&float, layout, ranges);
        let whole_dir = tmp.path().join(format!("{layout}-whole"));
        let split_dir = tmp.path().join(format!("{layout}-split"));

        // Uninterrupted: the set-up is said, the checkpoint carries the contract.
        let (summary, events) = execute(Run::new(
            config(&whole_dir, &sets(&q)),
            tch::Device::Cpu,
            None,
        ))
        .unwrap();
        let note = events
            .iter()
            .map(|e| e.to_string())
            .find(|e| e.starts_with("QAT: "))
            .expect("the QAT set-up is reported");
        assert!(
            note.contains(&format!("layout {layout}"))
                && note.contains("calibration of 4 training images")
                && note.contains("BatchNorm frozen from iteration 2"),
            "{note}"
        );
        let whole = summary.last_checkpoint;
        let ckpt = Checkpoint::read(&whole).unwrap();
        let spec = QatSpec::from_json(&ckpt.info[QAT_METADATA_KEY]).unwrap();
        assert_eq!(
            (
                spec.layout.as_str(),
                spec.ranges.as_str(),
                spec.init_samples
            ),
            (layout, ranges, 4)
        );
        assert_eq!(spec.freeze_bn_at, Some(2));
        let thresholds =
            Vec::<f32>::try_from(ckpt.tensor(QAT_THRESHOLDS_TENSOR).unwrap().unwrap()).unwrap();
        assert_eq!(thresholds.len(), spec.sources.len());
        assert!(thresholds.iter().all(|&t| t.is_finite() && t > 0.0));
        let (int8, record) = segtool_calibration::qat::export_qat(
            &std::fs::read(&whole).unwrap(),
            &segtool_export::ExportOptions::default(),
        )
        .unwrap();
        assert_eq!(record.spec.layout, layout);
        assert!(!int8.is_empty());

        // Stopped after 2 of 4 (the BN freeze is at 2), resumed through the real path.
        let cfg = config(&split_dir, &sets(&q));
        execute(Run::new(cfg, tch::Device::Cpu, None).stop_at(Some(2))).unwrap();
        let halfway = Checkpoint::read(&split_dir.join("last.safetensors")).unwrap();
        let at_2 =
            Vec::<f32>::try_from(halfway.tensor(QAT_THRESHOLDS_TENSOR).unwrap().unwrap()).unwrap();
        assert_ne!(at_2, thresholds, "{layout}: the ranges moved in training");
        // LSQ's thresholds are trained: their momentum travels with the checkpoint.
        let momentum = halfway.tensor("optimizer.momentum.qat.thresholds").unwrap();
        assert_eq!(momentum.is_some(), ranges == "lsq");
        let (cfg, point) = resolve_config(None, Some(&split_dir), &[]).unwrap();
        let (summary, _) = execute(Run::new(cfg, tch::Device::Cpu, None).resume(point)).unwrap();
        assert_eq!(summary.state.iteration, 4);
        let differ = differing_tensors(&whole, &summary.last_checkpoint);
        eprintln!(
            "{layout} ({ranges}): resumed vs uninterrupted: {} tensors differ",
            differ.len()
        );
        assert!(
            differ.is_empty(),
            "{layout}: resumed run differs in {differ:?}"
        );

        // Another layout or weight range on resume: refused, naming both.
        for (set, what, was, asked) in [
            ("quant.layout=openvino", "layout", layout, "openvino"),
            (
                "quant.weight_range=reduced",
                "weight range",
                "full",
                "reduced",
            ),
        ] {
            let (cfg, point) = resolve_config(None, Some(&split_dir), &[set.to_string()]).unwrap();
            let err = refused(Run::new(cfg, tch::Device::Cpu, None).resume(point));
            assert!(
                err.contains(&format!("QAT {what} {was:?}"))
                    && err.contains(&format!("{asked:?} is refused")),
                "{err}"
            );
        }
    }
}

#[test]
fn qat_refuses_a_layout_the_target_cannot_run_and_weights_without_bn_statistics() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let float = float_run(&tmp.path().join("float"));

    // ort-cpu's zero points on TensorRT: refused before training, naming both.
    let mut q = quant(&float, "ort-cpu", "ema");
    q.push("quant.export_target=tensorrt".into());
    let dir = tmp.path().join("trt");
    let err = refused(Run::new(config(&dir, &sets(&q)), tch::Device::Cpu, None));
    assert!(
        err.contains("ort-cpu") && err.contains("tensorrt") && err.contains("quant.export_target"),
        "{err}"
    );
    assert!(!dir.join("last.safetensors").exists());

    // The float weights without one BatchNorm statistic: the key is named.
    let mut tensors = Tensor::read_safetensors(&float).unwrap();
    tensors.retain(|(n, _)| n != "head.conv5a.1.running_var");
    let stripped = tmp.path().join("no_bn_stats.safetensors");
    Tensor::write_safetensors(&tensors, &stripped).unwrap();
    let q = quant(&stripped, "portable", "ema");
    let err = refused(Run::new(
        config(&tmp.path().join("nobn"), &sets(&q)),
        tch::Device::Cpu,
        None,
    ));
    assert!(
        err.contains("`head.conv5a.1.running_var`") && err.contains("BatchNorm"),
        "{err}"
    );

    // A float run cannot be resumed into QAT.
    let (cfg, point) = resolve_config(
        None,
        Some(float.parent().unwrap()),
        &sets(&quant(&float, "portable", "ema"))
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let err = refused(Run::new(cfg, tch::Device::Cpu, None).resume(point));
    assert!(err.contains("float training run"), "{err}");
}

#[test]
fn qat_ranges_reach_the_log_tensorboard_and_the_report() {
    use segtool_train::tensorboard::proto::{Kind, What};
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let float = float_run(&tmp.path().join("float"));
    let dir = tmp.path().join("qat");
    let mut q = quant(&float, "openvino", "lsq");
    q.push("log.tensorboard=true".into());
    let (summary, _) = execute(Run::new(config(&dir, &sets(&q)), tch::Device::Cpu, None)).unwrap();
    assert_eq!(summary.state.iteration, 4);

    // metrics.jsonl: every training record carries the ranges and (after the first
    // record) how far they moved; the log line says them.
    let records = segtool_train::metrics_log::read_records(&dir.join("metrics.jsonl")).unwrap();
    let train: Vec<_> = records.iter().filter(|r| r.kind == "train").collect();
    assert_eq!(train.len(), 4);
    for r in &train {
        let (lo, mid, hi) = (
            r.qat_threshold_min.unwrap(),
            r.qat_threshold_median.unwrap(),
            r.qat_threshold_max.unwrap(),
        );
        assert!(0.0 < lo && lo <= mid && mid <= hi, "{lo} {mid} {hi}");
        let moved = r.qat_range_movement.unwrap();
        assert!(moved.is_finite() && moved >= 0.0);
    }
    assert!(train.iter().any(|r| r.qat_range_movement.unwrap() > 0.0));
    let line = train[3].describe(4);
    assert!(
        line.contains("qat ranges ") && line.contains("(min/median/max) moved "),
        "{line}"
    );

    // TensorBoard: the record's scalars and one threshold per quantised tensor.
    let ckpt = Checkpoint::read(&summary.last_checkpoint).unwrap();
    let spec = QatSpec::from_json(&ckpt.info[QAT_METADATA_KEY]).unwrap();
    let mut tags = std::collections::BTreeMap::<String, Vec<(i64, f32)>>::new();
    for file in segtool_train::tensorboard::event_files(&dir).unwrap() {
        for e in segtool_train::tensorboard::read_events(&file).unwrap() {
            let Some(What::Summary(s)) = e.what else {
                continue;
            };
            for v in s.value {
                if let Some(Kind::SimpleValue(x)) = v.value {
                    tags.entry(v.tag).or_default().push((e.step, x));
                }
            }
        }
    }
    assert_eq!(tags["train/qat_threshold_median"].len(), 4);
    assert_eq!(tags["train/qat_range_movement"].len(), 4);
    for source in &spec.sources {
        let tag = format!("qat/threshold/{source}");
        assert_eq!(tags.get(&tag).map(Vec::len), Some(4), "{tag}");
    }
    // The last per-tensor scalars are the checkpoint's thresholds.
    let last = Vec::<f32>::try_from(ckpt.tensor(QAT_THRESHOLDS_TENSOR).unwrap().unwrap()).unwrap();
    for (source, t) in spec.sources.iter().zip(&last) {
        assert_eq!(tags[&format!("qat/threshold/{source}")][3], (4, *t));
    }

    // The curves and the run report.
    assert!(dir.join("qat_ranges.png").is_file());
    let page = segtool_train::report::build(&dir, &[]).unwrap();
    assert!(page.contains("QAT ranges (min / median / max threshold)"));
    assert!(page.contains("QAT range movement"));
}
