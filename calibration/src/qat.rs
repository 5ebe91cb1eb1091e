//! The INT8 file of a QAT checkpoint: the fp32 export of its weights, rewritten into QDQ
//! form by the same plan and rewrite as `calibrate`, with the checkpoint's learned
//! thresholds in place of calibrated ones (no images). The contract it reads is
//! [`segtool_model_spec::qat`].

use std::collections::BTreeMap;

use prost::Message;
use safetensors::SafeTensors;
use segtool_export::proto::ModelProto;
use segtool_export::ExportOptions;
use segtool_model_spec::qat::{QatSpec, QAT_METADATA_KEY, QAT_THRESHOLDS_TENSOR};
use segtool_model_spec::{ModelSpec, SPEC_METADATA_KEY};

use crate::qdq::{self, Layout, WeightRange};
use crate::{CalibrationError, CALIBRATION_METADATA_KEY};

/// A checkpoint's QAT contract: the spec and its learned thresholds by tensor name.
#[derive(Clone, Debug)]
pub struct QatRecord {
    pub spec: QatSpec,
    pub thresholds: BTreeMap<String, f32>,
}

/// The QAT record of a checkpoint, `None` for a float checkpoint.
pub fn read_qat(
    tensors: &SafeTensors,
    metadata: &BTreeMap<String, String>,
) -> Result<Option<QatRecord>, CalibrationError> {
    let Some(json) = metadata.get(QAT_METADATA_KEY) else {
        return Ok(None);
    };
    let spec = QatSpec::from_json(json).map_err(CalibrationError::Model)?;
    let view = tensors.tensor(QAT_THRESHOLDS_TENSOR).map_err(|_| {
        CalibrationError::Model(format!(
            "the checkpoint has QAT metadata but no `{QAT_THRESHOLDS_TENSOR}` tensor"
        ))
    })?;
    let values: Vec<f32> = view
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    if view.dtype() != safetensors::Dtype::F32 || values.len() != spec.sources.len() {
        return Err(CalibrationError::Model(format!(
            "`{QAT_THRESHOLDS_TENSOR}` holds {} values for {} quantised tensors",
            values.len(),
            spec.sources.len()
        )));
    }
    let thresholds = spec.sources.iter().cloned().zip(values).collect();
    Ok(Some(QatRecord { spec, thresholds }))
}

/// The QDQ model of `fp32` (the export of the QAT checkpoint's weights) with `qat`'s
/// thresholds, for its layout; the calibration record says `method: "qat"`.
pub fn rewrite_qat(fp32: &ModelProto, qat: &QatRecord) -> Result<ModelProto, CalibrationError> {
    let s = &qat.spec;
    let layout = Layout::from_name(&s.layout)
        .ok_or_else(|| CalibrationError::Model(format!("unknown QAT layout {:?}", s.layout)))?;
    let weight_range = WeightRange::from_name(&s.weight_range).ok_or_else(|| {
        CalibrationError::Model(format!("unknown QAT weight range {:?}", s.weight_range))
    })?;
    let plan = qdq::plan(fp32, &[], layout)?;
    let (reads, _) = qdq::quantised_reads(fp32, &plan)?;
    if let Some(r) = reads
        .iter()
        .find(|r| !qat.thresholds.contains_key(&r.scale_source))
    {
        return Err(CalibrationError::Model(format!(
            "the QAT checkpoint has no threshold for {:?}, which the {} plan quantises",
            r.scale_source,
            layout.name()
        )));
    }
    let meta = serde_json::json!({
        "method": "qat",
        "samples": s.init_samples,
        "per_channel": s.per_channel,
        "weight_range": s.weight_range,
        "layout": layout.name(),
        "tensors": plan.activations.len(),
        "keep_float": Vec::<String>::new(),
        "qat": {
            "ranges": s.ranges,
            "init_method": s.init_method,
            "freeze_bn_at": s.freeze_bn_at,
        },
    });
    // Tensors the plan lists only for statistics get their own threshold of 0 (never
    // read: no pair scales from them).
    let mut thresholds = qat.thresholds.clone();
    for t in &plan.activations {
        thresholds.entry(t.clone()).or_insert(0.0);
    }
    qdq::rewrite(
        fp32,
        &plan,
        &thresholds,
        s.per_channel,
        weight_range,
        (CALIBRATION_METADATA_KEY, meta.to_string()),
    )
}

/// The INT8 (QDQ) file of a QAT checkpoint's bytes, exported with `opts`; with the QAT
/// record it was made from. A float checkpoint is refused.
pub fn export_qat(
    checkpoint: &[u8],
    opts: &ExportOptions,
) -> Result<(Vec<u8>, QatRecord), CalibrationError> {
    let bad = |e: String| CalibrationError::Model(e);
    let metadata = checkpoint_metadata(checkpoint)?;
    let tensors = SafeTensors::deserialize(checkpoint).map_err(|e| bad(e.to_string()))?;
    let qat = read_qat(&tensors, &metadata)?.ok_or_else(|| {
        bad(format!(
            "the checkpoint has no `{QAT_METADATA_KEY}` metadata: not a QAT checkpoint"
        ))
    })?;
    let spec_json = metadata.get(SPEC_METADATA_KEY).ok_or_else(|| {
        bad(format!(
            "the checkpoint has no `{SPEC_METADATA_KEY}` metadata"
        ))
    })?;
    let spec = ModelSpec::from_json(spec_json).map_err(|e| bad(e.to_string()))?;
    let (bytes, _) = segtool_export::export_onnx_bytes(&tensors, &spec, opts)
        .map_err(|e| bad(format!("exporting the QAT checkpoint: {e}")))?;
    let fp32 = ModelProto::decode(bytes.as_slice()).map_err(|e| bad(e.to_string()))?;
    let q = rewrite_qat(&fp32, &qat)?;
    Ok((q.encode_to_vec(), qat))
}

/// The string metadata of a checkpoint's safetensors header (empty when it has none).
fn checkpoint_metadata(checkpoint: &[u8]) -> Result<BTreeMap<String, String>, CalibrationError> {
    let (_, meta) = SafeTensors::read_metadata(checkpoint)
        .map_err(|e| CalibrationError::Model(e.to_string()))?;
    Ok(meta
        .metadata()
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect())
}

/// The QAT record of a checkpoint's bytes; `None` for a float checkpoint.
pub fn checkpoint_qat(checkpoint: &[u8]) -> Result<Option<QatRecord>, CalibrationError> {
    let bad = |e: String| CalibrationError::Model(e);
    let metadata = checkpoint_metadata(checkpoint)?;
    if !metadata.contains_key(QAT_METADATA_KEY) {
        return Ok(None);
    }
    let tensors = SafeTensors::deserialize(checkpoint).map_err(|e| bad(e.to_string()))?;
    read_qat(&tensors, &metadata)
}

/// Refuses a QAT layout that `target`'s runtime cannot run: TensorRT takes only zero
/// points of 0, which `ort-cpu`'s uint8 activations (zero point 128) are not.
pub fn check_target(
    layout: &str,
    target: segtool_export::ExportTarget,
) -> Result<(), CalibrationError> {
    if target == segtool_export::ExportTarget::TensorRt && layout == Layout::OrtCpu.name() {
        return Err(CalibrationError::Input(format!(
            "QAT layout {layout:?} cannot run on export target {target}: TensorRT refuses its \
             nonzero zero points (train with layout \"portable\" for TensorRT)"
        )));
    }
    Ok(())
}

/// What exporting a QAT checkpoint as float drops, for the message that says so.
pub fn float_export_drops(qat: &QatRecord) -> String {
    format!(
        "the checkpoint was trained with QAT (layout {}, {} learned activation ranges, weights \
         per output channel, {} range): the float export drops the ranges and the weight \
         quantisation, so it is not the model QAT trained (export without --float for its \
         INT8 file)",
        qat.spec.layout,
        qat.thresholds.len(),
        qat.spec.weight_range
    )
}
