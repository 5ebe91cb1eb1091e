//! The export itself: a checkpoint's tensors and spec in, an ONNX model out (graph,
//! weights inline or in a side file, metadata), with the report of what was written.

use std::path::Path;

use prost::Message;
use safetensors::SafeTensors;
use segtool_model_spec::ModelSpec;
use segtool_onnx::{InputLayout, IoContract, Metadata, OutputKind};

use crate::builder::{self, GraphBuilder};
use crate::conv::Ctx;
use crate::proto::{
    DataType, Dim, GraphProto, ModelProto, OperatorSetIdProto, StringStringEntryProto,
};
use crate::weights::Weights;
use crate::{backbone, doc, external, head, layer_names, preprocess, proto, SPEC_METADATA_KEY};
use crate::{ExportError, ExportOptions, ExportTarget, ExternalData, ExternalDataFile};

/// Opset written unless asked otherwise: old enough for every maintained runtime.
pub const DEFAULT_OPSET: i64 = 17;
/// Range of default-domain opsets the emitted ops are valid in (Softmax/Reshape/Resize
/// semantics used here date from opset 13).
pub const MIN_OPSET: i64 = 13;
/// Newest default-domain opset segtool writes (ONNX `Attention` needs it).
pub const MAX_OPSET: i64 = 23;

/// Name of the graph input (normalised RGB, NCHW float32).
pub const INPUT_NAME: &str = "image";
/// Name of the graph output (class logits at input resolution).
pub const OUTPUT_NAME: &str = "logits";
/// Name of the graph output under `--argmax` (class map at input resolution).
pub const MASK_OUTPUT_NAME: &str = "mask";
/// The auxiliary FCN head's logits (`--aux`, mmsegmentation imports): a second output,
/// float32 [batch, classes, height, width], after the main one.
pub const AUX_OUTPUT_NAME: &str = "aux_logits";

/// Largest image expected by default (Cityscapes full frames): TensorRT profile hints
/// and the attention memory budget use it unless `--max-size` says otherwise.
pub const DEFAULT_MAX_SIZE: (i64, i64) = (1024, 2048);
/// Largest batch written into the TensorRT profile hint of a dynamic-batch export.
pub const TRT_MAX_BATCH: i64 = 8;

/// Domain of ONNX Runtime's contrib operators (`MultiHeadAttention`).
pub const MS_DOMAIN: &str = "com.microsoft";
/// Opset that introduced ONNX `Attention` (needs `ir_version` 11).
pub const ATTENTION_OPSET: i64 = 23;

/// What an export produced.
#[derive(Clone, Debug)]
pub struct ExportReport {
    /// Nodes in the graph.
    pub nodes: usize,
    /// Initialisers (weights and constants) in the graph, inline or external.
    pub initializers: usize,
    /// Size of the serialised model (the .onnx file, without its side file).
    pub bytes: u64,
    /// BatchNorm layers folded into convolutions.
    pub folded_bn: usize,
    /// The model spec, as written to `metadata_props`.
    pub spec: ModelSpec,
    /// The side file holding large initialisers, when the export uses external data.
    pub external: Option<ExternalReport>,
}

/// The external data side file of an export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExternalReport {
    /// File name, relative to the model's directory (the tensors' `location`).
    pub location: String,
    /// Size of the side file.
    pub bytes: u64,
    /// Initialisers stored in it.
    pub tensors: usize,
}

/// A serialised export: the model and, when it uses external data, the side file's
/// contents (to be written as `report.external.location` next to the model).
#[derive(Clone, Debug)]
pub struct ExportParts {
    /// The serialised ModelProto (the .onnx file's bytes).
    pub onnx: Vec<u8>,
    /// The side file, when initialisers were moved to external data.
    pub data: Option<ExternalDataFile>,
    /// What the export produced.
    pub report: ExportReport,
}

/// Where an export goes, which decides how external data can be named (or not at all).
#[derive(Clone, Copy)]
pub(crate) enum Dest<'a> {
    /// One in-memory buffer: no external data possible.
    Memory,
    /// A model file: the side file is `<file name>.data` beside it.
    File(&'a Path),
    /// The caller names the side file (relative to the model).
    Named(&'a str),
}

/// Exports the checkpoint at `checkpoint` (safetensors with the spec in its metadata) to
/// an ONNX file at `out`, written atomically (temp file in the same directory, fsync,
/// rename): an interrupted export never leaves a torn model behind. With external data
/// (see [`ExternalData`]) the side file `<out>.data` is written first, the same way, and
/// the model last; see [`external::write_files`] for the guarantees.
pub fn export_onnx(
    checkpoint: &Path,
    out: &Path,
    opts: &ExportOptions,
) -> Result<ExportReport, ExportError> {
    let path = checkpoint.to_path_buf();
    let bytes = std::fs::read(checkpoint).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => ExportError::NotFound { path: path.clone() },
        _ => ExportError::Read {
            path: path.clone(),
            source,
        },
    })?;
    let not_st = |e: safetensors::SafeTensorError| ExportError::NotSafetensors {
        path: path.clone(),
        reason: e.to_string(),
    };
    let (_, header) = SafeTensors::read_metadata(&bytes).map_err(not_st)?;
    let json = header
        .metadata()
        .as_ref()
        .and_then(|m| m.get(SPEC_METADATA_KEY))
        .ok_or_else(|| ExportError::MissingSpec { path: path.clone() })?;
    let spec = ModelSpec::from_json(json).map_err(|source| ExportError::BadSpec {
        path: path.clone(),
        source,
    })?;
    let tensors = SafeTensors::deserialize(&bytes).map_err(not_st)?;
    let sha = sha256_hex(&bytes);
    let parts = build(
        &tensors,
        &spec,
        opts,
        Some(&sha),
        Dest::File(out),
        external::PROTOBUF_LIMIT,
    )?;
    external::write_files(out, &parts.onnx, parts.data.as_ref())?;
    Ok(parts.report)
}

/// Lower-case hex sha256 of `bytes` (the checkpoint hash written to metadata).
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// In-memory form of [`export_onnx`]: the serialised ModelProto and its report. No
/// checkpoint file, so no `segtool.checkpoint_sha256` (see [`export_model`]).
///
/// One buffer cannot hold external data: the tensors' `location` names a file relative
/// to a model path this API does not know, and the whole point of external data is a
/// model that one protobuf buffer cannot carry. So when the export would use it
/// ([`ExternalData::Always`] with an initialiser over the threshold, or
/// [`ExternalData::Auto`] past 2 GiB) this fails with
/// [`ExportError::ExternalDataInMemory`], which names the option; callers that want both
/// buffers use [`export_onnx_parts`]. The signature stays as it was for existing callers.
pub fn export_onnx_bytes(
    tensors: &SafeTensors,
    spec: &ModelSpec,
    opts: &ExportOptions,
) -> Result<(Vec<u8>, ExportReport), ExportError> {
    export_model(tensors, spec, opts, None)
}

/// [`export_onnx_bytes`] recording `checkpoint_sha256` (hex) in the metadata.
pub fn export_model(
    tensors: &SafeTensors,
    spec: &ModelSpec,
    opts: &ExportOptions,
    checkpoint_sha256: Option<&str>,
) -> Result<(Vec<u8>, ExportReport), ExportError> {
    let parts = build(
        tensors,
        spec,
        opts,
        checkpoint_sha256,
        Dest::Memory,
        external::PROTOBUF_LIMIT,
    )?;
    debug_assert!(parts.data.is_none());
    Ok((parts.onnx, parts.report))
}

/// In-memory export that may use external data: the model, and the side file's contents
/// when [`ExportOptions::external_data`] calls for it. `location` is the side file's name
/// relative to the model (a plain file name, e.g. `model.onnx.data` for `model.onnx`,
/// see [`external::location_for`]); the caller writes both, data before model.
pub fn export_onnx_parts(
    tensors: &SafeTensors,
    spec: &ModelSpec,
    opts: &ExportOptions,
    checkpoint_sha256: Option<&str>,
    location: &str,
) -> Result<ExportParts, ExportError> {
    build(
        tensors,
        spec,
        opts,
        checkpoint_sha256,
        Dest::Named(location),
        external::PROTOBUF_LIMIT,
    )
}

/// The export, deciding external data against `limit` (protobuf's, outside tests).
pub(crate) fn build(
    tensors: &SafeTensors,
    spec: &ModelSpec,
    opts: &ExportOptions,
    checkpoint_sha256: Option<&str>,
    dest: Dest<'_>,
    limit: u64,
) -> Result<ExportParts, ExportError> {
    opts.validate()?;
    spec.validate()?;

    let mut ctx = Ctx::new(GraphBuilder::new(opts.opset), Weights::new(tensors));
    ctx.fp16 = opts.fp16;
    ctx.keep_fp32 = opts.keep_fp32.clone();
    ctx.conv_split_depth = opts.conv_split_depth;
    // Claim the interface names first so no internal value can take them.
    let image = ctx.g.unique(INPUT_NAME);
    let output = ctx.g.unique(opts.output_kind());
    let aux_output = network(&mut ctx, spec, opts, &image, &output)?;

    let folded_bn = ctx.folded_bn;
    let mut opset_import = vec![OperatorSetIdProto {
        domain: String::new(),
        version: opts.opset,
    }];
    opset_import.extend(ctx.g.domains().map(|d| OperatorSetIdProto {
        domain: d.to_string(),
        version: 1,
    }));
    let dims = IoDims::of(opts);
    let (node, initializer, value_info) = finish_graph(ctx, opts, dims, &image);
    let (nodes, initializers) = (node.len(), initializer.len());
    let classes = spec.num_classes() as i64;
    let graph = GraphProto {
        name: "danet".into(),
        node,
        initializer,
        input: vec![dims.input(&image, opts)],
        output: dims.outputs(&output, aux_output.as_deref(), classes, opts),
        value_info,
        ..Default::default()
    };
    let model = ModelProto {
        ir_version: doc::ir_version_for(opts.opset),
        opset_import,
        producer_name: "segtool".into(),
        producer_version: env!("CARGO_PKG_VERSION").into(),
        doc_string: doc::doc_string(spec, opts),
        graph: Some(graph),
        metadata_props: metadata_props(spec, opts, checkpoint_sha256),
        ..Default::default()
    };
    let report = ExportReport {
        nodes,
        initializers,
        bytes: 0,
        folded_bn,
        spec: spec.clone(),
        external: None,
    };
    encode(model, opts, dest, limit, report)
}

/// DANet's nodes from `image` to `output` (logits, or the argmax class map), and the
/// auxiliary head's logits when asked for: their name.
fn network(
    ctx: &mut Ctx,
    spec: &ModelSpec,
    opts: &ExportOptions,
    image: &str,
    output: &str,
) -> Result<Option<String>, ExportError> {
    let classes = spec.num_classes() as i64;
    // `nchw`: the float32 normalised NCHW image (the graph input itself by default).
    let nchw = if opts.preprocess {
        preprocess::preprocess(ctx, spec, image)
    } else {
        image.to_string()
    };
    let net_in = if opts.fp16 {
        ctx.cast(&nchw, DataType::Float16, "image_fp16")
    } else {
        nchw.clone()
    };
    if opts.aux && spec.aux_head.is_none() {
        return Err(ExportError::BadOption(
            "--aux: the checkpoint has no auxiliary head (only mmsegmentation imports have one)"
                .into(),
        ));
    }
    let tap = opts
        .aux
        .then(|| spec.aux_head.as_ref().map(|a| a.in_layer))
        .flatten();
    let (feat, tapped) = backbone::backbone_with_tap(ctx, &spec.backbone, &net_in, tap)?;
    let low = head::head(ctx, spec, &feat, opts)?;
    let aux_low = match &tapped {
        Some(t) => head::aux_head(ctx, spec, t)?,
        None => None,
    };
    // fp16: back to float32 at feature resolution, so the resize (and argmax) see fp32.
    let low = if opts.fp16 {
        ctx.to_fp32(&low, "head.conv8.1_fp32")
    } else {
        low
    };
    if let Some(name) = opts
        .keep_fp32
        .iter()
        .find(|k| !ctx.kept_matched.contains(*k))
    {
        return Err(ExportError::UnknownLayer {
            name: name.clone(),
            close: layer_names::close_layer_names(name, &ctx.convs, 5),
        });
    }
    if opts.argmax {
        let logits = ctx.g.unique(OUTPUT_NAME);
        head::upsample_into(ctx, &low, &nchw, &logits, spec.align_corners);
        let attrs = vec![
            builder::attr_int("axis", 1),
            builder::attr_int("keepdims", 0),
        ];
        if classes <= 256 {
            let idx = ctx.g.add_node("ArgMax", &[&logits], attrs, "argmax");
            ctx.g.add_node_into(
                "Cast",
                &[&idx],
                vec![builder::attr_int("to", DataType::Uint8 as i64)],
                output,
            );
        } else {
            ctx.g.add_node_into("ArgMax", &[&logits], attrs, output);
        }
    } else {
        head::upsample_into(ctx, &low, &nchw, output, spec.align_corners);
    }
    Ok(aux_low.map(|low| {
        let low = if opts.fp16 {
            ctx.to_fp32(&low, "auxlayer.conv5.4_fp32")
        } else {
            low
        };
        let out = ctx.g.unique(AUX_OUTPUT_NAME);
        head::upsample_into(ctx, &low, &nchw, &out, spec.align_corners);
        out
    }))
}

/// The graph's batch, height and width: fixed where the options fix them, else named.
#[derive(Clone, Copy)]
struct IoDims {
    batch: Dim<'static>,
    height: Dim<'static>,
    width: Dim<'static>,
}

impl IoDims {
    fn of(opts: &ExportOptions) -> Self {
        let batch = opts.batch.map_or(Dim::Named("batch"), Dim::Fixed);
        let (height, width) = opts
            .input_size
            .map_or((Dim::Named("height"), Dim::Named("width")), |(h, w)| {
                (Dim::Fixed(h), Dim::Fixed(w))
            });
        Self {
            batch,
            height,
            width,
        }
    }

    /// The input: uint8 NHWC pixels (`--preprocess`) or float32 normalised NCHW.
    fn input(self, image: &str, opts: &ExportOptions) -> proto::ValueInfoProto {
        let Self {
            batch,
            height,
            width,
        } = self;
        if opts.preprocess {
            proto::tensor_value_info(
                image,
                DataType::Uint8,
                &[batch, height, width, Dim::Fixed(3)],
            )
        } else {
            proto::tensor_value_info(
                image,
                DataType::Float,
                &[batch, Dim::Fixed(3), height, width],
            )
        }
    }

    /// The outputs: logits (or the class map of `--argmax`), then the auxiliary logits.
    fn outputs(
        self,
        output: &str,
        aux: Option<&str>,
        classes: i64,
        opts: &ExportOptions,
    ) -> Vec<proto::ValueInfoProto> {
        let Self {
            batch,
            height,
            width,
        } = self;
        let logits = [batch, Dim::Fixed(classes), height, width];
        let main = if opts.argmax {
            let dt = if classes <= 256 {
                DataType::Uint8
            } else {
                DataType::Int64
            };
            proto::tensor_value_info(output, dt, &[batch, height, width])
        } else {
            proto::tensor_value_info(output, DataType::Float, &logits)
        };
        let mut outputs = vec![main];
        if let Some(aux) = aux {
            outputs.push(proto::tensor_value_info(aux, DataType::Float, &logits));
        }
        outputs
    }
}

/// The builder's nodes and initialisers, with the feature maps' shapes for ONNX Runtime
/// (`--target ort`) and without the fp32 islands' unread casts.
fn finish_graph(
    ctx: Ctx,
    opts: &ExportOptions,
    dims: IoDims,
    image: &str,
) -> (
    Vec<proto::NodeProto>,
    Vec<proto::TensorProto>,
    Vec<proto::ValueInfoProto>,
) {
    // Shapes of the feature maps (symbolic per stride), so ORT can prove residual
    // operands equal and fuse Add+ReLU into the NCHWc convs of the dilated stages: at
    // 1024x1024 this cuts ORT's peak memory by ~120 MiB. ORT profile only: tract takes
    // value_info as hard facts and cannot unify the named symbols with concrete sizes.
    let mut value_info = if opts.target == ExportTarget::Ort {
        ctx.g
            .feature_value_info(dims.batch, dims.height, dims.width, &[image])
    } else {
        Vec::new()
    };
    let island_casts = ctx.island_casts();
    let (mut node, initializer) = ctx.g.finish();
    // An fp32 island's Cast back to FLOAT16 that nothing reads (its readers took the
    // float32 source) is dropped.
    if !island_casts.is_empty() {
        let read: std::collections::HashSet<String> =
            node.iter().flat_map(|n| n.input.iter().cloned()).collect();
        let dead = |o: &String| island_casts.contains(o) && !read.contains(o);
        node.retain(|n| !n.output.iter().any(dead));
        value_info.retain(|v| !dead(&v.name));
    }
    (node, initializer, value_info)
}

/// The file's metadata: the spec, the export options, the I/O contract, the output
/// stride, the checkpoint's hash and TensorRT's profile hint.
fn metadata_props(
    spec: &ModelSpec,
    opts: &ExportOptions,
    checkpoint_sha256: Option<&str>,
) -> Vec<StringStringEntryProto> {
    let metadata = Metadata {
        export_options: Some(
            serde_json::from_str(&opts.to_json()).expect("options serialise to JSON"),
        ),
        contract: Some(IoContract {
            input: if opts.preprocess {
                InputLayout::NhwcU8
            } else {
                InputLayout::NchwF32
            },
            output: if opts.argmax {
                OutputKind::Mask
            } else {
                OutputKind::Logits
            },
        }),
        output_stride: Some(spec.backbone.output_stride),
        checkpoint_sha256: checkpoint_sha256.map(str::to_owned),
        trt_profile: opts.trt_profile(spec.backbone.output_stride),
        ..Metadata::new(spec.clone())
    };
    metadata
        .to_props()
        .into_iter()
        .map(|(key, value)| StringStringEntryProto { key, value })
        .collect()
}

/// `model` serialised, its large weights moved to a side file when the options or the
/// size ask for it; `report` completed with the bytes and the side file.
fn encode(
    mut model: ModelProto,
    opts: &ExportOptions,
    dest: Dest<'_>,
    limit: u64,
    mut report: ExportReport,
) -> Result<ExportParts, ExportError> {
    // Sizes come from `encoded_len`, so a model over the limit is never serialised.
    let inline_len = model.encoded_len() as u64;
    let data = if external::wanted(opts.external_data, inline_len, limit) {
        external_data(&mut model, opts, dest, inline_len)?
    } else {
        None
    };
    // Protobuf parsers (onnxruntime's included) refuse messages of 2 GiB or more.
    let len = model.encoded_len() as u64;
    if len >= limit {
        return Err(ExportError::TooLarge {
            bytes: len,
            external: data.is_some(),
        });
    }
    let onnx = model.encode_to_vec();
    report.bytes = onnx.len() as u64;
    report.external = data.as_ref().map(|d| ExternalReport {
        location: d.location().to_string(),
        bytes: d.len(),
        tensors: d.tensors(),
    });
    Ok(ExportParts { onnx, data, report })
}

/// Moves `model`'s large initialisers to a side file named for `dest`; None when no
/// initialiser reaches the threshold (then nothing refers to a side file, and none is
/// written).
fn external_data(
    model: &mut ModelProto,
    opts: &ExportOptions,
    dest: Dest<'_>,
    inline_len: u64,
) -> Result<Option<ExternalDataFile>, ExportError> {
    let location = match dest {
        Dest::Memory => None,
        Dest::File(path) => Some(external::location_for(path).ok_or_else(|| {
            ExportError::BadOption(format!(
                "{}: external data needs a model file name in UTF-8 (it names the side file)",
                path.display()
            ))
        })),
        Dest::Named(l) => {
            let mut parts = Path::new(l).components();
            let plain = matches!(parts.next(), Some(std::path::Component::Normal(_)))
                && parts.next().is_none();
            Some(if plain {
                Ok(l.to_string())
            } else {
                Err(ExportError::BadOption(format!(
                    "external data location `{l}`: expected a plain file name (the side file \
                     lives next to the model)"
                )))
            })
        }
    };
    let graph = model.graph.as_mut().expect("the model has a graph");
    let placeholder = location.as_ref().and_then(|l| l.as_ref().ok());
    let file = external::externalize(
        graph,
        placeholder.map_or("", String::as_str),
        opts.external_threshold,
    );
    if file.tensors() == 0 {
        return Ok(None);
    }
    match location {
        Some(Ok(_)) => Ok(Some(file)),
        Some(Err(e)) => Err(e),
        None => Err(ExportError::ExternalDataInMemory {
            reason: match opts.external_data {
                ExternalData::Always => "`ExportOptions::external_data` is `Always`".into(),
                _ => format!("inline it would be {inline_len} bytes, over protobuf's 2 GiB limit"),
            },
        }),
    }
}
