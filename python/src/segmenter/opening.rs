//! How a `segtool.Segmenter` is opened: its keyword arguments as runtime options (the
//! accuracy mode's), and the engine through the runtime's builder.

use std::path::{Path, PathBuf};

use segtool_runtime::accuracy::{AccuracyOptions, Protocol};
use segtool_runtime::card::CardRequest;
use segtool_runtime::openvino::OpenVinoOptions;
use segtool_runtime::{EngineKind, Provider, RuntimeError};

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

/// Opens through the runtime's builder, `kind` deciding the engine as everywhere else
/// (`auto`: the runtime's choice and its reason). Only ONNX Runtime's library search is
/// the package's own (`candidates`: the onnxruntime wheel beside it, ...): the first that
/// loads becomes the process's library before opening. When none loads, `ort` is an
/// error and `auto` goes on without it (OpenVINO, else tract), the search reported.
pub(super) fn open(
    path: &PathBuf,
    kind: EngineKind,
    openvino: &OpenVinoOptions,
    providers: &[Provider],
    threads: Option<usize>,
    strict: bool,
    fixed_size: Option<(usize, usize)>,
    candidates: &[(String, String)],
    card: Option<&PathBuf>,
) -> Result<
    (
        segtool_runtime::Segmenter,
        Option<segtool_runtime::Fallback>,
    ),
    RuntimeError,
> {
    let mut b = segtool_runtime::Segmenter::builder(path)
        .engine(kind)
        .providers(providers.iter().cloned())
        .openvino_options(openvino.clone())
        .strict(strict);
    if let Some(n) = threads {
        b = b.threads(n);
    }
    if let Some((h, w)) = fixed_size {
        b = b.fixed_size(h, w);
    }
    if let Some(card) = card {
        b = b.card(CardRequest::new().card_file(card));
    }
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
