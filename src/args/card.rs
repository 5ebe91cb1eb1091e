//! The model-card flags every command that opens a model takes (`--card FILE`,
//! `--classes`, `--mean`, ...): what a foreign ONNX file needs beside its graph. They fill
//! only what the file's metadata, a sidecar card and a Hugging Face folder's files leave
//! open (see `segtool_runtime::card`).

use std::path::{Path, PathBuf};

use segtool_runtime::card::{CardFields, CardRequest, ModelCard};
use segtool_runtime::card::{ChannelOrder, Fit, OutputKind, ResizeFilter};

#[derive(clap::Args, Clone, Debug, Default)]
pub struct CardArgs {
    /// A model card in TOML (in place of the sidecar MODEL.segtool.toml).
    #[arg(long, value_name = "FILE")]
    pub card: Option<PathBuf>,
    /// Class names, comma-separated.
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub classes: Option<Vec<String>>,
    /// A class count, when there are no names.
    #[arg(long, value_name = "N")]
    pub num_classes: Option<usize>,
    /// Per-channel mean subtracted after --scale, comma-separated (3 values, 1 for grey).
    #[arg(
        long,
        value_delimiter = ',',
        allow_hyphen_values = true,
        value_name = "M"
    )]
    pub mean: Option<Vec<f32>>,
    /// Per-channel std divided by after the mean, comma-separated.
    #[arg(long, value_delimiter = ',', value_name = "S")]
    pub std: Option<Vec<f32>>,
    /// Factor on 0-255 pixels before the mean: `1/255` or `1` (default: 1/255 when every
    /// mean and std is <= 1).
    #[arg(long, value_parser = parse_scale, value_name = "F")]
    pub scale: Option<f32>,
    /// The model takes BGR (OpenCV-trained models).
    #[arg(long)]
    pub bgr: bool,
    /// The graph input to feed (default: its first).
    #[arg(long, value_name = "NAME")]
    pub input_name: Option<String>,
    /// The graph output to read (default: its first).
    #[arg(long, value_name = "NAME")]
    pub output_name: Option<String>,
    /// logits, probabilities, class_map or binary.
    #[arg(long, value_parser = parse_kind, value_name = "KIND")]
    pub output_kind: Option<OutputKind>,
    /// Probability threshold of a binary output.
    #[arg(long, value_name = "P")]
    pub threshold: Option<f32>,
    /// Bilinear upsampling of low-resolution logits with align_corners=true.
    #[arg(long)]
    pub align_corners: bool,
    /// Input sizes must be multiples of this.
    #[arg(long, value_name = "N")]
    pub size_divisor: Option<usize>,
    /// pad (default) or resize, to a multiple of --size-divisor.
    #[arg(long, value_parser = parse_fit, value_name = "HOW")]
    pub fit: Option<Fit>,
    /// Resize keeping the aspect ratio into this box (long,short), as mmcv's
    /// Resize(keep_ratio=True).
    #[arg(long, value_delimiter = ',', num_args = 2, value_name = "LONG,SHORT")]
    pub keep_ratio: Option<Vec<usize>>,
    /// Scale images whose short side is below this up to it (PaddleOCR's limit_type min).
    #[arg(long, value_name = "PIXELS")]
    pub min_short_side: Option<usize>,
    /// Whose bilinear resize the model was trained behind: opencv (default), torchvision
    /// (antialiased; Hugging Face) or pillow.
    #[arg(long, value_parser = parse_filter, value_name = "FILTER")]
    pub resize_filter: Option<ResizeFilter>,
    /// A well-known pipeline's preprocessing in one word, under every other flag:
    /// `torchvision[:SIZE]` is torchvision's `SemanticSegmentation(resize_size=520)`
    /// (short side to SIZE, antialiased bilinear, ImageNet mean and std).
    #[arg(long, value_parser = segtool_runtime::card::preset::preset, value_name = "NAME")]
    pub preset: Option<CardFields>,
}

impl CardArgs {
    /// The request the runtime resolves the card with.
    pub fn request(&self) -> CardRequest {
        let mut fields = CardFields::default();
        fields.classes = self.classes.clone();
        fields.num_classes = self.num_classes;
        fields.input.mean = self.mean.clone();
        fields.input.std = self.std.clone();
        fields.input.scale = self.scale;
        fields.input.channels = self.bgr.then_some(ChannelOrder::Bgr);
        fields.input.name = self.input_name.clone();
        fields.input.size_divisor = self.size_divisor;
        fields.input.fit = self.fit;
        fields.input.keep_ratio = self.keep_ratio.as_deref().map(|k| [k[0], k[1]]);
        fields.input.min_short_side = self.min_short_side;
        fields.input.resize_filter = self.resize_filter;
        fields.output.name = self.output_name.clone();
        fields.output.kind = self.output_kind;
        fields.output.threshold = self.threshold;
        fields.output.align_corners = self.align_corners.then_some(true);
        if let Some(preset) = &self.preset {
            fields = segtool_runtime::card::preset::fill(fields, preset.clone());
        }
        let request = CardRequest::new().fields(fields);
        match &self.card {
            Some(file) => request.card_file(file),
            None => request,
        }
    }
}

/// A model as calibration and `compare` read it: the file to run, and the card of a model
/// from elsewhere (`None` for a segtool export: its spec says all).
pub struct CardedModel {
    pub path: PathBuf,
    pub card: Option<ModelCard>,
}

impl CardArgs {
    /// `model` with its card resolved. A mask-classification head is read through its
    /// baked copy (`segtool_runtime::card::mask_head::bake`): plain per-class scores, so
    /// an INT8 file made from it carries the head and serves on every engine.
    pub fn carded(&self, model: &Path) -> anyhow::Result<CardedModel> {
        let resolved = segtool_runtime::card::resolve(model, &self.request())?;
        if resolved.segtool_export {
            return Ok(CardedModel {
                path: model.to_path_buf(),
                card: None,
            });
        }
        let (path, card) = segtool_runtime::card::mask_head::bake(model, &resolved.card)?;
        Ok(CardedModel {
            path,
            card: Some(card),
        })
    }
}

/// `1/255`, `0.00392`, `1`.
fn parse_scale(s: &str) -> Result<f32, String> {
    let value = match s.split_once('/') {
        Some((a, b)) => {
            let (a, b): (f32, f32) = (
                a.trim()
                    .parse()
                    .map_err(|_| format!("`{s}` is not a number or a fraction"))?,
                b.trim()
                    .parse()
                    .map_err(|_| format!("`{s}` is not a number or a fraction"))?,
            );
            a / b
        }
        None => s
            .parse()
            .map_err(|_| format!("`{s}` is not a number or a fraction"))?,
    };
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(format!("`{s}` is not a positive number"))
    }
}

fn parse_kind(s: &str) -> Result<OutputKind, String> {
    serde_json::from_value(serde_json::Value::String(s.to_string())).map_err(|_| {
        format!("`{s}`: expected logits, probabilities, class_map, binary or mask_classification")
    })
}

fn parse_fit(s: &str) -> Result<Fit, String> {
    serde_json::from_value(serde_json::Value::String(s.to_string()))
        .map_err(|_| format!("`{s}`: expected pad, resize, resize_up or pad_centre"))
}

fn parse_filter(s: &str) -> Result<ResizeFilter, String> {
    serde_json::from_value(serde_json::Value::String(s.to_string()))
        .map_err(|_| format!("`{s}`: expected opencv, torchvision or pillow"))
}
