//! The end-to-end slice on built-in data: shapes -> train -> eval -> export -> ORT and
//! tract, one summary table, overlays and a loss curve.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use image::RgbImage;
use segtool_core::dataset::{FolderDataset, SegDataset};
use segtool_core::{ConfusionMatrix, IGNORE_LABEL};
use segtool_model_spec::ModelSpec;
use segtool_train::checkpoint::{self, CheckpointInfo};
use segtool_train::data::Augment;
use segtool_train::{TrainConfig, Trainer};

use crate::args::data::generate_shapes;
use crate::args::progress::Bar;
use crate::args::ShapesArgs;

#[derive(clap::Args)]
pub struct Args {
    /// Output folder: data/, checkpoint, ONNX, overlays/, loss curve, summary.json.
    #[arg(long, default_value = "out/demo")]
    pub out: PathBuf,
    /// Optimiser steps. The schedule was chosen by measurement on 2 cores (AMD EPYC,
    /// AVX-512): 2000 steps of batch 8 reach 72.6 mIoU in 145 s of training; 1600 steps
    /// 64.5, 3000 steps 77.2; 800 steps of batch 16 (the same time as 1600 of 8) 60.4;
    /// 64x64 images 46.7. The learning rate hardly mattered (1600 steps: 64.5 at 0.015
    /// and at 0.03): the tiny model is limited by the images it sees per second (~140).
    #[arg(long, default_value_t = 2000)]
    pub iterations: usize,
    /// Images per step: more steps of fewer images learned faster per second than fewer
    /// steps of 16 (64.5 against 60.4 mIoU in the same time).
    #[arg(long, default_value_t = 8)]
    pub batch_size: usize,
    /// Backbone learning rate (head at 10x). Higher than the recipe's 0.003: the tiny
    /// model trains from scratch, not from ImageNet weights (0.03 beat 0.01 and 0.1 in a
    /// 400-iteration sweep: 40.2 vs 31.1 and 33.3 mIoU).
    #[arg(long, default_value_t = 0.03)]
    pub lr: f64,
    /// libtorch intra-op threads: 2 trained the tiny model at 8.2 it/s against 5.1 for one
    /// (batch 16, 2 cores).
    #[arg(long, default_value_t = 2)]
    pub threads: i32,
    #[command(flatten)]
    pub shapes: ShapesArgs,
}

/// One engine's row of the summary table.
struct Row {
    engine: String,
    miou: f64,
    max_diff: Option<f64>,
    images_per_second: f64,
}

/// Wall time per stage, printed after the table.
#[derive(Default)]
struct Stages {
    done: Vec<(&'static str, f64)>,
    current: Option<(&'static str, Instant)>,
}

impl Stages {
    fn start(&mut self, name: &'static str) {
        self.finish();
        self.current = Some((name, Instant::now()));
    }

    fn finish(&mut self) {
        if let Some((name, t)) = self.current.take() {
            self.done.push((name, t.elapsed().as_secs_f64()));
        }
    }
}

pub fn run(args: Args) -> Result<()> {
    let started = Instant::now();
    let mut stages = Stages::default();
    tch::set_num_threads(args.threads);
    stages.start("data");
    let data_dir = args.out.join("data");
    eprintln!(
        "[1/5] generating shapes ({} train, {} val, {}px) in {}",
        args.shapes.train_count,
        args.shapes.val_count,
        args.shapes.size,
        data_dir.display()
    );
    generate_shapes(&data_dir, &args.shapes)?;
    let train_set = FolderDataset::open(&data_dir, "train")?;
    let val_set = FolderDataset::open(&data_dir, "val")?;

    stages.start("training");
    eprintln!(
        "[2/5] training tiny DANet for {} iterations (batch {})",
        args.iterations, args.batch_size
    );
    let (trainer, spec, train_seconds, ckpt_path) = train_tiny(&args, train_set)?;

    stages.start("evaluation (tch)");
    eprintln!("[3/5] evaluating with tch");
    let mut tch_logits: Vec<Vec<f32>> = Vec::with_capacity(val_set.len());
    let eval = segtool_train::eval::evaluate(
        &trainer.model,
        &val_set,
        8,
        tch::Device::Cpu,
        &Bar::default(),
        |_, t| {
            tch_logits.push(Vec::<f32>::try_from(&t.contiguous().view(-1)).expect("f32 logits"));
        },
    )?;
    let mut rows = vec![Row {
        engine: "tch (libtorch)".into(),
        miou: eval.confusion.mean_iou(),
        max_diff: None,
        images_per_second: eval.images as f64 / eval.seconds.max(1e-9),
    }];

    stages.start("export");
    eprintln!("[4/5] exporting ONNX");
    let onnx_path = args.out.join("danet_tiny.onnx");
    segtool_export::export_onnx(&ckpt_path, &onnx_path, &Default::default())
        .with_context(|| format!("exporting {}", ckpt_path.display()))?;

    stages.start("comparison (ORT, tract)");
    eprintln!("[5/5] running the ONNX model through ONNX Runtime and tract");
    let val_images = (0..val_set.len())
        .map(|i| val_set.get(i).map(|s| (s.image, s.mask)))
        .collect::<Result<Vec<_>, _>>()?;
    let masks = compare_engines(&onnx_path, &val_images, &tch_logits, &spec, &mut rows)?;
    write_overlays(&args.out.join("overlays"), &val_images, &masks, &spec)?;

    stages.finish();
    print_table(&rows);
    let times: Vec<String> = stages
        .done
        .iter()
        .map(|(name, secs)| format!("{name} {secs:.1} s"))
        .collect();
    println!("stage times: {}", times.join(", "));
    let summary = summary_json(
        &args,
        &trainer,
        train_seconds,
        &rows,
        &eval,
        &stages,
        started,
    );
    let summary_path = args.out.join("summary.json");
    segtool_model_spec::io::write_atomic(
        &summary_path,
        serde_json::to_string_pretty(&summary)?.as_bytes(),
    )?;
    println!(
        "outputs in {} (overlays/, loss.loss.png, summary.json), {:.0} s in all",
        args.out.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Stage 5: the export through ONNX Runtime and tract, a row each in `rows`; returns
/// ONNX Runtime's masks.
fn compare_engines(
    onnx_path: &std::path::Path,
    val_images: &[(RgbImage, image::GrayImage)],
    tch_logits: &[Vec<f32>],
    spec: &ModelSpec,
    rows: &mut Vec<Row>,
) -> Result<Vec<segtool_runtime::ClassMap>> {
    let mut overlays = None;
    for engine in [
        segtool_runtime::EngineKind::Ort,
        segtool_runtime::EngineKind::Tract,
    ] {
        let mut seg = segtool_runtime::Segmenter::builder(onnx_path)
            .engine(engine)
            .logits(true)
            .open()?;
        let name = format!("{} ({})", seg.engine().name(), seg.engine().provider());
        let (row, masks) = run_engine(&mut seg, name, val_images, tch_logits, spec)?;
        rows.push(row);
        overlays.get_or_insert(masks);
    }
    Ok(overlays.unwrap_or_default())
}

/// `summary.json`: the run's settings, its rows, per-class IoU and stage times.
fn summary_json(
    args: &Args,
    trainer: &Trainer,
    train_seconds: f64,
    rows: &[Row],
    eval: &segtool_train::eval::EvalResult,
    stages: &Stages,
    started: Instant,
) -> serde_json::Value {
    serde_json::json!({
        "iterations": args.iterations,
        "train_seconds": train_seconds,
        "final_loss": trainer.losses.last().map(|l| l.1),
        "rows": rows.iter().map(|r| serde_json::json!({
            "engine": r.engine, "miou": r.miou, "max_abs_logit_diff_vs_tch": r.max_diff,
            "images_per_second": r.images_per_second,
        })).collect::<Vec<_>>(),
        "per_class_iou_tch": eval.confusion.iou_per_class(),
        "stage_seconds": stages.done.iter().map(|(n, s)| (n.to_string(), serde_json::json!(s))).collect::<serde_json::Map<_, _>>(),
        "total_seconds": started.elapsed().as_secs_f64(),
    })
}

/// Stage 2: the tiny DANet trained on the generated shapes, its checkpoint and loss
/// curve written; returns the trainer, the spec, the training seconds and the checkpoint.
fn train_tiny(
    args: &Args,
    train_set: FolderDataset,
) -> Result<(Trainer, ModelSpec, f64, std::path::PathBuf)> {
    let classes = segtool_core::shapes::CLASSES
        .iter()
        .map(|s| s.to_string())
        .collect();
    let spec = ModelSpec::new("tiny", segtool_model_spec::BackboneSpec::tiny(), classes);
    let config = TrainConfig {
        iterations: args.iterations,
        batch_size: args.batch_size,
        lr: args.lr,
        augment: Augment {
            flip: true,
            scale: None,
            base_size: 0,
            crop: None,
            ..Augment::none()
        },
        seed: args.shapes.seed,
        ..TrainConfig::default()
    };
    let mut trainer = Trainer::new(&spec, config)?;
    let train_started = Instant::now();
    trainer.train_with(std::sync::Arc::new(train_set), Some(&Bar::default()))?;
    let train_seconds = train_started.elapsed().as_secs_f64();
    let ckpt_path = args.out.join("danet_tiny.safetensors");
    let info = CheckpointInfo::from([("iterations".to_string(), args.iterations.to_string())]);
    checkpoint::save(&ckpt_path, &trainer.vs, &spec, &info)?;
    segtool_train::metrics_log::write_loss_curve(&args.out.join("loss"), &trainer.losses)?;
    Ok((trainer, spec, train_seconds, ckpt_path))
}

fn run_engine(
    seg: &mut segtool_runtime::Segmenter,
    name: String,
    images: &[(RgbImage, image::GrayImage)],
    reference: &[Vec<f32>],
    spec: &ModelSpec,
) -> Result<(Row, Vec<segtool_runtime::ClassMap>)> {
    let mut confusion = ConfusionMatrix::new(spec.num_classes());
    // Untimed first batch: tract builds its optimised plan for the input shape on the
    // first call (ONNX Runtime plans when the session opens), and both size their
    // buffers. The rate is the steady state a video or batch user sees.
    let warm_up: Vec<RgbImage> = images.iter().take(8).map(|(i, _)| i.clone()).collect();
    seg.segment_batch(&warm_up)?;
    let (mut seconds, mut max_diff, mut masks) = (0.0, 0.0f64, Vec::new());
    for (chunk_index, chunk) in images.chunks(8).enumerate() {
        let imgs: Vec<RgbImage> = chunk.iter().map(|(i, _)| i.clone()).collect();
        let t0 = Instant::now();
        let results = seg.segment_batch(&imgs)?;
        seconds += t0.elapsed().as_secs_f64();
        for (k, (result, (_, gt))) in results.into_iter().zip(chunk).enumerate() {
            let logits = result
                .logits
                .as_ref()
                .context("engine returned no logits")?;
            let tch = &reference[chunk_index * 8 + k];
            for (a, b) in logits.iter().zip(tch) {
                max_diff = max_diff.max((a - b).abs() as f64);
            }
            let pred: Vec<u16> = result.mask.iter().collect();
            confusion.update(gt.as_raw(), &pred, IGNORE_LABEL);
            masks.push(result.mask);
        }
    }
    let row = Row {
        engine: name,
        miou: confusion.mean_iou(),
        max_diff: Some(max_diff),
        images_per_second: images.len() as f64 / seconds.max(1e-9),
    };
    Ok((row, masks))
}

/// image | ground truth | prediction overlay, side by side, for the first 8 images.
fn write_overlays(
    dir: &Path,
    images: &[(RgbImage, image::GrayImage)],
    masks: &[segtool_runtime::ClassMap],
    spec: &ModelSpec,
) -> Result<()> {
    for (i, ((img, gt), mask)) in images.iter().zip(masks).take(8).enumerate() {
        let (w, h) = img.dimensions();
        let gt_mask =
            ndarray::Array2::from_shape_vec((h as usize, w as usize), gt.as_raw().clone())?;
        let mut palette = spec.palette.clone();
        palette.resize(256, [255, 255, 255]); // ignore (255) shows white
        let mut panel = RgbImage::new(w * 3, h);
        image::imageops::replace(&mut panel, img, 0, 0);
        image::imageops::replace(
            &mut panel,
            &segtool_runtime::colorize(gt_mask.view(), &palette),
            w as i64,
            0,
        );
        let over = segtool_runtime::overlay(
            img,
            mask.view(),
            &spec.palette,
            segtool_runtime::DEFAULT_ALPHA,
        );
        image::imageops::replace(&mut panel, &over, 2 * w as i64, 0);
        let path = dir.join(format!("val_{i:02}.png"));
        let png = segtool_core::dataset::encode_png(&image::DynamicImage::ImageRgb8(panel));
        segtool_model_spec::io::write_atomic(&path, &png)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn print_table(rows: &[Row]) {
    println!();
    println!(
        "{:<28} {:>8} {:>22} {:>10}",
        "engine", "mIoU %", "max |logit - tch|", "img/s"
    );
    println!("{}", "-".repeat(71));
    for r in rows {
        let diff = r
            .max_diff
            .map_or("(reference)".to_string(), |d| format!("{d:.2e}"));
        println!(
            "{:<28} {:>8.2} {:>22} {:>10.1}",
            r.engine,
            r.miou * 100.0,
            diff,
            r.images_per_second
        );
    }
    println!();
}
