//! ONNX Runtime / TensorRT checks: CUDA and TensorRT providers against the CPU, engine
//! cache reuse, `infer --devices`.

use super::*;

const SIDE: u32 = 64;

/// The tiny DANet exported for `target` (static 64x64 input), in `dir`; `extra` flags
/// such as `--provider cuda` (fused MultiHeadAttention PAM, the CUDA serving form).
fn export(dir: &Path, target: &str, extra: &[&str]) -> Result<PathBuf> {
    let (_, _, ckpt) = common::tiny_checkpoint(dir, 5);
    let onnx = dir.join(format!(
        "m.{target}{}.onnx",
        extra.join("").replace('-', "")
    ));
    let side = format!("{SIDE}x{SIDE}");
    let mut args = vec![
        "export",
        "--checkpoint",
        p(&ckpt),
        "--onnx",
        p(&onnx),
        "--target",
        target,
        "--input-size",
        &side,
    ];
    args.extend_from_slice(extra);
    let out = segtool(&args);
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

/// The normalised batch of [`images`] for `model`.
fn input(model: &Path) -> Result<ndarray::Array4<f32>> {
    Ok(segtool_runtime::expert::normalise_batch(
        &images(),
        &segtool_runtime::expert::load_spec(model)?,
    )?)
}

/// (max |logit difference| / max |reference logit|, argmax agreement over pixels).
fn compare(reference: &ndarray::Array4<f32>, other: &ndarray::Array4<f32>) -> Result<(f64, f64)> {
    ensure!(
        reference.dim() == other.dim(),
        "{:?} vs {:?}",
        reference.dim(),
        other.dim()
    );
    let (mut diff, mut scale) = (0.0f64, 0.0f64);
    for (x, y) in reference.iter().zip(other.iter()) {
        diff = diff.max((x - y).abs() as f64);
        scale = scale.max(x.abs() as f64);
    }
    let (a, b) = (
        segtool_runtime::expert::argmax(reference.view()),
        segtool_runtime::expert::argmax(other.view()),
    );
    let (mut same, mut all) = (0usize, 0usize);
    for (x, y) in a.iter().zip(&b) {
        same += x.iter().zip(y.iter()).filter(|(p, q)| p == q).count();
        all += x.len();
    }
    Ok((diff / scale.max(1e-12), same as f64 / all.max(1) as f64))
}

fn cpu_reference(model: &Path) -> Result<ndarray::Array4<f32>> {
    let mut engine = OrtEngine::open(model, &OrtOptions::new().with_provider(Provider::Cpu))?;
    Ok(segtool_runtime::expert::run_logits(
        &mut engine,
        input(model)?.view(),
    )?)
}

/// Ops ONNX Runtime may leave on the CPU by design (shape arithmetic, no tensor data).
const SHAPE_OPS: &[&str] = &["Shape", "Size", "ConstantOfShape"];

/// Runs `engine` (opened with profiling) on the batch, then reads ONNX Runtime's profile:
/// every node that computes must have run on `ep`. Returns the logits and the summary.
fn run_on(
    engine: &mut OrtEngine,
    model: &Path,
    ep: &str,
) -> Result<(ndarray::Array4<f32>, String)> {
    let logits = segtool_runtime::expert::run_logits(engine, input(model)?.view())?;
    let placement = engine.end_profiling()?;
    ensure!(
        !placement.nodes(ep).is_empty(),
        "{ep} ran no node: {}",
        placement.summary()
    );
    let away: Vec<String> = placement
        .elsewhere(ep)
        .into_iter()
        .filter(|(_, n)| !SHAPE_OPS.contains(&n.op.as_str()))
        .map(|(p, n)| format!("{} ({}) on {p}", n.node, n.op))
        .collect();
    ensure!(away.is_empty(), "nodes not on {ep}: {}", away.join(", "));
    Ok((logits, placement.summary()))
}

/// Strict session options for `provider` with ONNX Runtime's profiler on.
fn profiled(dir: &Path, provider: &Provider, name: &str) -> OrtOptions {
    OrtOptions::new()
        .with_provider(provider.clone())
        .strict(true)
        .with_profiling(dir.join(format!("profile-{name}")))
}

pub(super) fn ort_cuda_matches_cpu() -> Result<Outcome> {
    let dir = tempfile::tempdir()?;
    // The CUDA serving form (PAM as fused MultiHeadAttention); ORT's CPU EP runs the same
    // contrib op for the reference.
    let model = export(dir.path(), "ort", &["--provider", "cuda"])?;
    let cuda = Provider::Cuda { device_id: 0 };
    let mut engine = gate!(strict_engine_with(
        &model,
        profiled(dir.path(), &cuda, "cuda"),
        &cuda
    )?);
    ensure!(
        engine.provider() == "cuda:0",
        "provider {}",
        engine.provider()
    );
    let (logits, placed) = run_on(&mut engine, &model, "CUDAExecutionProvider")?;
    let (rel, agree) = compare(&cpu_reference(&model)?, &logits)?;
    ensure!(rel <= 1e-2, "CUDA logits off by {rel:.3e} of max |logit|");
    ensure!(agree >= 0.995, "argmax agreement {agree:.4}");
    Ok(Passed(format!(
        "max |Δlogit| {rel:.2e} of max |logit|, argmax agreement {:.2}%; {placed}",
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
    let model = export(dir.path(), "tensorrt", &[])?;
    const TRT: &str = "TensorrtExecutionProvider";
    let trt = |o: TensorRtOptions| Provider::TensorRtWith(o);
    let plain = trt(TensorRtOptions::new(0));
    let mut fp32 = gate!(strict_engine_with(
        &model,
        profiled(dir.path(), &plain, "fp32"),
        &plain
    )?);
    let reference = cpu_reference(&model)?;
    let mut report = Vec::new();
    let (fp32_logits, placed) = run_on(&mut fp32, &model, TRT)?;
    let (rel, agree) = compare(&reference, &fp32_logits)?;
    ensure!(rel <= 1e-2, "TensorRT fp32 logits off by {rel:.3e}");
    ensure!(agree >= 0.995, "TensorRT fp32 agreement {agree:.4}");
    report.push(format!("fp32 {rel:.1e}/{:.2}% ({placed})", agree * 100.0));

    let half = trt(TensorRtOptions::new(0).with_fp16(true));
    let mut fp16 = OrtEngine::open(&model, &profiled(dir.path(), &half, "fp16"))
        .context("the fp32 TensorRT engine built but the fp16 one did not")?;
    let (logits, _) = run_on(&mut fp16, &model, TRT)?;
    let (rel, agree) = compare(&reference, &logits)?;
    ensure!(rel <= 5e-2, "TensorRT fp16 logits off by {rel:.3e}");
    ensure!(agree >= 0.98, "TensorRT fp16 agreement {agree:.4}");
    report.push(format!("fp16 {rel:.1e}/{:.2}%", agree * 100.0));

    // `segtool calibrate` checks every cache name against the graph when it writes it;
    // here the INT8 engine must also compute differently from fp32 (names ONNX Runtime
    // cannot match are ignored, and TensorRT then runs those tensors in fp32: the output
    // would equal fp32's) while agreeing with the CPU within the bound.
    let cache = calibration_cache(dir.path(), &model)?;
    let int8 = trt(TensorRtOptions::new(0).with_tensorrt_calibration_cache(&cache));
    let mut engine = OrtEngine::open(&model, &profiled(dir.path(), &int8, "int8"))
        .context("TensorRT INT8 with segtool's calibration cache")?;
    let (logits, _) = run_on(&mut engine, &model, TRT)?;
    let (vs_fp32, _) = compare(&fp32_logits, &logits)?;
    ensure!(
        vs_fp32 > 1e-4,
        "TensorRT INT8 logits equal fp32's within {vs_fp32:.1e} of max |logit|: the \
         calibration cache was not applied (INT8 quantisation moves logits by ~1e-2)"
    );
    let (rel, agree) = compare(&reference, &logits)?;
    ensure!(agree >= 0.90, "TensorRT INT8 agreement {agree:.4}");
    report.push(format!(
        "int8 {rel:.1e}/{:.2}% (differs from fp32 by {vs_fp32:.1e})",
        agree * 100.0
    ));
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
    let model = export(dir.path(), "tensorrt", &[])?;
    let cache = dir.path().join("trt-cache");
    let options = TensorRtOptions::new(0)
        .with_engine_cache_dir(&cache)
        .with_timing_cache_dir(&cache);
    let input = segtool_runtime::expert::normalise_batch(
        &images(),
        &segtool_runtime::expert::load_spec(&model)?,
    )?;
    // A skip only when TensorRT is absent; a failed build or run once it registers fails.
    let session = || -> Result<std::result::Result<(f64, OrtEngine), Outcome>> {
        let start = Instant::now();
        let mut engine = match strict_engine(&model, Provider::TensorRtWith(options.clone()))? {
            Ok(engine) => engine,
            Err(skip) => return Ok(Err(skip)),
        };
        segtool_runtime::expert::run_logits(&mut engine, input.view()).context("a TensorRT run")?;
        Ok(Ok((start.elapsed().as_secs_f64(), engine)))
    };
    let (first, engine) = gate!(session()?);
    drop(engine);
    let built = files_in(&cache)?;
    ensure!(
        !built.is_empty(),
        "no engine was cached in {}",
        cache.display()
    );
    let (second, engine) = match session().context("the second TensorRT session")? {
        Ok(v) => v,
        Err(_) => bail!("TensorRT was present for the first session and not the second"),
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
    let model = export(dir.path(), "ort", &["--provider", "cuda"])?;
    drop(gate!(strict_engine(
        &model,
        Provider::Cuda { device_id: 0 }
    )?));
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
