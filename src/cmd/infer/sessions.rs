//! Session set-up beyond the single default one: the accuracy protocol asked for on the
//! command line (`--mode sliding --crop --stride --flip --scales / --ms`, validated into
//! `AccuracyOptions`), the `--devices` / `--cpu-sessions` path that opens one session per
//! device behind a `BatchServer`, and the contract check both paths share. Kept apart
//! from `run` because it is all about turning options into sessions.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use segtool_runtime::pipeline::accuracy::{self, AccuracyOptions, Protocol};
use segtool_runtime::expert::SegmenterExt;
use segtool_runtime::{
    batching::{BatchConfig, BatchServer},
    OutputKind, Segmenter, SegmenterBuilder,
};

use crate::args::engine::EngineRequest;

use super::Args;

impl Args {
    /// The accuracy protocol asked for, if any.
    pub(super) fn accuracy(&self) -> Result<Option<AccuracyOptions>> {
        let wanted = self.protocol.is_some()
            || self.base_size.is_some()
            || self.mode.is_some()
            || self.crop.is_some()
            || self.stride.is_some()
            || self.flip
            || self.scales.is_some()
            || self.ms;
        if !wanted {
            return Ok(None);
        }
        let protocol: Protocol = match self.protocol.as_deref() {
            Some(p) => p.parse().map_err(anyhow::Error::msg)?,
            None => Protocol::Mmseg,
        };
        if self.base_size.is_some() && protocol != Protocol::Danet {
            bail!("--base-size applies to --protocol danet");
        }
        // An imported mmseg checkpoint's test pipeline (the export's spec) under mmseg:
        // its keep-ratio resize, and whole or slide unless the flags choose.
        let test = match protocol {
            Protocol::Mmseg => {
                segtool_runtime::expert::load_spec(&self.model)
                    .with_context(|| format!("reading {}", self.model.display()))?
                    .mmseg_test
            }
            Protocol::Danet => None,
        };
        let test_slide = test.as_ref().and_then(|t| t.crop.zip(t.stride));
        let sliding = match self.mode.as_deref() {
            Some("sliding") => true,
            Some(_) => false,
            None => {
                protocol == Protocol::Danet
                    || self.crop.is_some()
                    || self.stride.is_some()
                    || test_slide.is_some()
            }
        };
        let mut opts = AccuracyOptions::new()
            .protocol(protocol)
            .base_size(self.base_size)
            .resize(test.as_ref().map(|t| t.scale))
            .flip(self.flip)
            .batch_size(self.batch_size.max(1));
        if sliding {
            let (crop, stride) = protocol.window(self.crop, self.stride, test_slide, 768);
            opts = opts.sliding(crop, stride);
        } else if self.crop.is_some() || self.stride.is_some() {
            bail!("--crop/--stride apply to --mode sliding, not --mode whole");
        }
        if self.ms {
            opts = opts.scales(match protocol {
                Protocol::Danet => accuracy::MULTI_SCALES.to_vec(),
                Protocol::Mmseg => segtool_model_spec::protocol::mmseg::TTA_SCALES.to_vec(),
            });
        } else if let Some(scales) = &self.scales {
            opts = opts.scales(scales.clone());
        }
        opts.validate()
            .map_err(|e| anyhow::anyhow!("accuracy mode options: {e}"))?;
        Ok(Some(opts))
    }
}

/// `--devices` / `--cpu-sessions`: one session per device (or CPU session), each
/// reported with its provider and any fallback, behind a batch server.
pub(super) fn open_server(
    args: &Args,
    keep_logits: bool,
    fixed_size: Option<(usize, usize)>,
) -> Result<(BatchServer, String)> {
    let sessions: Vec<(String, EngineRequest)> = if !args.devices.is_empty() {
        if !args.engine.onnx_runtime() {
            bail!("--devices needs --engine ort or auto (CUDA sessions of ONNX Runtime)");
        }
        args.devices
            .iter()
            .map(|&d| (format!("cuda:{d}"), args.engine.request(fixed_size)))
            .collect()
    } else {
        let n = args.cpu_sessions.unwrap_or(1);
        if n == 0 {
            bail!("--cpu-sessions must be at least 1");
        }
        (0..n)
            .map(|_| ("cpu".to_string(), args.engine.request(fixed_size)))
            .collect()
    };
    let mut segmenters = Vec::with_capacity(sessions.len());
    let mut providers = Vec::new();
    for (i, (asked, request)) in sessions.into_iter().enumerate() {
        let opened = request
            .builder(&args.model)
            .and_then(|b| Ok(with_device(b, &asked)?.open()?));
        let seg = opened.with_context(|| {
            format!("opening session {i} ({asked}) of {}", args.model.display())
        })?;
        let (name, provider) = (seg.engine().name(), seg.engine().provider().to_string());
        match seg.fallbacks().first() {
            Some(fallback) => eprintln!(
                "session {i}: {name} on {provider}: CPU fallback, {asked} unavailable ({fallback}); \
                 use --strict to make this an error"
            ),
            None => eprintln!("session {i}: {name} on {provider}"),
        }
        if i == 0 {
            check_contract(&seg, args)?;
            if let Some(note) = cuda_attention_note(&seg) {
                eprintln!("note: {note}");
            }
        }
        providers.push(provider);
        segmenters.push(seg);
    }
    let config = BatchConfig::new()
        .with_max_batch(args.max_batch.unwrap_or(args.batch_size).max(1))
        .with_max_wait(Duration::from_secs_f64(args.max_wait_ms.max(0.0) / 1e3))
        .with_queue_capacity((segmenters.len() * args.batch_size.max(1) * 4).max(64))
        .with_logits(keep_logits);
    let server = BatchServer::from_segmenters(config, segmenters)?;
    Ok((server, providers.join(",")))
}

/// One session's device: `cuda:N` for `--devices`, the CPU for `--cpu-sessions`.
fn with_device(builder: SegmenterBuilder, asked: &str) -> Result<SegmenterBuilder> {
    #[cfg(feature = "ort")]
    {
        let provider: segtool_runtime::Provider = asked.parse().map_err(anyhow::Error::msg)?;
        Ok(builder.providers([provider]))
    }
    #[cfg(not(feature = "ort"))]
    {
        if asked != "cpu" {
            bail!("--devices needs the ort feature (ONNX Runtime CUDA sessions)");
        }
        Ok(builder)
    }
}

/// On CUDA, an export whose PAM was not written for ONNX Runtime's CUDA EP: what the
/// exporter says about its recorded attention choice (and how to re-export).
pub(super) fn cuda_attention_note(seg: &Segmenter) -> Option<String> {
    if !seg.engine().provider().starts_with("cuda") {
        return None;
    }
    let options = seg.model()?.metadata.export_options.as_ref()?;
    segtool_export::AttentionChoice::from_export_options(options)?.cuda_note()
}

/// Refuses what the model's contract cannot give.
pub(super) fn check_contract(seg: &Segmenter, args: &Args) -> Result<()> {
    let contract = seg.contract();
    if args.logits && contract.output == OutputKind::Mask {
        bail!(
            "--logits: {} outputs a class map (exported with --argmax), not logits; export \
             without --argmax to get them",
            args.model.display()
        );
    }
    Ok(())
}
