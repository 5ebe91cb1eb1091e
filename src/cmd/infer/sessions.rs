//! Session set-up beyond the single default one: the accuracy protocol asked for on the
//! command line (`--mode sliding --crop --stride --flip --scales / --ms`, validated into
//! `AccuracyOptions`), the `--devices` / `--cpu-sessions` path that opens one session per
//! device behind a `BatchServer`, and the contract check both paths share. Kept apart
//! from `run` because it is all about turning options into sessions.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use segtool_runtime::accuracy::{self, AccuracyOptions, Protocol};
use segtool_runtime::{Backend, BatchConfig, BatchServer, Engine, OutputKind, Segmenter};

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
        let sliding = match self.mode.as_deref() {
            Some("sliding") => true,
            Some(_) => false,
            None => protocol == Protocol::Danet || self.crop.is_some() || self.stride.is_some(),
        };
        let mut opts = AccuracyOptions::new()
            .protocol(protocol)
            .base_size(self.base_size)
            .flip(self.flip)
            .batch_size(self.batch_size.max(1));
        if sliding {
            let crop = self.crop.unwrap_or(768);
            let stride = self
                .stride
                .unwrap_or_else(|| protocol.default_stride(crop.max(1)));
            opts = opts.sliding(crop, stride);
        } else if self.crop.is_some() || self.stride.is_some() {
            bail!("--crop/--stride apply to --mode sliding, not --mode whole");
        }
        if self.ms {
            opts = opts.scales(accuracy::MULTI_SCALES.to_vec());
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
    #[cfg(feature = "ort")]
    let fix = |options: segtool_runtime::OrtOptions| match fixed_size {
        Some((h, w)) => options.with_fixed_input_size(h, w),
        None => options,
    };
    #[cfg(not(feature = "ort"))]
    let _ = fixed_size;
    let sessions: Vec<(String, Backend)> = if !args.devices.is_empty() {
        #[cfg(feature = "ort")]
        {
            if args.engine != "ort" {
                bail!("--devices needs --engine ort (CUDA sessions of ONNX Runtime)");
            }
            args.devices
                .iter()
                .map(|&d| {
                    let mut options = segtool_runtime::OrtOptions::new()
                        .with_provider(segtool_runtime::Provider::Cuda { device_id: d })
                        .strict(args.strict);
                    if let Some(n) = args.threads {
                        options = options.with_intra_threads(n);
                    }
                    (format!("cuda:{d}"), Backend::Ort(fix(options)))
                })
                .collect()
        }
        #[cfg(not(feature = "ort"))]
        bail!("--devices needs the ort feature (ONNX Runtime CUDA sessions)");
    } else {
        let n = args.cpu_sessions.unwrap_or(1);
        if n == 0 {
            bail!("--cpu-sessions must be at least 1");
        }
        (0..n)
            .map(|_| {
                let backend = match args.engine.as_str() {
                    #[cfg(feature = "ort")]
                    "ort" => {
                        let mut options = segtool_runtime::OrtOptions::new()
                            .with_provider(segtool_runtime::Provider::Cpu);
                        if let Some(n) = args.threads {
                            options = options.with_intra_threads(n);
                        }
                        Ok(Backend::Ort(fix(options)))
                    }
                    "tract" => Ok(Backend::TractWith(segtool_runtime::TractOptions {
                        threads: args.threads,
                    })),
                    other => Err(anyhow::anyhow!("unknown engine {other:?} (ort, tract)")),
                }?;
                Ok(("cpu".to_string(), backend))
            })
            .collect::<Result<_>>()?
    };
    let mut spec = None;
    let mut engines: Vec<Box<dyn Engine>> = Vec::with_capacity(sessions.len());
    let mut providers = Vec::new();
    for (i, (asked, backend)) in sessions.into_iter().enumerate() {
        let seg = Segmenter::open(&args.model, backend).with_context(|| {
            format!("opening session {i} ({asked}) of {}", args.model.display())
        })?;
        let (name, provider) = (seg.engine().name(), seg.engine().provider().to_string());
        match seg.engine().fallback_reason() {
            Some(reason) => eprintln!(
                "session {i}: {name} on {provider}: CPU fallback, {asked} unavailable ({reason}); \
                 use --strict to make this an error"
            ),
            None => eprintln!("session {i}: {name} on {provider}"),
        }
        if i == 0 {
            check_contract(&seg, args)?;
        }
        providers.push(provider);
        spec.get_or_insert_with(|| seg.spec().clone());
        engines.push(seg.into_plain_engine());
    }
    let spec = spec.expect("at least one session");
    let config = BatchConfig::new()
        .with_max_batch(args.max_batch.unwrap_or(args.batch_size).max(1))
        .with_max_wait(Duration::from_secs_f64(args.max_wait_ms.max(0.0) / 1e3))
        .with_queue_capacity((engines.len() * args.batch_size.max(1) * 4).max(64))
        .with_logits(keep_logits);
    let server = BatchServer::new(config, spec, engines)?;
    Ok((server, providers.join(",")))
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
