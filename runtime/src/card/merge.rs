//! Merging the sources' fields into one card: the first layer that has a field wins it,
//! the graph fills names, types and fixed dims, defaults fill the rest (each with why),
//! and everything still missing is reported at once with the ways to give it.

use segtool_onnx::card::MAX_CLASSES;
use segtool_onnx::ModelIo;
use segtool_spec::palette::default_palette;

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

/// An optional field: the first layer's value, noted with its source (`none` when no
/// layer has it).
fn pick_noted<T: Clone>(
    layers: &[(CardFields, CardSource)],
    field: &'static str,
    get: impl Fn(&CardFields) -> Option<T>,
    note: &mut impl FnMut(&'static str, CardSource),
) -> Option<T> {
    let found = pick(layers, get);
    let source = found
        .as_ref()
        .map_or(CardSource::Default("none"), |f| f.1.clone());
    note(field, source);
    found.map(|f| f.0)
}

/// Merges the layers over the graph's defaults.
pub(super) fn merge(
    layers: &[(CardFields, CardSource)],
    io: &ModelIo,
) -> std::result::Result<ResolvedCard, String> {
    let mut sources = Vec::new();
    let mut note = |field: &'static str, source: CardSource| sources.push((field, source));
    // Everything missing is reported at once.
    let mut missing: Vec<&str> = Vec::new();
    let graph_input = &io.inputs[0];
    let graph_output = &io.outputs[0];

    let (input_name, s) = pick(layers, |f| f.input.name.clone())
        .unwrap_or((graph_input.name.clone(), CardSource::Graph));
    note("input.name", s);
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
    note("input.dtype", s);
    let (layout, s) = pick(layers, |f| f.input.layout).unwrap_or_else(|| {
        let dims = &input_info.dims;
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
    });
    note("input.layout", s);
    let (channels, s) = pick(layers, |f| f.input.channels)
        .unwrap_or((ChannelOrder::Rgb, CardSource::Default("RGB")));
    note("input.channels", s);

    let (mean, std, scale) = if dtype == Dtype::Uint8 {
        let mean = pick(layers, |f| f.input.mean.clone());
        let std = pick(layers, |f| f.input.std.clone());
        let neutral = CardSource::Default("a uint8 input: the graph normalises");
        let width = input_channels(input_info, layout).unwrap_or(3);
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
                missing.push(
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
    note("input.scale", scale.1);
    note("input.mean", mean.1);
    note("input.std", std.1);

    let fixed_dims = match layout {
        Layout::Nchw => (
            input_info.dims.get(2).copied().flatten(),
            input_info.dims.get(3).copied().flatten(),
        ),
        Layout::Nhwc => (
            input_info.dims.get(1).copied().flatten(),
            input_info.dims.get(2).copied().flatten(),
        ),
    };
    let size = match fixed_dims {
        (Some(h), Some(w)) if h > 0 && w > 0 => Some(([h as usize, w as usize], CardSource::Graph)),
        _ => pick(layers, |f| f.input.size),
    };
    note(
        "input.size",
        size.as_ref()
            .map_or(CardSource::Default("any size"), |s| s.1.clone()),
    );
    let divisor = pick(layers, |f| f.input.size_divisor);
    note(
        "input.size_divisor",
        divisor
            .as_ref()
            .map_or(CardSource::Default("none"), |s| s.1.clone()),
    );
    let (fit, s) = pick(layers, |f| f.input.fit).unwrap_or((Fit::Pad, CardSource::Default("pad")));
    note("input.fit", s);
    let keep_ratio = pick(layers, |f| f.input.keep_ratio);
    note(
        "input.keep_ratio",
        keep_ratio
            .as_ref()
            .map_or(CardSource::Default("none"), |s| s.1.clone()),
    );
    let min_short_side = pick(layers, |f| f.input.min_short_side);
    note(
        "input.min_short_side",
        min_short_side
            .as_ref()
            .map_or(CardSource::Default("none"), |s| s.1.clone()),
    );
    let (resize_filter, s) = pick(layers, |f| f.input.resize_filter)
        .unwrap_or((ResizeFilter::Opencv, CardSource::Default("opencv")));
    note("input.resize_filter", s);
    let (resample, s) = pick(layers, |f| f.input.resample)
        .unwrap_or((Resample::Bilinear, CardSource::Default("bilinear")));
    note("input.resample", s);
    let shortest_edge = pick_noted(
        layers,
        "input.shortest_edge",
        |f| f.input.shortest_edge,
        &mut note,
    );
    let longest_edge = pick_noted(
        layers,
        "input.longest_edge",
        |f| f.input.longest_edge,
        &mut note,
    );
    let keep_aspect_ratio = pick_noted(
        layers,
        "input.keep_aspect_ratio",
        |f| f.input.keep_aspect_ratio,
        &mut note,
    );
    let ensure_multiple_of = pick_noted(
        layers,
        "input.ensure_multiple_of",
        |f| f.input.ensure_multiple_of,
        &mut note,
    );
    let center_crop = pick_noted(
        layers,
        "input.center_crop",
        |f| f.input.center_crop,
        &mut note,
    );
    let pad_size = pick_noted(layers, "input.pad_size", |f| f.input.pad_size, &mut note);

    let (output_name, s) = pick(layers, |f| f.output.name.clone())
        .unwrap_or((graph_output.name.clone(), CardSource::Graph));
    note("output.name", s);
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
    note("output.kind", s);
    let (align_corners, s) = pick(layers, |f| f.output.align_corners).unwrap_or((
        false,
        CardSource::Default("false, as PyTorch's and ONNX's resize"),
    ));
    note("output.align_corners", s);
    let threshold = pick_noted(
        layers,
        "output.threshold",
        |f| f.output.threshold,
        &mut note,
    );
    let (restore, s) = pick(layers, |f| f.output.restore).unwrap_or((
        Restore::Undo,
        CardSource::Default("undo the input's geometry"),
    ));
    note("output.restore", s);
    let class_output = pick_noted(
        layers,
        "output.class_output",
        |f| f.output.class_output.clone(),
        &mut note,
    );
    let mask_size = pick_noted(
        layers,
        "output.mask_size",
        |f| f.output.mask_size,
        &mut note,
    );

    let graph_classes = match (kind, output_info.dims.get(1)) {
        (OutputKind::Binary, _) => Some(2),
        (OutputKind::Logits | OutputKind::Probabilities, Some(Some(c))) if *c > 0 => {
            Some(*c as usize)
        }
        // The class logits [N, Q, K + 1]: the last class is "no object".
        (OutputKind::MaskClassification, _) => class_output
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
                missing.push(
                    "the classes (classes or num_classes: the graph's output does not say how \
                     many)",
                );
                (Vec::new(), CardSource::Default("missing"))
            }
        },
    };
    if !missing.is_empty() {
        return Err(format!(
            "no segtool spec or card, and {} missing: {}; {WAYS}",
            if missing.len() == 1 {
                "this is"
            } else {
                "these are"
            },
            missing.join("; ")
        ));
    }
    note("classes", s);
    let (palette, s) = pick(layers, |f| f.palette.clone()).unwrap_or_else(|| {
        (
            default_palette(classes.len()),
            CardSource::Default("segtool's palette"),
        )
    });
    note("palette", s);

    let card = ModelCard {
        input: InputCard {
            name: input_name,
            layout,
            dtype,
            channels,
            scale: scale.0,
            mean: mean.0,
            std: std.0,
            size: size.map(|s| s.0),
            size_divisor: divisor.map(|d| d.0),
            fit,
            keep_ratio: keep_ratio.map(|k| k.0),
            min_short_side: min_short_side.map(|m| m.0),
            resize_filter,
            resample,
            shortest_edge,
            longest_edge,
            keep_aspect_ratio: keep_aspect_ratio.unwrap_or(false),
            ensure_multiple_of,
            center_crop,
            pad_size,
        },
        output: OutputCard {
            name: output_name,
            kind,
            align_corners,
            threshold,
            restore,
            class_output,
            mask_size,
        },
        classes,
        palette,
    };
    sources.sort_by_key(|(f, _)| FIELDS.iter().position(|x| x == f));
    Ok(ResolvedCard {
        path: None,
        card,
        sources,
        segtool_export: false,
    })
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
