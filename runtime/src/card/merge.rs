//! Merging the sources' fields into one card: the first layer that has a field wins it,
//! the graph fills names, types and fixed dims, defaults fill the rest (each with why),
//! and everything still missing is reported at once with the ways to give it.

use segtool_model_spec::palette::default_palette;
use segtool_onnx::card::MAX_CLASSES;
use segtool_onnx::{ModelIo, TensorInfo};

use super::pipeline::{Geometry, TensorSize};
use super::{
    CardFields, CardSource, ChannelOrder, Dtype, Fit, InputCard, Layout, ModelCard, OutputCard,
    OutputKind, Resample, ResizeFilter, ResolvedCard, Restore, FIELDS,
};

/// The first layer that has a field wins it; returns the value and its source.
fn pick<T: Clone>(
    layers: &[(CardFields, CardSource)],
    get: impl Fn(&CardFields) -> Option<T>,
) -> Option<(T, CardSource)> {
    layers
        .iter()
        .find_map(|(f, s)| get(f).map(|v| (v, s.clone())))
}

/// What the merge has found out: each field's source, and what is missing (reported at
/// once).
#[derive(Default)]
struct Notes {
    sources: Vec<(&'static str, CardSource)>,
    missing: Vec<&'static str>,
}

impl Notes {
    fn note(&mut self, field: &'static str, source: CardSource) {
        self.sources.push((field, source));
    }
}

/// An optional field: the first layer's value, noted with its source (`none` when no
/// layer has it).
fn pick_noted<T: Clone>(
    layers: &[(CardFields, CardSource)],
    field: &'static str,
    get: impl Fn(&CardFields) -> Option<T>,
    notes: &mut Notes,
) -> Option<T> {
    let found = pick(layers, get);
    let source = found
        .as_ref()
        .map_or(CardSource::Default("none"), |f| f.1.clone());
    notes.note(field, source);
    found.map(|f| f.0)
}

/// Merges the layers over the graph's defaults.
pub(super) fn merge(
    layers: &[(CardFields, CardSource)],
    io: &ModelIo,
) -> std::result::Result<ResolvedCard, String> {
    let mut notes = Notes::default();
    let input = merge_input(layers, io, &mut notes);
    let output = merge_output(layers, io, &mut notes);
    let classes = merge_classes(layers, io, &output, &mut notes)?;
    if !notes.missing.is_empty() {
        return Err(format!(
            "no segtool spec or card, and {} missing: {}; {WAYS}",
            if notes.missing.len() == 1 {
                "this is"
            } else {
                "these are"
            },
            notes.missing.join("; ")
        ));
    }
    let (palette, s) = pick(layers, |f| f.palette.clone()).unwrap_or_else(|| {
        (
            default_palette(classes.len()),
            CardSource::Default("segtool's palette"),
        )
    });
    notes.note("palette", s);
    let mut sources = notes.sources;
    sources.sort_by_key(|(f, _)| FIELDS.iter().position(|x| x == f));
    Ok(ResolvedCard {
        path: None,
        card: ModelCard {
            input,
            output,
            classes,
            palette,
        },
        sources,
        segtool_export: false,
    })
}

/// The input's fields: name, type and layout from the graph where it says them.
fn merge_input(layers: &[(CardFields, CardSource)], io: &ModelIo, notes: &mut Notes) -> InputCard {
    let (input_name, input_info, dtype, layout) = input_tensor(layers, io, notes);
    let (channels, s) = pick(layers, |f| f.input.channels)
        .unwrap_or((ChannelOrder::Rgb, CardSource::Default("RGB")));
    notes.note("input.channels", s);

    let (scale, mean, std) =
        normalisation(layers, dtype, input_channels(input_info, layout), notes);

    let size = input_size(layers, input_info, layout);
    notes.note(
        "input.size",
        size.as_ref()
            .map_or(CardSource::Default("any size"), |s| s.1.clone()),
    );
    let divisor = pick_noted(
        layers,
        "input.size_divisor",
        |f| f.input.size_divisor,
        notes,
    );
    let (fit, s) = pick(layers, |f| f.input.fit).unwrap_or((Fit::Pad, CardSource::Default("pad")));
    notes.note("input.fit", s);
    let keep_ratio = pick_noted(layers, "input.keep_ratio", |f| f.input.keep_ratio, notes);
    let min_short_side = pick_noted(
        layers,
        "input.min_short_side",
        |f| f.input.min_short_side,
        notes,
    );
    let (resize_filter, s) = pick(layers, |f| f.input.resize_filter)
        .unwrap_or((ResizeFilter::Opencv, CardSource::Default("opencv")));
    notes.note("input.resize_filter", s);
    let (resample, s) = pick(layers, |f| f.input.resample)
        .unwrap_or((Resample::Bilinear, CardSource::Default("bilinear")));
    notes.note("input.resample", s);
    let shortest_edge = pick_noted(
        layers,
        "input.shortest_edge",
        |f| f.input.shortest_edge,
        notes,
    );
    let longest_edge = pick_noted(
        layers,
        "input.longest_edge",
        |f| f.input.longest_edge,
        notes,
    );
    let keep_aspect_ratio = pick_noted(
        layers,
        "input.keep_aspect_ratio",
        |f| f.input.keep_aspect_ratio,
        notes,
    );
    let ensure_multiple_of = pick_noted(
        layers,
        "input.ensure_multiple_of",
        |f| f.input.ensure_multiple_of,
        notes,
    );
    let center_crop = pick_noted(layers, "input.center_crop", |f| f.input.center_crop, notes);
    let pad_size = pick_noted(layers, "input.pad_size", |f| f.input.pad_size, notes);

    InputCard {
        name: input_name,
        layout,
        dtype,
        channels,
        scale,
        mean,
        std,
        size: size.map(|s| s.0),
        size_divisor: divisor,
        fit,
        keep_ratio,
        min_short_side,
        resize_filter,
        resample,
        shortest_edge,
        longest_edge,
        keep_aspect_ratio: keep_aspect_ratio.unwrap_or(false),
        ensure_multiple_of,
        center_crop,
        pad_size,
    }
}

/// The graph input the card feeds, with its element type and layout: from the graph
/// where it says them, else the card's layers, else the defaults (noted).
fn input_tensor<'a>(
    layers: &[(CardFields, CardSource)],
    io: &'a ModelIo,
    notes: &mut Notes,
) -> (String, &'a TensorInfo, Dtype, Layout) {
    let graph_input = &io.inputs[0];
    let (input_name, s) = pick(layers, |f| f.input.name.clone())
        .unwrap_or((graph_input.name.clone(), CardSource::Graph));
    notes.note("input.name", s);
    let input_info = io
        .inputs
        .iter()
        .find(|t| t.name == input_name)
        .unwrap_or(graph_input);
    let (dtype, s) = match input_info.elem_type {
        2 => (Dtype::Uint8, CardSource::Graph),
        1 => (Dtype::Float32, CardSource::Graph),
        _ => pick(layers, |f| f.input.dtype).unwrap_or((
            Dtype::Float32,
            CardSource::Default("the graph declares no element type"),
        )),
    };
    notes.note("input.dtype", s);
    let (layout, s) =
        pick(layers, |f| f.input.layout).unwrap_or_else(|| graph_layout(&input_info.dims, dtype));
    notes.note("input.layout", s);
    (input_name, input_info, dtype, layout)
}

/// `input.size`: the card's layers', else the graph's fixed `[height, width]` when no
/// layer gives another resize or a centre crop. A processor resizes before it crops, so a
/// fixed graph's size is the tensor's, not the resize's ([`check_fixed_size`]).
fn input_size(
    layers: &[(CardFields, CardSource)],
    input_info: &TensorInfo,
    layout: Layout,
) -> Option<([usize; 2], CardSource)> {
    if let Some(given) = pick(layers, |f| f.input.size) {
        return Some(given);
    }
    let steps = |f: &CardFields| {
        let i = &f.input;
        i.shortest_edge.is_some()
            || i.keep_ratio.is_some()
            || i.min_short_side.is_some()
            || i.center_crop.is_some()
    };
    if layers.iter().any(|(f, _)| steps(f)) {
        return None;
    }
    graph_size(input_info, layout).map(|(h, w)| ([h, w], CardSource::Graph))
}

/// The graph input's fixed `(height, width)`, where both are fixed.
pub(super) fn graph_size(input_info: &TensorInfo, layout: Layout) -> Option<(usize, usize)> {
    let dim = |i: usize| input_info.dims.get(i).copied().flatten();
    let (h, w) = match layout {
        Layout::Nchw => (dim(2), dim(3)),
        Layout::Nhwc => (dim(1), dim(2)),
    };
    match (h, w) {
        (Some(h), Some(w)) if h > 0 && w > 0 => Some((h as usize, w as usize)),
        _ => None,
    }
}

/// A card whose steps do not make the tensor a fixed-size graph takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct SizeConflict {
    /// The card field that decides the tensor's size, or makes it follow the image.
    pub field: &'static str,
    /// The tensor the steps make (`None`: each image's own).
    pub tensor: Option<(usize, usize)>,
    /// The graph's input.
    pub input: String,
    /// Its fixed `(height, width)`.
    pub graph: (usize, usize),
}

impl std::fmt::Display for SizeConflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (gh, gw) = self.graph;
        match self.tensor {
            Some((h, w)) => write!(f, "{} makes a {h}x{w} input tensor", self.field)?,
            None => write!(
                f,
                "{} makes an input tensor of each image's size",
                self.field
            )?,
        }
        write!(
            f,
            ", but the graph fixes input {:?} at {gh}x{gw}",
            self.input
        )
    }
}

/// The graph's fixed input size against the tensor `card`'s steps make (a card with no
/// resize at all takes the graph's size in [`merge`]).
pub(super) fn check_fixed_size(card: &ModelCard, io: &ModelIo) -> Result<(), SizeConflict> {
    let i = &card.input;
    let Some(graph) = io
        .inputs
        .iter()
        .find(|t| t.name == i.name)
        .and_then(|t| graph_size(t, i.layout))
    else {
        return Ok(());
    };
    let conflict = |field, tensor| SizeConflict {
        field,
        tensor,
        input: i.name.clone(),
        graph,
    };
    match Geometry::tensor_size(card) {
        TensorSize::Fixed(tensor, _) if tensor == graph => Ok(()),
        TensorSize::Fixed(tensor, field) => Err(conflict(field, Some(tensor))),
        TensorSize::FollowsImage(None) => Ok(()),
        TensorSize::FollowsImage(Some(field)) => Err(conflict(field, None)),
    }
}

/// The layout the graph's input dims say (channels of 1 or 3 first or last), else the
/// usual one for `dtype`.
fn graph_layout(dims: &[Option<i64>], dtype: Dtype) -> (Layout, CardSource) {
    let channels_last =
        dims.len() == 4 && matches!(dims[3], Some(1 | 3)) && !matches!(dims[1], Some(1 | 3));
    if channels_last {
        (Layout::Nhwc, CardSource::Graph)
    } else if dims.len() == 4 && matches!(dims[1], Some(1 | 3)) {
        (Layout::Nchw, CardSource::Graph)
    } else if dtype == Dtype::Uint8 {
        (
            Layout::Nhwc,
            CardSource::Default("uint8 images are channels-last"),
        )
    } else {
        (
            Layout::Nchw,
            CardSource::Default("float images are channels-first"),
        )
    }
}

/// `input.scale`, `input.mean` and `input.std`: given, or neutral for a uint8 input (the
/// graph normalises); a float input without mean and std is noted as missing.
/// `channels`: the input's channel count where the graph says it.
fn normalisation(
    layers: &[(CardFields, CardSource)],
    dtype: Dtype,
    channels: Option<usize>,
    notes: &mut Notes,
) -> (f32, Vec<f32>, Vec<f32>) {
    let (mean, std, scale) = if dtype == Dtype::Uint8 {
        let mean = pick(layers, |f| f.input.mean.clone());
        let std = pick(layers, |f| f.input.std.clone());
        let neutral = CardSource::Default("a uint8 input: the graph normalises");
        let width = channels.unwrap_or(3);
        (
            mean.unwrap_or((vec![0.0; width], neutral.clone())),
            std.unwrap_or((vec![1.0; width], neutral.clone())),
            pick(layers, |f| f.input.scale).unwrap_or((1.0, neutral)),
        )
    } else {
        let mean = pick(layers, |f| f.input.mean.clone());
        let std = pick(layers, |f| f.input.std.clone());
        let (mean, std) = match (mean, std) {
            (Some(mean), Some(std)) => (mean, std),
            _ => {
                notes.missing.push(
                    "the input's normalisation (input.mean and input.std, and input.scale \
                     unless the mean is in 0-1 units)",
                );
                let gap = || (Vec::new(), CardSource::Default("missing"));
                (gap(), gap())
            }
        };
        let scale = pick(layers, |f| f.input.scale).unwrap_or_else(|| {
            if mean.0.iter().chain(&std.0).all(|v| *v <= 1.0) {
                (
                    1.0 / 255.0,
                    CardSource::Default("mean and std <= 1: pixels scaled to 0-1"),
                )
            } else {
                (
                    1.0,
                    CardSource::Default("mean or std > 1: pixels kept at 0-255"),
                )
            }
        });
        (mean, std, scale)
    };
    notes.note("input.scale", scale.1);
    notes.note("input.mean", mean.1);
    notes.note("input.std", std.1);

    (scale.0, mean.0, std.0)
}

/// The output's fields: the graph's first output, its kind from its element type.
fn merge_output(
    layers: &[(CardFields, CardSource)],
    io: &ModelIo,
    notes: &mut Notes,
) -> OutputCard {
    let graph_output = &io.outputs[0];
    let (output_name, s) = pick(layers, |f| f.output.name.clone())
        .unwrap_or((graph_output.name.clone(), CardSource::Graph));
    notes.note("output.name", s);
    let output_info = io
        .outputs
        .iter()
        .find(|t| t.name == output_name)
        .unwrap_or(graph_output);
    let integer = matches!(output_info.elem_type, 2 | 6 | 7);
    let (kind, s) = pick(layers, |f| f.output.kind).unwrap_or(if integer {
        (OutputKind::ClassMap, CardSource::Graph)
    } else {
        (
            OutputKind::Logits,
            CardSource::Default("a float output is per-class scores"),
        )
    });
    notes.note("output.kind", s);
    let (align_corners, s) = pick(layers, |f| f.output.align_corners).unwrap_or((
        false,
        CardSource::Default("false, as PyTorch's and ONNX's resize"),
    ));
    notes.note("output.align_corners", s);
    let threshold = pick_noted(layers, "output.threshold", |f| f.output.threshold, notes);
    let (restore, s) = pick(layers, |f| f.output.restore).unwrap_or((
        Restore::Undo,
        CardSource::Default("undo the input's geometry"),
    ));
    notes.note("output.restore", s);
    let class_output = pick_noted(
        layers,
        "output.class_output",
        |f| f.output.class_output.clone(),
        notes,
    );
    let mask_size = pick_noted(layers, "output.mask_size", |f| f.output.mask_size, notes);

    OutputCard {
        name: output_name,
        kind,
        align_corners,
        threshold,
        restore,
        class_output,
        mask_size,
    }
}

/// The class names: given, numbered from a count, or numbered from the graph's output.
fn merge_classes(
    layers: &[(CardFields, CardSource)],
    io: &ModelIo,
    output: &OutputCard,
    notes: &mut Notes,
) -> std::result::Result<Vec<String>, String> {
    let output_info = io
        .outputs
        .iter()
        .find(|t| t.name == output.name)
        .unwrap_or(&io.outputs[0]);
    let graph_classes = match (output.kind, output_info.dims.get(1)) {
        (OutputKind::Binary, _) => Some(2),
        (OutputKind::Logits | OutputKind::Probabilities, Some(Some(c))) if *c > 0 => {
            Some(*c as usize)
        }
        // The class logits [N, Q, K + 1]: the last class is "no object".
        (OutputKind::MaskClassification, _) => output
            .class_output
            .as_ref()
            .and_then(|name| io.outputs.iter().find(|t| &t.name == name))
            .and_then(|t| t.dims.get(2).copied().flatten())
            .filter(|k| *k > 1)
            .map(|k| k as usize - 1),
        _ => None,
    };
    let (classes, s) = match pick(layers, |f| f.classes.clone()) {
        Some(named) => named,
        None => match pick(layers, |f| f.num_classes)
            .or_else(|| graph_classes.map(|n| (n, CardSource::Graph)))
        {
            Some((n, _)) if n > MAX_CLASSES => {
                return Err(format!(
                    "{n} classes (num_classes, or the graph's output channels): a class map \
                     holds at most {MAX_CLASSES}"
                ))
            }
            Some((n, s)) => ((0..n).map(|i| format!("class_{i}")).collect(), s),
            None => {
                notes.missing.push(
                    "the classes (classes or num_classes: the graph's output does not say how \
                     many)",
                );
                (Vec::new(), CardSource::Default("missing"))
            }
        },
    };
    notes.note("classes", s);
    Ok(classes)
}

fn input_channels(info: &segtool_onnx::TensorInfo, layout: Layout) -> Option<usize> {
    let axis = match layout {
        Layout::Nchw => 1,
        Layout::Nhwc => 3,
    };
    info.dims.get(axis).copied().flatten().map(|c| c as usize)
}

const WAYS: &str = "give them in a sidecar MODEL.segtool.toml next to the model, a card \
                    file (--card FILE), a Hugging Face folder (preprocessor_config.json), or \
                    flags (--mean, --std, --scale, --classes, --num-classes, ...); or export \
                    the model with `segtool export`";
