//! Models shared by the elements of one `model-instance-id`: one [`BatchServer`] (one
//! copy of the model, one engine session) and its [`MultiStream`], in which each element
//! is a source of its own.
//!
//! The registry holds weak references by id: the first element to start opens the model,
//! the others join it (refused, naming the first property they disagree on), and the
//! model goes when the last element holding it stops.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, Weak};
use std::time::Duration;

use segtool_model_spec::ModelSpec;
use segtool_runtime::batching::{BatchConfig, BatchServer, MultiStream, SourceConfig, SourceError};
use segtool_runtime::expert::SegmenterExt;
use segtool_runtime::Segmenter;

use super::props::Settings;

/// What opening a model found (kept with a shared model for the elements that join it).
#[derive(Clone)]
pub struct ModelInfo {
    pub spec: ModelSpec,
    /// `engine/provider`, e.g. `ort/cpu`.
    pub provider: String,
    /// Each fallback taken while opening, as a sentence.
    pub fallbacks: Vec<String>,
    /// Which engine `engine=auto` chose and why (None: the engine was named).
    pub engine_choice: Option<String>,
    /// The runtime's options it was opened with, as JSON.
    pub options: String,
    /// The model's fixed input size `(width, height)`, when its graph has one.
    pub fixed: Option<(u32, u32)>,
}

impl ModelInfo {
    /// What `seg` was opened with and found.
    pub fn of(seg: &Segmenter) -> Result<Self, String> {
        Ok(Self {
            spec: seg.spec().clone(),
            provider: format!("{}/{}", seg.engine().name(), seg.engine().provider()),
            fallbacks: seg.fallbacks().iter().map(ToString::to_string).collect(),
            engine_choice: seg.engine_choice().map(str::to_string),
            options: serde_json::to_string(seg.options())
                .map_err(|e| format!("the options as JSON: {e}"))?,
            fixed: seg.graph_size().map(|(h, w)| (w as u32, h as u32)),
        })
    }
}

/// Why an element could not have the shared model.
pub enum JoinError<E> {
    /// Opening it failed (the opener's own error).
    Open(E),
    /// The element's properties differ from the opener's: the first difference.
    Conflict(String),
    /// The model opened but its server did not start.
    Server(String),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One model shared by the elements of one `model-instance-id`.
pub struct SharedModel {
    pub id: String,
    /// The element that opened it.
    pub opened_by: String,
    /// How many times a model was opened under this id in this process (this one
    /// included): 1 while the elements that share it keep it open.
    pub opens: u64,
    pub info: ModelInfo,
    pub server: BatchServer,
    /// Every element's frames, one source per element.
    pub cameras: MultiStream,
    /// The opener's model-opening properties ([`Settings::model_key`]).
    key: Vec<(&'static str, String)>,
    /// The server keeps each frame's logits (an opener smoothing or asking for them).
    logits: bool,
    /// Elements holding the model now.
    members: AtomicUsize,
}

impl SharedModel {
    /// Opens a source for `element`: its name, or its name and a number when a source of
    /// that name is open (another pipeline's element of the same name). Newest frame
    /// first, or ordered with one frame waiting.
    pub fn add_source(&self, element: &str, ordered: bool) -> Result<String, String> {
        let config = match ordered {
            true => SourceConfig::ordered(1),
            false => SourceConfig::newest(),
        };
        for n in 1u64.. {
            let name = match n {
                1 => element.to_string(),
                n => format!("{element}#{n}"),
            };
            match self.cameras.add_source(&name, config) {
                Ok(()) => return Ok(name),
                Err(SourceError::Duplicate(_)) => continue,
                Err(e) => return Err(e.to_string()),
            }
        }
        unreachable!("a free name")
    }

    /// Elements holding the model now.
    pub fn elements(&self) -> usize {
        self.members.load(Ordering::SeqCst)
    }

    /// An element holds the model from now on (until [`leave`](Self::leave)).
    pub fn enter(&self) {
        self.members.fetch_add(1, Ordering::SeqCst);
    }

    /// An element let go of the model.
    pub fn leave(&self) {
        self.members.fetch_sub(1, Ordering::SeqCst);
    }

    /// Engine runs so far and the largest batch run.
    pub fn runs(&self) -> (u64, usize) {
        let stats = self.server.stats();
        let runs = stats
            .workers
            .iter()
            .map(|w| w.batches + w.failed_batches)
            .sum();
        let largest = stats
            .workers
            .iter()
            .map(|w| w.max_batch_size)
            .max()
            .unwrap_or(0);
        (runs, largest)
    }
}

/// The shared models by id (weak: the elements hold them).
static MODELS: LazyLock<Mutex<HashMap<String, Weak<SharedModel>>>> =
    LazyLock::new(Default::default);

/// Models opened under each id since the process started.
static OPENS: LazyLock<Mutex<HashMap<String, u64>>> = LazyLock::new(Default::default);

/// The model shared under `id`: the open one if there is one and `settings` agree with
/// the settings it was opened with, else one `open` opens now (as `element`).
/// `keep_logits`: the element needs each frame's logits (smoothing, the `logits` meta).
pub fn join<E>(
    id: &str,
    element: &str,
    settings: &Settings,
    keep_logits: bool,
    open: impl FnOnce() -> Result<(Segmenter, ModelInfo), E>,
) -> Result<Arc<SharedModel>, JoinError<E>> {
    let key = settings.model_key();
    // Held while a model opens: elements starting at once open it once.
    let mut models = lock(&MODELS);
    models.retain(|_, m| m.strong_count() > 0);
    if let Some(model) = models.get(id).and_then(Weak::upgrade) {
        compare(&model, element, &key, keep_logits, settings)?;
        return Ok(model);
    }
    let (seg, info) = open().map_err(JoinError::Open)?;
    let config = BatchConfig::new()
        .with_max_batch(settings.max_batch.max(1) as usize)
        .with_max_wait(Duration::from_millis(settings.max_wait_ms as u64))
        .with_logits(keep_logits);
    let server = BatchServer::from_segmenters(config, vec![seg])
        .map_err(|e| JoinError::Server(format!("model-instance-id {id}: {e}")))?;
    let opens = {
        let mut opens = lock(&OPENS);
        let n = opens.entry(id.to_string()).or_insert(0);
        *n += 1;
        *n
    };
    let model = Arc::new(SharedModel {
        id: id.to_string(),
        opened_by: element.to_string(),
        opens,
        info,
        cameras: server.multi_stream(),
        server,
        key,
        logits: keep_logits,
        members: AtomicUsize::new(0),
    });
    models.insert(id.to_string(), Arc::downgrade(&model));
    Ok(model)
}

/// Refuses an element whose model-opening properties differ from the opener's, naming
/// the first that differs.
fn compare<E>(
    model: &SharedModel,
    element: &str,
    key: &[(&'static str, String)],
    keep_logits: bool,
    settings: &Settings,
) -> Result<(), JoinError<E>> {
    let conflict =
        |message: String| JoinError::Conflict(format!("model-instance-id {}: {message}", model.id));
    for ((name, mine), (_, theirs)) in key.iter().zip(&model.key) {
        if mine != theirs {
            return Err(conflict(format!(
                "element {element} has {name}={} but {} opened the shared model with {name}={}",
                shown(mine),
                model.opened_by,
                shown(theirs)
            )));
        }
    }
    if keep_logits && !model.logits {
        return Err(conflict(format!(
            "element {element} has smooth={} but {} opened the shared model without \
             smoothing: smoothing needs the model's logits (smooth on the opener too, or on \
             none)",
            settings.smooth, model.opened_by
        )));
    }
    Ok(())
}

/// A property's value as the message shows it (an empty text as `""`).
fn shown(value: &str) -> &str {
    match value {
        "" => "\"\"",
        v => v,
    }
}
