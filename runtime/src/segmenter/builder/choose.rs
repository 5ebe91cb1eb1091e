//! How [`EngineKind::Auto`] picks the engine: a rule of correctness, else the engine
//! timed fastest for this model on this machine (cached; see [`crate::segmenter::auto`]).
//! Every other engine kind is opened by name in the builder itself.

use std::path::PathBuf;

use segtool_onnx::ModelFileError;

use super::{engine_kind_of, Opened, SegmenterBuilder};
use crate::error::{Result, RuntimeError};
use crate::segmenter::auto;
use crate::segmenter::{EngineKind, Fallback, Segmenter};

impl SegmenterBuilder {
    /// [`EngineKind::Auto`] (see [`crate::segmenter::auto`]): a rule of correctness, else
    /// the engine measured fastest for this model on this machine; with the reason for the choice.
    /// Options the chosen engine does not take are reported as fallbacks.
    pub(super) fn auto(
        &self,
        model: &Opened<'_>,
        fallbacks: &mut Vec<Fallback>,
    ) -> Result<(Segmenter, String)> {
        let gpu_providers = self.gpu_providers();
        let calibration = model.model.and_then(|m| m.metadata.calibration.as_ref());
        let situation = auto::Situation {
            gpu_providers: &gpu_providers,
            precision: self.openvino.precision,
            int8_file: calibration.is_some(),
            full_range_weights: calibration.is_some_and(auto::full_range_weights),
            vnni: auto::cpu_has_vnni(),
        };
        let size = self
            .fixed_size
            .or_else(|| model.graph_size())
            .unwrap_or(auto::measure::DEFAULT_SIZE);
        let plan = match auto::plan(&situation) {
            auto::Plan::Measure(_) if size.0 * size.1 > auto::measure::MAX_PROBE_PIXELS => {
                let why = format!(
                    "{}x{} is too large to time the engines at (over 4096x4096 pixels)",
                    size.0, size.1
                );
                auto::Plan::Rule(EngineKind::Ort, why)
            }
            plan => plan,
        };
        let (segmenter, why) = match plan {
            auto::Plan::Rule(kind, why) => self.auto_rule(kind, why, model, fallbacks)?,
            auto::Plan::Measure(kinds) => self.auto_measured(&kinds, size, model, fallbacks)?,
        };
        // `fixed_size` is applied either way: it is the size auto timed at.
        let running = engine_kind_of(segmenter.engine.name());
        for (option, reason) in self.inapplicable(running) {
            if option != "fixed_size" {
                fallbacks.push(Fallback::OptionNotApplied { option, reason });
            }
        }
        Ok((segmenter, why))
    }

    /// Auto's rule named `kind`: that engine; ONNX Runtime when it does not open (a
    /// [`Fallback::Engine`]); tract when ONNX Runtime's library is missing.
    fn auto_rule(
        &self,
        kind: EngineKind,
        why: String,
        model: &Opened<'_>,
        fallbacks: &mut Vec<Fallback>,
    ) -> Result<(Segmenter, String)> {
        let name = auto::measure::engine_name(kind);
        let failure = match self.build(kind, model, fallbacks) {
            Ok(engine) => {
                return Ok((model.segmenter(engine), format!("auto chose {name}: {why}")))
            }
            Err(RuntimeError::OrtLibraryNotFound { tried }) if cfg!(feature = "tract") => {
                fallbacks.push(Fallback::OrtLibraryMissing { tried });
                let engine = self.tract(model, fallbacks)?;
                let why = format!("auto chose tract: {why}; ONNX Runtime is missing");
                return Ok((model.segmenter(engine), why));
            }
            Err(e) if kind == EngineKind::Ort || kind == EngineKind::Tract => return Err(e),
            Err(e) => e,
        };
        let mut then = Vec::new();
        let (segmenter, choice) = self.auto_rule(
            EngineKind::Ort,
            format!("{name} did not open the model"),
            model,
            &mut then,
        )?;
        // The rule's engine first, then what its replacement took (ONNX Runtime missing).
        fallbacks.push(Fallback::Engine {
            requested: name.into(),
            running: segmenter.engine.name().into(),
            reason: format!("{why}, but it did not open the model: {failure}"),
        });
        fallbacks.extend(then);
        Ok((segmenter, choice))
    }

    /// Times each engine of `kinds` that opens the model on a frame of `size` (or takes
    /// the cached choice for this model, machine and options) and keeps the fastest.
    fn auto_measured(
        &self,
        kinds: &[EngineKind],
        size: (usize, usize),
        model: &Opened<'_>,
        fallbacks: &mut Vec<Fallback>,
    ) -> Result<(Segmenter, String)> {
        let key = self.auto_key(model, size)?;
        let cache = self.auto_cache.as_deref();
        let cached = cache.and_then(|path| auto::cache::lookup(path, &key));
        // A cached engine that no longer opens is measured over with the others.
        let hit = cached.and_then(|entry| {
            let mut own = Vec::new();
            let engine = self.build(entry.engine, model, &mut own).ok()?;
            Some((model.segmenter(engine), own, entry))
        });
        let (segmenter, own, entry, kept) = match hit {
            Some((segmenter, own, entry)) => {
                let path = cache.map_or_else(String::new, |p| p.display().to_string());
                (segmenter, own, entry, format!("cached in {path}"))
            }
            None => {
                let (segmenter, own, entry) = self.time_engines(kinds, model, key, size)?;
                let kept = match cache {
                    Some(path) => match auto::cache::store(path, entry.clone()) {
                        Ok(()) => format!("timed now, cached in {}", path.display()),
                        Err(why) => format!("timed now, not cached: {why}"),
                    },
                    None => "timed now, not cached".into(),
                };
                (segmenter, own, entry, kept)
            }
        };
        fallbacks.extend(own);
        if let Some(tried) = entry
            .ort_missing
            .filter(|_| entry.engine != EngineKind::Ort)
        {
            fallbacks.push(Fallback::OrtLibraryMissing { tried });
        }
        let mut why = format!(
            "auto chose {}: the fastest when timed on this machine {}: {}",
            auto::measure::engine_name(entry.engine),
            self.timed_at(size),
            auto::measure::describe(&entry.timings)
        );
        for line in &entry.unavailable {
            why.push_str(&format!("; {line}"));
        }
        why.push_str(&format!("; {kept}"));
        Ok((segmenter, why))
    }

    /// Opens and times each engine of `kinds` in turn within the time cap, keeping only
    /// the fastest so far open (a large model is never held three times).
    fn time_engines(
        &self,
        kinds: &[EngineKind],
        model: &Opened<'_>,
        key: auto::cache::Key,
        size: (usize, usize),
    ) -> Result<(Segmenter, Vec<Fallback>, auto::cache::Entry)> {
        let budget = auto::measure::budget().map_err(|message| RuntimeError::Option {
            name: "engine",
            message,
        })?;
        let started = std::time::Instant::now();
        let frame = auto::measure::probe_frame(size);
        let mut best: Option<(Segmenter, Vec<Fallback>, EngineKind)> = None;
        let mut timings: Vec<auto::measure::Timing> = Vec::new();
        let mut unavailable = Vec::new();
        let mut ort_missing = None;
        for (i, &kind) in kinds.iter().enumerate() {
            let mut own = Vec::new();
            let name = auto::measure::engine_name(kind);
            let mut segmenter = match self.build(kind, model, &mut own) {
                Ok(engine) => model.segmenter(engine),
                Err(RuntimeError::OrtLibraryNotFound { tried }) => {
                    unavailable.push(format!("{name} is missing"));
                    ort_missing = Some(tried);
                    continue;
                }
                Err(e) => {
                    unavailable.push(format!("{name} did not open the model ({e})"));
                    continue;
                }
            };
            let share = budget.saturating_sub(started.elapsed()) / (kinds.len() - i) as u32;
            let deadline = std::time::Instant::now() + share;
            match auto::measure::time(&mut segmenter, kind, &frame, deadline) {
                Ok(timing) => {
                    let fastest = timings.iter().all(|t| timing.median_ms < t.median_ms);
                    timings.push(timing);
                    if fastest {
                        best = Some((segmenter, own, kind));
                    }
                }
                Err(e) => unavailable.push(format!("{name} failed on the probe frame ({e})")),
            }
        }
        let Some((segmenter, own, engine)) = best else {
            return Err(match ort_missing {
                Some(tried) => RuntimeError::OrtLibraryNotFound { tried },
                None => RuntimeError::Option {
                    name: "engine",
                    message: format!(
                        "auto found no engine that runs the model: {}",
                        unavailable.join("; ")
                    ),
                },
            });
        };
        let entry = auto::cache::Entry {
            key,
            engine,
            timings,
            unavailable,
            ort_missing,
        };
        Ok((segmenter, own, entry))
    }

    /// `at 512x512, 2 threads`: the conditions auto timed under.
    fn timed_at(&self, (h, w): (usize, usize)) -> String {
        let threads = match self.threads {
            Some(1) => "1 thread".to_string(),
            Some(n) => format!("{n} threads"),
            None => "the engines' default threads".to_string(),
        };
        format!("at {h}x{w}, {threads}")
    }

    /// What auto's cached choice for this model depends on (see [`auto::cache`]).
    // Each library push is behind its engine's feature: no one `vec![..]` fits every build.
    #[allow(clippy::vec_init_then_push)]
    fn auto_key(&self, model: &Opened<'_>, (h, w): (usize, usize)) -> Result<auto::cache::Key> {
        let model_sha256 =
            auto::cache::sha256_of(model.path).map_err(|source| ModelFileError::Io {
                path: model.path.to_path_buf(),
                source,
            })?;
        let paths = |candidates: Vec<(PathBuf, &'static str)>| -> Vec<PathBuf> {
            candidates.into_iter().map(|(p, _)| p).collect()
        };
        let mut libraries = Vec::new();
        #[cfg(feature = "ort")]
        libraries.push(auto::cache::library_identity(
            "onnxruntime",
            &paths(crate::engines::ort::dylib_candidates(
                self.ort.dylib_path.as_deref(),
            )),
        ));
        #[cfg(feature = "openvino")]
        libraries.push(auto::cache::library_identity(
            "openvino",
            &paths(crate::engines::openvino::library::candidates(
                self.openvino.library.as_deref(),
            )),
        ));
        let o = &self.openvino;
        Ok(auto::cache::Key {
            model_sha256,
            cpu: auto::cache::cpu_identity(),
            libraries,
            segtool: env!("CARGO_PKG_VERSION").into(),
            threads: self.threads,
            settings: format!(
                "precision {}, device {}, hint {}, streams {:?}",
                o.precision, o.device, o.hint, o.streams
            ),
            size: [h, w],
        })
    }
}
