//! ONNX Runtime / TensorRT checks: CUDA and TensorRT providers against the CPU, engine
//! cache reuse, `infer --devices`.

use super::*;

const SIDE: u32 = 64;

/// The tiny DANet exported for `target` (static 64x64 input), in `dir`.
fn export(dir: &Path, target: &str) -> Result<PathBuf> {
    let (_, _, ckpt) = common::tiny_checkpoint(dir, 5);
    let onnx = dir.join(format!("m.{target}.onnx"));
    let side = format!("{SIDE}x{SIDE}");
    let out = segtool(&[
        "export",
        "--checkpoint",
        p(&ckpt),
        "--onnx",
        p(&onnx),
        "--target",
        target,
        "--input-size",
        &side,
    ]);
    ensure!(
        out.status.success(),
        "segtool export --target {target}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(onnx)
}

fn images() -> Vec<image::RgbImage> {
    (0..4).map(|s| test_image(s, SIDE, SIDE)).collect()
}

fn segment(engine: OrtEngine, model: &Path) -> Result<Vec<Segmentation>> {
    let spec = segtool_runtime::load_spec(model)?;
    let mut seg = Segmenter::from_engine(Box::new(engine), spec).with_logits(true);
    Ok(seg.segment_batch(&images())?)
}

/// (max |logit difference| / max |reference logit|, argmax agreement).
fn compare(reference: &[Segmentation], other: &[Segmentation]) -> Result<(f64, f64)> {
    let (mut diff, mut scale) = (0.0f64, 0.0f64);
    for (a, b) in reference.iter().zip(other) {
        let (a, b) = (
            a.logits.as_ref().context("reference logits")?,
            b.logits.as_ref().context("logits")?,
        );
        ensure!(a.dim() == b.dim(), "{:?} vs {:?}", a.dim(), b.dim());
        for (x, y) in a.iter().zip(b.iter()) {
            diff = diff.max((x - y).abs() as f64);
            scale = scale.max(x.abs() as f64);
        }
    }
    Ok((diff / scale.max(1e-12), common::agreement(reference, other)))
}

fn cpu_reference(model: &Path) -> Result<Vec<Segmentation>> {
    let engine = OrtEngine::open(model, &OrtOptions::new().with_provider(Provider::Cpu))?;
    segment(engine, model)
}

pub(super) fn ort_cuda_matches_cpu() -> Result<Outcome> {
    let dir = tempfile::tempdir()?;
    let model = export(dir.path(), "ort")?;
    let engine = gate!(strict_engine(&model, Provider::Cuda { device_id: 0 }));
    ensure!(
        engine.provider() == "cuda:0",
        "provider {}",
        engine.provider()
    );
    let (rel, agree) = compare(&cpu_reference(&model)?, &segment(engine, &model)?)?;
    ensure!(rel <= 1e-2, "CUDA logits off by {rel:.3e} of max |logit|");
    ensure!(agree >= 0.995, "argmax agreement {agree:.4}");
    Ok(Passed(format!(
        "max |Δlogit| {rel:.2e} of max |logit|, argmax agreement {:.2}%",
        agree * 100.0
    )))
}

fn calibration_cache(dir: &Path, model: &Path) -> Result<PathBuf> {
    let calib = dir.join("calib");
    std::fs::create_dir_all(&calib)?;
    for s in 0..8 {
        test_image(100 + s, SIDE, SIDE).save(calib.join(format!("c{s}.png")))?;
    }
    let cache = dir.join("m.calib");
    let out = segtool(&[
        "calibrate",
        "--model",
        p(model),
        "--images",
        p(&calib),
        "--samples",
        "8",
        "-o",
        p(&dir.join("m.int8.onnx")),
        "--trt-cache",
        p(&cache),
        "--latency-runs",
        "1",
        "--quiet",
    ]);
    ensure!(
        out.status.success(),
        "segtool calibrate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(cache)
}

pub(super) fn ort_tensorrt_fp32_fp16_int8_match_cpu() -> Result<Outcome> {
    let dir = tempfile::tempdir()?;
    let model = export(dir.path(), "tensorrt")?;
    let trt = |o: TensorRtOptions| Provider::TensorRtWith(o);
    let fp32 = gate!(strict_engine(&model, trt(TensorRtOptions::new(0))));
    let reference = cpu_reference(&model)?;
    let mut report = Vec::new();
    let (rel, agree) = compare(&reference, &segment(fp32, &model)?)?;
    ensure!(rel <= 1e-2, "TensorRT fp32 logits off by {rel:.3e}");
    ensure!(agree >= 0.995, "TensorRT fp32 agreement {agree:.4}");
    report.push(format!("fp32 {rel:.1e}/{:.2}%", agree * 100.0));

    let fp16 = strict_engine(&model, trt(TensorRtOptions::new(0).with_fp16(true)))
        .map_err(|_| anyhow::anyhow!("the fp32 TensorRT engine built but the fp16 one did not"))?;
    let (rel, agree) = compare(&reference, &segment(fp16, &model)?)?;
    ensure!(rel <= 5e-2, "TensorRT fp16 logits off by {rel:.3e}");
    ensure!(agree >= 0.98, "TensorRT fp16 agreement {agree:.4}");
    report.push(format!("fp16 {rel:.1e}/{:.2}%", agree * 100.0));

    let cache = calibration_cache(dir.path(), &model)?;
    let options = TensorRtOptions::new(0).with_tensorrt_calibration_cache(&cache);
    let int8 = OrtEngine::open(
        &model,
        &OrtOptions::new().with_provider(trt(options)).strict(true),
    )
    .context("TensorRT INT8 with segtool's calibration cache")?;
    let (rel, agree) = compare(&reference, &segment(int8, &model)?)?;
    ensure!(agree >= 0.90, "TensorRT INT8 agreement {agree:.4}");
    report.push(format!("int8 {rel:.1e}/{:.2}%", agree * 100.0));
    Ok(Passed(format!(
        "max |Δlogit| of max |logit| / argmax agreement vs ORT CPU: {}",
        report.join(", ")
    )))
}

fn files_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    v.sort();
    Ok(v)
}

pub(super) fn tensorrt_engine_cache_reuse() -> Result<Outcome> {
    let dir = tempfile::tempdir()?;
    let model = export(dir.path(), "tensorrt")?;
    let cache = dir.path().join("trt-cache");
    let options = TensorRtOptions::new(0)
        .with_engine_cache_dir(&cache)
        .with_timing_cache_dir(&cache);
    let input = segtool_runtime::normalise_batch(&images(), &segtool_runtime::load_spec(&model)?)?;
    let session = || -> std::result::Result<(f64, OrtEngine), Outcome> {
        let start = Instant::now();
        let mut engine = strict_engine(&model, Provider::TensorRtWith(options.clone()))?;
        segtool_runtime::run_logits(&mut engine, input.view())
            .map_err(|e| Skipped(format!("a TensorRT run failed: {e}")))?;
        Ok((start.elapsed().as_secs_f64(), engine))
    };
    let (first, engine) = gate!(session());
    drop(engine);
    let built = files_in(&cache)?;
    ensure!(
        !built.is_empty(),
        "no engine was cached in {}",
        cache.display()
    );
    let (second, engine) = match session() {
        Ok(v) => v,
        Err(_) => bail!("the second TensorRT session failed where the first worked"),
    };
    drop(engine);
    let after = files_in(&cache)?;
    ensure!(
        after == built,
        "the second session changed the cache: {built:?} -> {after:?}"
    );
    ensure!(
        second < 0.5 * first,
        "the second session took {second:.2} s against {first:.2} s: the cache was not used"
    );
    Ok(Passed(format!(
        "first session {first:.2} s, second {second:.2} s ({:.0}%), {} cache file(s)",
        100.0 * second / first,
        built.len()
    )))
}

pub(super) fn infer_devices_all_gpus() -> Result<Outcome> {
    let n = gate!(gpus());
    let dir = tempfile::tempdir()?;
    let model = export(dir.path(), "ort")?;
    drop(gate!(strict_engine(
        &model,
        Provider::Cuda { device_id: 0 }
    )));
    let input = dir.path().join("imgs");
    std::fs::create_dir_all(&input)?;
    for s in 0..(4 * n as u32).max(8) {
        test_image(s, SIDE, SIDE).save(input.join(format!("i{s:03}.png")))?;
    }
    let labels = |name: &str, extra: &[&str]| -> Result<(Vec<Vec<u8>>, String)> {
        let out = dir.path().join(name);
        let mut args = vec![
            "infer",
            "--model",
            p(&model),
            "--input",
            p(&input),
            "--out",
            p(&out),
            "--labels",
        ];
        args.extend_from_slice(extra);
        let o = segtool(&args);
        let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
        ensure!(o.status.success(), "segtool {}: {stderr}", args.join(" "));
        let mut files = Vec::new();
        for f in files_in(&out)? {
            if f.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.contains("label"))
            {
                files.push(image::open(&f)?.to_luma8().into_raw());
            }
        }
        ensure!(!files.is_empty(), "no label files in {}", out.display());
        Ok((files, stderr))
    };
    let devices: Vec<String> = (0..n).map(|i| i.to_string()).collect();
    let devices = devices.join(",");
    let (gpu, stderr) = labels("gpu", &["--devices", &devices, "--strict"])?;
    for i in 0..n {
        ensure!(
            stderr.contains(&format!("on cuda:{i}")),
            "no session on cuda:{i}: {stderr}"
        );
    }
    let (cpu, _) = labels("cpu", &["--engine", "ort", "--threads", "1"])?;
    ensure!(
        gpu.len() == cpu.len(),
        "{} vs {} label files",
        gpu.len(),
        cpu.len()
    );
    let (mut same, mut all) = (0usize, 0usize);
    for (a, b) in gpu.iter().zip(&cpu) {
        same += a.iter().zip(b).filter(|(x, y)| x == y).count();
        all += a.len().max(b.len());
    }
    let agree = same as f64 / all.max(1) as f64;
    ensure!(
        agree >= 0.995,
        "--devices labels agree with CPU on {agree:.4}"
    );
    Ok(Passed(format!(
        "{n} GPU session(s), {} images, label agreement with CPU {:.2}%",
        gpu.len(),
        agree * 100.0
    )))
}
