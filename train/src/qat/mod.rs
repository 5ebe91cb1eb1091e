//! Quantisation-aware training: fake quantisation in the loop, placed exactly where the
//! INT8 file quantises.
//!
//! Placement is not written here. [`FakeQuant::new`] exports the model being trained to
//! its fp32 ONNX graph in memory (segtool-export, BatchNorm folded), asks the calibration
//! crate's QDQ plan which reads of which tensors go through a Q/DQ pair for the layout
//! ([`segtool_calibration::qdq::quantised_reads`]) and which Conv weights and biases are
//! quantised, and the tch model calls [`FakeQuant::read`] at every op input, named by
//! the ONNX node and tensor it becomes. A read the plan quantises and the model never
//! visits is refused ([`FakeQuant::check_coverage`]), so the two cannot drift apart.
//!
//! The arithmetic is ONNX's: an activation read is `(clamp(round(x / s) + z, qmin, qmax)
//! - z) * s` (round half to even, as QuantizeLinear), with the scale and zero point the
//! layout derives from the threshold T ([`Layout::activation`], the function the QDQ
//! rewrite calls); a Conv weight is the export's BN-folded weight (folded in f64, rounded
//! once to f32, as the export folds it), quantised per output channel, symmetric, over
//! the weight range; a quantised bias is rounded to the int32 grid of `s_in * s_w`.
//! Gradients pass rounding straight through (STE) and are zero where the clamp
//! saturates; with [`RangeLearning::Lsq`] they reach the thresholds too (LSQ).
//!
//! Thresholds start from a calibration of the float model on training images with the
//! calibration crate's statistics and calibrators ([`FakeQuant::calibrate`]), and live in
//! the checkpoint as [`QAT_THRESHOLDS_TENSOR`] beside a [`QatSpec`] (the contract, owned
//! by `segtool_model_spec::qat`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use anyhow::{bail, Context, Result};
use prost::Message;
use segtool_calibration::qdq::{self, Layout, WeightRange};
use segtool_calibration::stats::{Histogram, Range};
use segtool_calibration::Method;
use segtool_export::proto::ModelProto;
use segtool_model_spec::qat::{QatSpec, QAT_METADATA_KEY, QAT_THRESHOLDS_TENSOR};
use segtool_model_spec::ModelSpec;
use tch::{nn, Kind, Tensor};

mod forward;
mod ranges;

pub use forward::fake_quant;
pub use ranges::{threshold_movement, ThresholdSummary};

/// PyTorch's BatchNorm epsilon, which the export folds with.
const BN_EPS: f64 = 1e-5;

/// How thresholds move in training.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeLearning {
    /// A moving average of each batch's range (PyTorch's default QAT observers), the
    /// range of the global batch (the largest over the ranks); gradients through
    /// rounding by the straight-through estimator.
    Ema,
    /// Learned by gradient (LSQ, Esser et al. 2020), with LSQ's gradient scale over the
    /// global batch (so that data-parallel ranks train what one process would).
    Lsq,
}

impl RangeLearning {
    pub fn name(self) -> &'static str {
        match self {
            Self::Ema => "ema",
            Self::Lsq => "lsq",
        }
    }

    pub fn from_name(s: &str) -> Option<Self> {
        [Self::Ema, Self::Lsq].into_iter().find(|r| r.name() == s)
    }
}

/// QAT settings.
#[derive(Clone, Debug)]
pub struct QatOptions {
    pub layout: Layout,
    pub weight_range: WeightRange,
    pub ranges: RangeLearning,
    /// Calibrator of the initial thresholds (the calibration crate's).
    pub method: Method,
    pub percentile: f64,
    /// Iteration from which BatchNorm statistics are frozen (running statistics, the
    /// exported folding in the forward); `None`: never.
    pub freeze_bn_at: Option<usize>,
    /// EMA: weight of each batch's range.
    pub ema_momentum: f64,
    /// Training images the initial calibration sees (recorded in the [`QatSpec`]).
    pub init_samples: usize,
}

impl Default for QatOptions {
    fn default() -> Self {
        Self {
            layout: Layout::Portable,
            weight_range: WeightRange::for_this_cpu(),
            ranges: RangeLearning::Ema,
            method: Method::Entropy,
            percentile: 99.99,
            freeze_bn_at: None,
            ema_momentum: 0.01,
            init_samples: 32,
        }
    }
}

/// One quantised read as the tch model sees it.
#[derive(Clone, Debug)]
struct Read {
    /// Index into the thresholds.
    source: usize,
    nonneg: bool,
    /// Statistics of the source come from this read: `Some(false)` the value read,
    /// `Some(true)` its Relu (the read's source is the Relu of the tensor), `None` not
    /// from here.
    observe: Option<bool>,
}

enum Mode {
    Quantise,
    Ranges(Vec<Range>),
    Histograms(Vec<Histogram>),
}

struct State {
    mode: Mode,
    visited: HashSet<(String, String)>,
    /// Sources already observed in this forward.
    observed: Vec<bool>,
    /// EMA: the largest |x| of each source in this step.
    batch_max: Vec<f32>,
    /// The current forward is a training one.
    training: bool,
}

/// Fake quantisation of one model for one layout (see the module docs).
pub struct FakeQuant {
    pub options: QatOptions,
    /// Scale sources (ONNX tensor names), the order of `thresholds`.
    pub sources: Vec<String>,
    reads: HashMap<(String, String), Read>,
    /// Quantised Conv nodes -> whether their bias is quantised too.
    weights: HashMap<String, bool>,
    /// `qat.thresholds` in the VarStore.
    pub thresholds: Tensor,
    bn_frozen: AtomicBool,
    /// Data-parallel ranks: LSQ's gradient scale counts the global batch's elements.
    world_size: AtomicUsize,
    state: Mutex<State>,
}

// SAFETY: the thresholds tensor is a libtorch tensor like every model parameter (tch
// marks Tensor Send); forwards only read it, and writes (`set_thresholds`) happen between
// steps on the training thread, as for the parameters the optimiser updates. The rest of
// the state is behind a Mutex or atomic.
unsafe impl Send for FakeQuant {}
unsafe impl Sync for FakeQuant {}

impl std::fmt::Debug for FakeQuant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeQuant")
            .field("layout", &self.options.layout)
            .field("sources", &self.sources.len())
            .field("reads", &self.reads.len())
            .finish()
    }
}

impl QatOptions {
    /// The settings a QAT checkpoint's contract records (`spec`): what resumes it, or
    /// rebuilds its fake-quant model.
    pub fn from_spec(spec: &QatSpec) -> Result<Self> {
        let unknown = |what: &str, v: &str| anyhow::anyhow!("QAT spec: unknown {what} {v:?}");
        Ok(Self {
            layout: Layout::from_name(&spec.layout)
                .ok_or_else(|| unknown("layout", &spec.layout))?,
            weight_range: WeightRange::from_name(&spec.weight_range)
                .ok_or_else(|| unknown("weight range", &spec.weight_range))?,
            ranges: RangeLearning::from_name(&spec.ranges)
                .ok_or_else(|| unknown("range learning", &spec.ranges))?,
            method: spec.init_method.parse().map_err(anyhow::Error::msg)?,
            freeze_bn_at: spec.freeze_bn_at.map(|i| i as usize),
            init_samples: spec.init_samples,
            ..Self::default()
        })
    }
}

/// The model of a QAT checkpoint as it trained: its weights with fake quantisation at
/// its learned thresholds (eval mode gives what the INT8 file computes); `None` for a
/// float checkpoint.
pub fn load_model(
    checkpoint: &crate::Checkpoint,
    device: tch::Device,
) -> Result<Option<(nn::VarStore, crate::DaNet)>> {
    let Some(json) = checkpoint.info.get(QAT_METADATA_KEY) else {
        return Ok(None);
    };
    let spec = QatSpec::from_json(json).map_err(anyhow::Error::msg)?;
    let mut vs = nn::VarStore::new(device);
    let mut model = crate::DaNet::new(&vs.root(), &checkpoint.spec);
    let fq = FakeQuant::new(&vs, &checkpoint.spec, QatOptions::from_spec(&spec)?)?;
    if fq.sources != spec.sources {
        bail!(
            "the checkpoint's QAT quantises other tensors than its model's plan for layout {:?}",
            spec.layout
        );
    }
    checkpoint.load_into(&mut vs)?;
    fq.set_bn_frozen(true);
    model.set_qat(Some(std::sync::Arc::new(fq)));
    Ok(Some((vs, model)))
}

/// The fp32 ONNX graph `segtool export` writes for the variables of `vs`.
pub fn export_fp32(vs: &nn::VarStore, spec: &ModelSpec) -> Result<ModelProto> {
    let bytes = crate::checkpoint::to_bytes(vs, spec, &Default::default())?;
    let st = safetensors::SafeTensors::deserialize(&bytes)?;
    let (onnx, _) =
        segtool_export::export_onnx_bytes(&st, spec, &segtool_export::ExportOptions::default())
            .context("exporting the model to plan its quantisation")?;
    Ok(ModelProto::decode(onnx.as_slice())?)
}

impl FakeQuant {
    /// Plans fake quantisation of the model in `vs` for `options.layout` and adds the
    /// thresholds variable ([`QAT_THRESHOLDS_TENSOR`], zeros until [`Self::calibrate`] or
    /// a checkpoint fills it; trainable with LSQ) to `vs`.
    pub fn new(vs: &nn::VarStore, spec: &ModelSpec, options: QatOptions) -> Result<Self> {
        let model = export_fp32(vs, spec)?;
        let plan = qdq::plan(&model, &[], options.layout)?;
        let (reads, weights) = qdq::quantised_reads(&model, &plan)?;
        let g = qdq::graph(&model)?;
        let op: HashMap<&str, &str> = g
            .node
            .iter()
            .map(|n| (n.name.as_str(), n.op_type.as_str()))
            .collect();
        let relu_of: HashSet<(&str, &str)> = plan
            .outputs
            .iter()
            .filter(|(t, s)| t != s)
            .map(|(t, s)| (t.as_str(), s.as_str()))
            .collect();
        let mut sources: Vec<String> = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut by_read = HashMap::new();
        for r in &reads {
            // A Shape reads only the dimensions: nothing to quantise in tch.
            if op.get(r.node.as_str()) == Some(&"Shape") {
                continue;
            }
            let source = *index.entry(r.scale_source.clone()).or_insert_with(|| {
                sources.push(r.scale_source.clone());
                sources.len() - 1
            });
            let observe = if r.tensor == r.scale_source {
                Some(false)
            } else if relu_of.contains(&(r.tensor.as_str(), r.scale_source.as_str())) {
                Some(true)
            } else {
                None
            };
            by_read.insert(
                (r.node.clone(), r.tensor.clone()),
                Read {
                    source,
                    nonneg: r.nonneg,
                    observe,
                },
            );
        }
        let weights = weights
            .into_iter()
            .map(|w| (w.node, w.bias.is_some()))
            .collect();
        let n = sources.len() as i64;
        let root = vs.root() / "qat";
        let name = QAT_THRESHOLDS_TENSOR
            .strip_prefix("qat.")
            .expect("the thresholds tensor lives under qat.");
        let thresholds = match options.ranges {
            RangeLearning::Lsq => root.zeros(name, &[n]),
            RangeLearning::Ema => root.zeros_no_train(name, &[n]),
        };
        Ok(Self {
            sources,
            reads: by_read,
            weights,
            thresholds,
            bn_frozen: AtomicBool::new(false),
            world_size: AtomicUsize::new(1),
            state: Mutex::new(State {
                mode: Mode::Quantise,
                visited: HashSet::new(),
                observed: vec![false; n as usize],
                batch_max: vec![0.0; n as usize],
                training: false,
            }),
            options,
        })
    }

    /// The contract written beside the thresholds in a checkpoint.
    pub fn spec(&self, init_samples: usize) -> QatSpec {
        QatSpec {
            layout: self.options.layout.name().into(),
            per_channel: true,
            weight_range: self.options.weight_range.name().into(),
            ranges: self.options.ranges.name().into(),
            init_method: self.options.method.name().into(),
            init_samples,
            freeze_bn_at: self.options.freeze_bn_at.map(|i| i as u64),
            sources: self.sources.clone(),
        }
    }

    /// Refuses to resume `spec` (a checkpoint's) with other settings: the layout, the
    /// weight granularity and range, or the quantised tensors.
    pub fn check_resume(&self, spec: &QatSpec) -> Result<()> {
        let mine = self.spec(spec.init_samples);
        let differ = |what: &str, a: &str, b: &str| -> Result<()> {
            if a != b {
                bail!("the checkpoint was trained with QAT {what} {b:?}; resuming it with {a:?} is refused (start a new QAT run from a float checkpoint)");
            }
            Ok(())
        };
        differ("layout", &mine.layout, &spec.layout)?;
        differ(
            "weight granularity",
            if mine.per_channel {
                "per-channel"
            } else {
                "per-tensor"
            },
            if spec.per_channel {
                "per-channel"
            } else {
                "per-tensor"
            },
        )?;
        differ("weight range", &mine.weight_range, &spec.weight_range)?;
        differ("range learning", &mine.ranges, &spec.ranges)?;
        if mine.sources != spec.sources {
            bail!("the checkpoint's QAT quantises other tensors than this model's plan for layout {:?}", mine.layout);
        }
        Ok(())
    }

    pub fn set_bn_frozen(&self, frozen: bool) {
        self.bn_frozen.store(frozen, Ordering::Relaxed);
    }

    /// Ranks training data-parallel (1: one process); set by the trainer.
    pub fn set_world_size(&self, world_size: usize) {
        self.world_size.store(world_size.max(1), Ordering::Relaxed);
    }

    pub fn bn_frozen(&self) -> bool {
        self.bn_frozen.load(Ordering::Relaxed)
    }

    /// The thresholds as f32, in [`Self::sources`] order.
    pub fn threshold_values(&self) -> Vec<f32> {
        Vec::<f32>::try_from(
            self.thresholds
                .detach()
                .to_device(tch::Device::Cpu)
                .to_kind(Kind::Float),
        )
        .expect("thresholds convert")
    }

    /// Thresholds by source name.
    pub fn thresholds_by_name(&self) -> BTreeMap<String, f32> {
        self.sources
            .iter()
            .cloned()
            .zip(self.threshold_values())
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every read the plan quantises was visited by a forward since the last check.
    pub fn check_coverage(&self) -> Result<()> {
        let s = self.lock();
        let mut missing: Vec<_> = self
            .reads
            .keys()
            .filter(|k| !s.visited.contains(*k))
            .collect();
        missing.sort();
        if let Some((node, tensor)) = missing.first() {
            bail!(
                "the {} QDQ plan quantises {} read(s) the tch model never makes, e.g. node {node:?} reading {tensor:?}",
                self.options.layout.name(),
                missing.len()
            );
        }
        Ok(())
    }

    /// The checkpoint header entry ([`QAT_METADATA_KEY`], the [`QatSpec`] JSON).
    pub fn metadata(&self, init_samples: usize) -> (String, String) {
        (
            QAT_METADATA_KEY.to_string(),
            self.spec(init_samples).to_json(),
        )
    }
}

/// Refuses to fold BatchNorm for QAT when the initial weights did not set its statistics:
/// `missing` are the model variables the file left at their init (an import report's),
/// `file` names it. The error names the first BatchNorm statistic missing.
pub fn check_bn_statistics(missing: &[String], file: &str) -> Result<()> {
    let mut lacking: Vec<&String> = missing
        .iter()
        .filter(|n| n.ends_with(".running_mean") || n.ends_with(".running_var"))
        .collect();
    lacking.sort();
    if let Some(first) = lacking.first() {
        bail!(
            "QAT folds BatchNorm into the convolutions as the INT8 export does, but {file} has \
             no `{first}` ({} BatchNorm statistics missing): start QAT from a checkpoint \
             trained with its BatchNorm statistics",
            lacking.len()
        );
    }
    Ok(())
}
