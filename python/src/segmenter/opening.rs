//! How a `segtool.Segmenter` is opened: its keyword arguments as the runtime's options
//! ([`SegmenterOptions`] and the accuracy mode's), and the engine through the runtime's
//! builder.

use std::path::{Path, PathBuf};

use segtool_runtime::pipeline::accuracy::{AccuracyOptions, Protocol};
use segtool_runtime::openvino::OpenVinoOptions;
use segtool_runtime::{EngineKind, RuntimeError, SegmenterOptions};

use pyo3::PyResult;

use crate::errors;

pub(super) fn accuracy_options(
    protocol: Option<&str>,
    base_size: Option<usize>,
    scales: Option<Vec<f64>>,
    flip: bool,
    mode: Option<&str>,
    crop: Option<usize>,
    stride: Option<usize>,
    batch_size: usize,
) -> PyResult<Option<AccuracyOptions>> {
    let wanted = protocol.is_some()
        || base_size.is_some()
        || scales.is_some()
        || flip
        || mode.is_some()
        || crop.is_some()
        || stride.is_some();
    if !wanted {
        return Ok(None);
    }
    let bad = |what: &str, got: String| errors::input(what.to_string(), got);
    let protocol: Protocol = match protocol {
        Some(p) => p
            .parse()
            .map_err(|e: String| bad("protocol \"danet\" or \"mmseg\"", e))?,
        None => Protocol::Mmseg,
    };
    if base_size.is_some() && protocol != Protocol::Danet {
        return Err(bad(
            "base_size with protocol=\"danet\"",
            format!("protocol={:?}", protocol.name()),
        ));
    }
    let sliding = match mode {
        Some("sliding") => true,
        Some("whole") => false,
        Some(other) => return Err(bad("mode \"sliding\" or \"whole\"", format!("{other:?}"))),
        None => protocol == Protocol::Danet || crop.is_some() || stride.is_some(),
    };
    let mut opts = AccuracyOptions::new()
        .protocol(protocol)
        .base_size(base_size)
        .flip(flip)
        .batch_size(batch_size.max(1));
    if sliding {
        let crop = crop.unwrap_or(768);
        let stride = stride.unwrap_or_else(|| protocol.default_stride(crop.max(1)));
        opts = opts.sliding(crop, stride);
    } else if crop.is_some() || stride.is_some() {
        return Err(bad(
            "crop/stride with mode=\"sliding\"",
            "mode=\"whole\"".into(),
        ));
    }
    if let Some(scales) = scales {
        opts = opts.scales(scales);
    }
    opts.validate()
        .map_err(|e| bad("valid accuracy mode options", e))?;
    Ok(Some(opts))
}

/// The keyword arguments that are [`SegmenterOptions`], under its names; a value that
/// is not one is an `InputError` naming the option.
#[allow(clippy::too_many_arguments)]
pub(super) fn segmenter_options(
    engine: &str,
    providers: Vec<String>,
    device: &str,
    precision: &str,
    hint: &str,
    streams: Option<usize>,
    threads: Option<usize>,
    card: Option<PathBuf>,
    strict: bool,
    fixed_size: Option<(usize, usize)>,
    logits: bool,
) -> PyResult<SegmenterOptions> {
    // The runtime's own error for an option, by name (an `InputError`).
    let bad = |name: &'static str, message: String| {
        errors::runtime(RuntimeError::Option { name, message })
    };
    Ok(SegmenterOptions {
        engine: engine.parse().map_err(|e| bad("engine", e))?,
        // The runtime's builder checks each name.
        providers,
        device: device.parse().map_err(|e| bad("device", e))?,
        precision: precision.parse().map_err(|e| bad("precision", e))?,
        hint: hint.parse().map_err(|e| bad("hint", e))?,
        // 0 is the default (the hint's streams, the engine's threads), as everywhere.
        streams: streams.filter(|&n| n > 0),
        threads: threads.filter(|&n| n > 0),
        card,
        strict,
        fixed_size: fixed_size.map(|(h, w)| [h, w]),
        logits,
    })
}

/// Opens `options` through the runtime's builder, the engine decided as everywhere else
/// (`auto`: the runtime's choice and its reason). Only the libraries are the package's
/// own: `openvino_library` (the openvino wheel's), and ONNX Runtime's search
/// (`candidates`: the onnxruntime wheel beside it, ...), whose first library that loads
/// becomes the process's before opening. When none loads, `ort` is an error and `auto`
/// goes on without it (OpenVINO, else tract), the search reported.
pub(super) fn open(
    path: &PathBuf,
    options: &SegmenterOptions,
    openvino_library: Option<PathBuf>,
    candidates: &[(String, String)],
) -> Result<
    (
        segtool_runtime::Segmenter,
        Option<segtool_runtime::Fallback>,
    ),
    RuntimeError,
> {
    // The library first: `openvino_options` sets every OpenVINO setting, and `options`
    // then sets those that are options.
    let openvino = OpenVinoOptions {
        library: openvino_library,
        ..OpenVinoOptions::default()
    };
    let mut b = segtool_runtime::Segmenter::builder(path)
        .openvino_options(openvino)
        .options(options)?;
    let (kind, strict) = (options.engine, options.strict);
    if kind == EngineKind::Tract || kind == EngineKind::OpenVino {
        return Ok((b.open()?, None));
    }
    let mut tried = Vec::new();
    for (lib, source) in candidates {
        match segtool_runtime::expert::environment(Some(Path::new(lib))) {
            Ok(_) => return Ok((b.open()?, None)),
            Err(RuntimeError::OrtLibraryNotFound { tried: t }) => tried.extend(
                t.into_iter()
                    .map(|t| t.replace("OrtOptions::dylib_path", source)),
            ),
            Err(other) => return Err(other),
        }
    }
    if kind == EngineKind::Ort || strict {
        return Err(RuntimeError::OrtLibraryNotFound { tried });
    }
    // Auto without ONNX Runtime: the runtime's choice among what is left, its ONNX Runtime
    // search held to the package's last candidate (which failed above), so that the
    // package's search is the one reported.
    if let Some((last, _)) = candidates.last() {
        b = b.ort_library(last);
    }
    let seg = b.open()?;
    let missing = (seg.engine().name() == "tract")
        .then_some(segtool_runtime::Fallback::OrtLibraryMissing { tried });
    Ok((seg, missing))
}
