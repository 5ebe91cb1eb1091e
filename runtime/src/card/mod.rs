//! Where a model's card comes from, field by field, and what each field's source was.
//!
//! Sources, first found wins for each field:
//! 1. the file's own metadata: a segtool export's spec (everything), or a card written
//!    into the file by `segtool card --out` ([`CARD_METADATA_KEY`]);
//! 2. a sidecar `M.segtool.toml` next to the model, or a card file given explicitly
//!    ([`CardRequest::card_file`]), in the card's TOML form ([`sidecar`]);
//! 3. the folder conventions of mmdeploy (`deploy.json` + `pipeline.json`, [`mmdeploy`])
//!    and Hugging Face (`config.json` + `preprocessor_config.json`, [`huggingface`]);
//! 4. the caller's own fields ([`CardRequest::fields`]: the command line's `--mean`,
//!    `--classes`, ...).
//!
//! Then the graph: its input and output names, element types and fixed dims fill what no
//! source gave; a card that contradicts them is refused, naming both sides
//! ([`ModelCard::check_graph`]). A fixed graph size fills `input.size` only where no source
//! gives a resize or a centre crop: otherwise the tensor the source's steps make (a
//! processor's resize to 256, then its crop to 224) must be the graph's size. A field nothing gives and nothing can default
//! (the normalisation of a float input) is an error naming what is missing and the ways
//! to give it.

mod fields;
pub mod huggingface;
mod json;
pub mod mask_head;
mod merge;
pub mod mmdeploy;
pub mod pipeline;
pub mod preset;
pub mod sidecar;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use segtool_model_spec::SPEC_METADATA_KEY;
pub use segtool_onnx::card::{
    ChannelOrder, Dtype, Fit, InputCard, Layout, ModelCard, OutputCard, OutputKind, Resample,
    ResizeFilter, Restore, CARD_METADATA_KEY,
};
use segtool_onnx::{read_io, read_props, Metadata, ModelIo};

use crate::error::{Result, RuntimeError};

pub use fields::{CardFields, InputFields, OutputFields};

/// Where a field's value came from.
///
/// # Example
///
/// ```
/// use segtool_runtime::card::{self, CardSource};
/// use segtool_runtime::IoContract;
/// use segtool_model_spec::{BackboneSpec, ModelSpec};
/// // A segtool export's card: every field from its spec (`card::resolve` reads a file's).
/// let spec = ModelSpec::new("demo", BackboneSpec::tiny(), vec!["road".into(), "car".into()]);
/// let resolved = card::from_spec(&spec, IoContract::default(), "image", "logits");
/// assert_eq!(resolved.source_of("input.mean"), Some(&CardSource::SegtoolSpec));
/// // Shown to the user as `segtool card --show` does.
/// let sidecar = CardSource::Sidecar("deeplab.segtool.toml".into());
/// assert_eq!(sidecar.to_string(), "sidecar deeplab.segtool.toml");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CardSource {
    /// A segtool export's spec and I/O contract (`segtool.spec`).
    SegtoolSpec,
    /// A card in the file's metadata (`segtool.card`).
    Metadata,
    /// A sidecar `M.segtool.toml`.
    Sidecar(PathBuf),
    /// A card file given by the caller (`--card FILE`).
    CardFile(PathBuf),
    /// An mmdeploy SDK folder (`deploy.json`, `pipeline.json`).
    Mmdeploy(PathBuf),
    /// A Hugging Face folder (`config.json`, `preprocessor_config.json`).
    HuggingFace(PathBuf),
    /// The caller's fields (command-line flags, a front end's options).
    Caller,
    /// The graph itself (names, element types, fixed dims).
    Graph,
    /// A default, with why it applies.
    Default(&'static str),
}

impl std::fmt::Display for CardSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CardSource::SegtoolSpec => write!(f, "the file's segtool spec ({SPEC_METADATA_KEY})"),
            CardSource::Metadata => write!(f, "the file's metadata ({CARD_METADATA_KEY})"),
            CardSource::Sidecar(p) => write!(f, "sidecar {}", p.display()),
            CardSource::CardFile(p) => write!(f, "card file {}", p.display()),
            CardSource::Mmdeploy(p) => write!(f, "mmdeploy SDK folder {}", p.display()),
            CardSource::HuggingFace(p) => write!(f, "Hugging Face folder {}", p.display()),
            CardSource::Caller => f.write_str("command line"),
            CardSource::Graph => f.write_str("the graph"),
            CardSource::Default(why) => write!(f, "default ({why})"),
        }
    }
}

/// What the caller adds to the model file: a card file and fields of its own.
///
/// ```no_run
/// use segtool_runtime::card::CardRequest;
/// use segtool_runtime::Segmenter;
/// // A model from elsewhere, with the card that says how to feed it and read its output.
/// let seg = Segmenter::builder("deeplab.onnx")
///     .card(CardRequest::new().card_file("deeplab.segtool.toml"))
///     .open()?;
/// # Ok::<(), segtool_runtime::RuntimeError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CardRequest {
    /// A card file in TOML (`--card FILE`), in place of the sidecar.
    pub card_file: Option<PathBuf>,
    /// Fields given directly (lowest priority: they fill what the files leave open).
    pub fields: CardFields,
}

impl CardRequest {
    /// No card file, no fields: the model file and its folder must say everything.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads the card from `path` (TOML) instead of looking for a sidecar.
    pub fn card_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.card_file = Some(path.into());
        self
    }

    /// Fields of the caller's own.
    pub fn fields(mut self, fields: CardFields) -> Self {
        self.fields = fields;
        self
    }
}

/// A card with the source of each field.
///
/// # Example
///
/// ```
/// use segtool_runtime::card;
/// use segtool_runtime::IoContract;
/// use segtool_model_spec::{BackboneSpec, ModelSpec};
/// let spec = ModelSpec::new("demo", BackboneSpec::tiny(), vec!["road".into(), "car".into()]);
/// // `card::resolve("model.onnx", &request)` reads a file's; a segtool export's amounts to:
/// let resolved = card::from_spec(&spec, IoContract::default(), "image", "logits");
/// assert!(resolved.segtool_export);
/// assert_eq!(resolved.card.input.mean, spec.mean.to_vec());
/// assert_eq!(resolved.card.num_classes(), 2);
/// for (field, source) in &resolved.sources {
///     println!("{field}: {source}");
/// }
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedCard {
    /// The model file the card describes (`None` for a card made from a spec alone).
    pub path: Option<PathBuf>,
    /// The card.
    pub card: ModelCard,
    /// `(field, source)` for every field, in the card's order.
    pub sources: Vec<(&'static str, CardSource)>,
    /// A segtool export (its spec is the card's origin). Provenance only: every model
    /// runs through its card the same way.
    pub segtool_export: bool,
}

impl ResolvedCard {
    /// Where `field` (`input.mean`, `classes`, ...) came from.
    pub fn source_of(&self, field: &str) -> Option<&CardSource> {
        self.sources
            .iter()
            .find(|(f, _)| *f == field)
            .map(|(_, s)| s)
    }
}

/// Writes a copy of `model` at `out` with `card` in its metadata ([`CARD_METADATA_KEY`]),
/// checked against the graph first; the copy describes itself from then on.
pub fn write_card(model: &Path, out: &Path, card: &ModelCard) -> Result<()> {
    let io = read_io(model)?;
    merge::check_fixed_size(card, &io)
        .map_err(|c| c.to_string())
        .and_then(|()| check_graph(card, &io))
        .map_err(|message| RuntimeError::Card {
            path: model.to_path_buf(),
            message: format!("the card contradicts the graph: {message}"),
        })?;
    let entries = [(CARD_METADATA_KEY.to_string(), card.to_json())];
    Ok(segtool_onnx::copy_with_metadata(model, out, &entries)?)
}

/// The sidecar a model's card is looked for in: `model.onnx` -> `model.segtool.toml`.
pub fn sidecar_path(model: &Path) -> PathBuf {
    model.with_extension("segtool.toml")
}

/// The ONNX file a model path names: the file itself, or in a folder the network of an
/// mmdeploy SDK (`deploy.json`'s `net`) or a Hugging Face export's `model.onnx` (at the
/// top, or under `onnx/`).
pub fn model_file(path: &Path) -> Result<PathBuf> {
    if !path.is_dir() {
        return Ok(path.to_path_buf());
    }
    if let Some(net) = mmdeploy::model_file(path)? {
        return Ok(net);
    }
    for candidate in ["model.onnx", "onnx/model.onnx"] {
        if path.join(candidate).is_file() {
            return Ok(path.join(candidate));
        }
    }
    Err(RuntimeError::Card {
        path: path.to_path_buf(),
        message: "a folder with no model in it: an mmdeploy SDK folder has deploy.json, a \
                  Hugging Face export model.onnx (or onnx/model.onnx)"
            .into(),
    })
}

/// The folder of `model` whose convention files apply: its own, or for a Hugging Face
/// `onnx/model.onnx` the folder above.
fn convention_folder(model: &Path) -> PathBuf {
    let folder = model.parent().unwrap_or(Path::new("."));
    let has_files = |f: &Path| {
        [mmdeploy::PIPELINE, huggingface::PREPROCESSOR_CONFIG]
            .iter()
            .any(|name| f.join(name).is_file())
    };
    match folder.parent() {
        Some(up) if !has_files(folder) && folder.ends_with("onnx") && has_files(up) => {
            up.to_path_buf()
        }
        _ => folder.to_path_buf(),
    }
}

/// Resolves the card of the model at `path` (a file, or a folder [`model_file`] finds the
/// model in; see the module docs); the error names the file, what is missing or
/// contradictory, and the ways to give it.
pub fn resolve(path: &Path, request: &CardRequest) -> Result<ResolvedCard> {
    let path = &model_file(path)?;
    let err = |message: String| RuntimeError::Card {
        path: path.to_path_buf(),
        message,
    };
    let props = read_props(path)?;
    let io = read_io(path)?;
    let has = |key: &str| props.iter().any(|(k, _)| k == key);
    if has(SPEC_METADATA_KEY) {
        let metadata = Metadata::from_props(path, &props)?;
        return Ok(ResolvedCard {
            path: Some(path.to_path_buf()),
            ..from_segtool_export(&metadata, &io)
        });
    }
    let mut layers: Vec<(CardFields, CardSource)> = Vec::new();
    if let Some((_, json)) = props.iter().find(|(k, _)| k == CARD_METADATA_KEY) {
        let card = ModelCard::from_json(json)
            .map_err(|e| err(format!("metadata {CARD_METADATA_KEY} is malformed: {e}")))?;
        layers.push((fields_of(&card), CardSource::Metadata));
    }
    match &request.card_file {
        Some(file) => layers.push((sidecar::read(file)?, CardSource::CardFile(file.clone()))),
        None => {
            let side = sidecar_path(path);
            if side.is_file() {
                layers.push((sidecar::read(&side)?, CardSource::Sidecar(side)));
            }
        }
    }
    let folder = convention_folder(path);
    if let Some(fields) = mmdeploy::read_folder(&folder)? {
        layers.push((fields, CardSource::Mmdeploy(folder.clone())));
    }
    if let Some(fields) = huggingface::read_folder(&folder)? {
        layers.push((fields, CardSource::HuggingFace(folder)));
    }
    layers.push((request.fields.clone(), CardSource::Caller));
    let resolved = ResolvedCard {
        path: Some(path.to_path_buf()),
        ..merge::merge(&layers, &io).map_err(err)?
    };
    merge::check_fixed_size(&resolved.card, &io).map_err(|c| size_refusal(path, &resolved, &c))?;
    check_graph(&resolved.card, &io)
        .map_err(|e| err(format!("the card contradicts the graph: {e}")))?;
    Ok(resolved)
}

/// [`ModelCard::check_graph`] without its fixed-size check, which compares `input.size`
/// alone (a centre crop or padding makes another tensor); [`merge::check_fixed_size`]
/// compares the tensor the card's steps make instead.
fn check_graph(card: &ModelCard, io: &ModelIo) -> std::result::Result<(), String> {
    let mut io = io.clone();
    let spatial = match card.input.layout {
        Layout::Nchw => [2, 3],
        Layout::Nhwc => [1, 2],
    };
    for input in io.inputs.iter_mut().filter(|t| t.name == card.input.name) {
        for axis in spatial {
            if let Some(dim) = input.dims.get_mut(axis) {
                *dim = None;
            }
        }
    }
    card.check_graph(&io)
}

/// The refusal of a card whose steps do not make the graph's fixed size: it names the
/// file the deciding field came from (and its key there), the model, and both sizes.
fn size_refusal(model: &Path, resolved: &ResolvedCard, c: &merge::SizeConflict) -> RuntimeError {
    let (path, key) = match resolved.source_of(c.field) {
        Some(CardSource::HuggingFace(folder)) => (
            folder.join(huggingface::PREPROCESSOR_CONFIG),
            huggingface::key_of(c.field),
        ),
        Some(CardSource::Mmdeploy(folder)) => (folder.join(mmdeploy::PIPELINE), None),
        Some(CardSource::Sidecar(file) | CardSource::CardFile(file)) => (file.clone(), None),
        _ => (model.to_path_buf(), None),
    };
    let key = key.map_or_else(String::new, |k| format!("{k}: "));
    RuntimeError::Card {
        path,
        message: format!(
            "{key}{c} ({}): the steps and the export disagree; give a card file (--card) \
             with the steps the graph was exported for",
            model.display()
        ),
    }
}

/// The card a segtool export's spec and I/O contract amount to; a fixed-size graph's
/// size is its resize (`input.size`, from the graph).
pub fn from_segtool_export(metadata: &Metadata, io: &ModelIo) -> ResolvedCard {
    let contract = segtool_onnx::IoContract::resolve(metadata.contract, io.contract());
    export_card(&metadata.spec, contract, io)
}

/// The card of a segtool export with `spec`, run with `contract` (its graph's names and
/// fixed size from `io`).
pub(crate) fn export_card(
    spec: &segtool_model_spec::ModelSpec,
    contract: segtool_onnx::IoContract,
    io: &ModelIo,
) -> ResolvedCard {
    let mut resolved = from_spec(spec, contract, &io.inputs[0].name, &io.outputs[0].name);
    let layout = resolved.card.input.layout;
    if let Some((h, w)) = merge::graph_size(&io.inputs[0], layout) {
        // Frames of another size are fitted to the graph by the card's resize, whose
        // filter from_spec sets: OpenCV's bilinear, as training's data pipeline resizes.
        resolved.card.input.size = Some([h, w]);
        for (field, source) in resolved.sources.iter_mut() {
            if *field == "input.size" {
                *source = CardSource::Graph;
            }
        }
    }
    resolved
}

/// The card of a segtool model with `spec` and `contract`, whose graph input and output
/// are named `input` and `output`.
pub fn from_spec(
    spec: &segtool_model_spec::ModelSpec,
    contract: segtool_onnx::IoContract,
    input: &str,
    output: &str,
) -> ResolvedCard {
    let uint8 = contract.input == segtool_onnx::InputLayout::NhwcU8;
    let card = ModelCard {
        input: InputCard {
            name: input.to_string(),
            layout: if uint8 { Layout::Nhwc } else { Layout::Nchw },
            dtype: if uint8 { Dtype::Uint8 } else { Dtype::Float32 },
            channels: ChannelOrder::Rgb,
            scale: if uint8 { 1.0 } else { 1.0 / 255.0 },
            mean: if uint8 {
                vec![0.0; 3]
            } else {
                spec.mean.to_vec()
            },
            std: if uint8 {
                vec![1.0; 3]
            } else {
                spec.std.to_vec()
            },
            size: None,
            size_divisor: None,
            fit: Fit::Pad,
            keep_ratio: None,
            min_short_side: None,
            // What resizes a segtool model's images (a fixed-size graph's size, set by
            // export_card): OpenCV's bilinear INTER_LINEAR, as segtool's training data
            // pipeline and mmsegmentation's test pipeline resize, so a frame fitted to
            // the graph is sampled as the images the model learnt from.
            resize_filter: ResizeFilter::Opencv,
            resample: Resample::Bilinear,
            shortest_edge: None,
            longest_edge: None,
            keep_aspect_ratio: false,
            ensure_multiple_of: None,
            center_crop: None,
            pad_size: None,
        },
        output: OutputCard {
            name: output.to_string(),
            kind: match contract.output {
                segtool_onnx::OutputKind::Logits => OutputKind::Logits,
                segtool_onnx::OutputKind::Mask => OutputKind::ClassMap,
            },
            align_corners: spec.align_corners,
            threshold: None,
            restore: Restore::Undo,
            class_output: None,
            mask_size: None,
        },
        classes: spec.classes.clone(),
        palette: spec.palette.clone(),
    };
    let sources = FIELDS
        .iter()
        .map(|f| (*f, CardSource::SegtoolSpec))
        .collect();
    ResolvedCard {
        path: None,
        card,
        sources,
        segtool_export: true,
    }
}

/// What the runtime's spec-based code (palettes, class names, the batch server) knows of
/// a model from elsewhere: classes, palette, `align_corners`, and the normalisation as
/// RGB in 0-1 (`(x * scale - mean) / std` on 0-255 pixels is `(x / 255 - mean / (255 *
/// scale)) / (std / (255 * scale))`, channels put in RGB order). The architecture fields
/// are placeholders (`arch` `"external"`, the tiny backbone).
pub fn spec_of(card: &ModelCard) -> segtool_model_spec::ModelSpec {
    let mut spec = segtool_model_spec::ModelSpec::new(
        "unknown (model card)",
        segtool_model_spec::BackboneSpec::tiny(),
        card.classes.clone(),
    );
    spec.arch = "external".into();
    spec.palette = card.palette.clone();
    spec.align_corners = card.output.align_corners;
    let i = &card.input;
    if i.mean.len() == 3 && i.dtype == Dtype::Float32 {
        let k = 255.0 * i.scale;
        let order: [usize; 3] = match i.channels {
            ChannelOrder::Rgb => [0, 1, 2],
            ChannelOrder::Bgr => [2, 1, 0],
        };
        for (c, &from) in order.iter().enumerate() {
            spec.mean[c] = i.mean[from] / k;
            spec.std[c] = i.std[from] / k;
        }
    }
    spec
}

/// The card's fields, in order (the names `segtool card --show` prints).
pub const FIELDS: [&str; 29] = [
    "input.name",
    "input.layout",
    "input.dtype",
    "input.channels",
    "input.scale",
    "input.mean",
    "input.std",
    "input.size",
    "input.size_divisor",
    "input.fit",
    "input.keep_ratio",
    "input.min_short_side",
    "input.resize_filter",
    "input.resample",
    "input.shortest_edge",
    "input.longest_edge",
    "input.keep_aspect_ratio",
    "input.ensure_multiple_of",
    "input.center_crop",
    "input.pad_size",
    "output.name",
    "output.kind",
    "output.align_corners",
    "output.threshold",
    "output.restore",
    "output.class_output",
    "output.mask_size",
    "classes",
    "palette",
];

fn fields_of(card: &ModelCard) -> CardFields {
    let (i, o) = (&card.input, &card.output);
    CardFields {
        input: InputFields {
            name: Some(i.name.clone()),
            layout: Some(i.layout),
            dtype: Some(i.dtype),
            channels: Some(i.channels),
            scale: Some(i.scale),
            mean: Some(i.mean.clone()),
            std: Some(i.std.clone()),
            size: i.size,
            size_divisor: i.size_divisor,
            fit: Some(i.fit),
            keep_ratio: i.keep_ratio,
            min_short_side: i.min_short_side,
            resize_filter: Some(i.resize_filter),
            resample: Some(i.resample),
            shortest_edge: i.shortest_edge,
            longest_edge: i.longest_edge,
            keep_aspect_ratio: Some(i.keep_aspect_ratio),
            ensure_multiple_of: i.ensure_multiple_of,
            center_crop: i.center_crop,
            pad_size: i.pad_size,
        },
        output: OutputFields {
            name: Some(o.name.clone()),
            kind: Some(o.kind),
            align_corners: Some(o.align_corners),
            threshold: o.threshold,
            restore: Some(o.restore),
            class_output: o.class_output.clone(),
            mask_size: o.mask_size,
        },
        classes: Some(card.classes.clone()),
        num_classes: None,
        palette: Some(card.palette.clone()),
    }
}
