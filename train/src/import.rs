//! Weights from PyTorch into a segtool model: official DANet checkpoints (`.pth`,
//! `.pth.tar` training checkpoints, `.safetensors`) and ImageNet ResNets in torchvision
//! naming for backbone initialisation.
//!
//! Reading needs no Python: `.pth` files go through libtorch's own unpickler (see
//! [`pytorch`]); safetensors through the safetensors crate. Matching is by name, as
//! PyTorch's `load_state_dict` does, after normalising the names the wild uses:
//! `module.` (DataParallel / DDP) is stripped, torchvision's `conv1`/`bn1`/`layerK`/`fc`
//! become `pretrained.*` in backbone mode, and BN's `num_batches_tracked` is ignored (the
//! tch model has no such variable). Shapes must match exactly.
//!
//! [`infer_architecture`] reads from a file what its weights determine (depth, block
//! type, width, stem, classes), so that an official checkpoint imports without flags;
//! mmsegmentation's DANet files are recognised by their keys and translated by [`mmseg`].

mod describe;
mod infer;
pub mod mmseg;
mod pickle;
mod pytorch;

pub use describe::{import_from, init_from_file, load_init};
pub use infer::{infer_architecture, InferredArchitecture};
pub use mmseg::{from_mmseg, is_mmseg, MmsegImport, MmsegOverrides};

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{bail, Context, Result};
use safetensors::tensor::Dtype;
use safetensors::SafeTensors;
use tch::{nn, Kind, Tensor};

/// What an import initialises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImportMode {
    /// The whole DANet (`pretrained.*` and `head.*`): an official or segtool-trained model.
    Full,
    /// Only the ResNet (`pretrained.*`), e.g. from ImageNet weights; the head keeps its init.
    Backbone,
}

impl ImportMode {
    /// Backbone when the names are torchvision's (`conv1.weight`, `layer1.0...`) with no
    /// DANet prefix, Full otherwise.
    pub fn detect(state: &StateDict) -> Self {
        let names: Vec<&str> = state.tensors.iter().map(|(n, _)| strip_module(n)).collect();
        let danet = names
            .iter()
            .any(|n| n.starts_with("pretrained.") || n.starts_with("head."));
        if !danet && names.iter().any(|n| is_torchvision(n)) {
            Self::Backbone
        } else {
            Self::Full
        }
    }
}

/// The tensors of a checkpoint file, with the names it gives them.
pub struct StateDict {
    pub tensors: Vec<(String, Tensor)>,
    /// Values that are not a state-dict tensor: epoch counters, optimizer state, ...
    pub skipped: usize,
    /// Where in the file the state dict was (`state_dict`, `model`, ...), if not the root.
    pub root: Option<String>,
    /// The file's scalar values (str, int, float, bool, as text) by path from the root
    /// object, e.g. `["meta", "CLASSES", "0"]` -> `road`: what it says about itself.
    pub values: Vec<(Vec<String>, String)>,
}

/// Outcome of [`import_into`], names in the model's spelling.
#[derive(Debug, Default)]
pub struct ImportReport {
    pub loaded: Vec<String>,
    /// Model variables the file did not provide.
    pub missing: Vec<String>,
    /// File tensors the model has no place for (e.g. `pretrained.fc.*`); ignored.
    pub unexpected: Vec<String>,
}

impl ImportReport {
    /// Fails when the file and the model disagree on architecture: variables the mode
    /// should set were left at their init (any in Full mode, backbone ones in Backbone
    /// mode), or the file has tensors inside modules the model has (`pretrained.layer1.2.*`
    /// for a shallower model, a deep stem's `pretrained.conv1.0.*`, `head.*`). Tensors of
    /// modules the model lacks altogether (`pretrained.fc.*`, `auxlayer.*`) are fine.
    pub fn ensure_complete(&self, mode: ImportMode) -> Result<()> {
        let lacking: Vec<&String> = match mode {
            ImportMode::Full => self.missing.iter().collect(),
            ImportMode::Backbone => self
                .missing
                .iter()
                .filter(|n| n.starts_with("pretrained."))
                .collect(),
        };
        if let Some(first) = lacking.first() {
            let what = if mode == ImportMode::Full {
                "model"
            } else {
                "backbone"
            };
            bail!("the file lacks {} of the {what}'s tensors, e.g. `{first}` (another depth or stem?)", lacking.len());
        }
        // A full DANet file used for its backbone brings a head that is skipped on purpose.
        let skipped_head = |n: &str| mode == ImportMode::Backbone && n.starts_with("head.");
        let misplaced: Vec<&String> = self
            .unexpected
            .iter()
            .filter(|n| is_structural(n) && !skipped_head(n))
            .collect();
        if let Some(first) = misplaced.first() {
            bail!("the file has {} tensors the model has no place for, e.g. `{first}` (another depth or stem?)", misplaced.len());
        }
        Ok(())
    }
}

/// A name inside the model's own module tree: ResNet trunk or DANet head.
fn is_structural(name: &str) -> bool {
    name.starts_with("head.")
        || (name.starts_with("pretrained.") && !name.starts_with("pretrained.fc."))
}

/// Reads every tensor of a checkpoint: safetensors, or `torch.save` zip / legacy format
/// (told apart by content, not extension). Training checkpoints are unwrapped: the state
/// dict is taken from `state_dict`, `model` or `state_dict_ema`, in that order.
pub fn read_state_dict(path: &Path) -> Result<StateDict> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let not_pytorch =
        |e: anyhow::Error| anyhow::anyhow!("{}: not a PyTorch checkpoint: {e:#}", path.display());
    if bytes.starts_with(pytorch::ZIP_MAGIC) || bytes.starts_with(pytorch::LEGACY_MAGIC) {
        let found = if bytes.starts_with(pytorch::ZIP_MAGIC) {
            pytorch::read_zip(&bytes)
        } else {
            pytorch::read_legacy(&bytes)
        };
        let found = found.map_err(not_pytorch)?;
        let mut state = select_state_dict(found.tensors, found.skipped);
        state.values = found.values;
        return Ok(state);
    }
    if let Ok(st) = SafeTensors::deserialize(&bytes) {
        return read_safetensors(&st).with_context(|| format!("{}", path.display()));
    }
    let why = if path.extension().is_some_and(|e| e == "safetensors") {
        "invalid or truncated safetensors file".to_string()
    } else {
        "neither a torch.save file (zip or legacy) nor safetensors".to_string()
    };
    Err(not_pytorch(anyhow::anyhow!(why)))
}

fn read_safetensors(st: &SafeTensors) -> Result<StateDict> {
    let mut tensors = Vec::new();
    for (name, view) in st.tensors() {
        let kind = match view.dtype() {
            Dtype::F32 => Kind::Float,
            Dtype::F64 => Kind::Double,
            Dtype::F16 => Kind::Half,
            Dtype::BF16 => Kind::BFloat16,
            Dtype::I64 => Kind::Int64,
            Dtype::I32 => Kind::Int,
            Dtype::U8 => Kind::Uint8,
            Dtype::BOOL => Kind::Bool,
            other => bail!("tensor `{name}` has unsupported dtype {other:?}"),
        };
        let shape: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
        tensors.push((name, Tensor::f_from_data_size(view.data(), &shape, kind)?));
    }
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(StateDict {
        tensors,
        skipped: 0,
        root: None,
        values: Vec::new(),
    })
}

/// Picks the state dict out of the object tree: the first wrapper key holding tensors,
/// else the root. Tensors elsewhere (optimizer momenta, ...) count as skipped.
fn select_state_dict(found: Vec<(Vec<String>, Tensor)>, mut skipped: usize) -> StateDict {
    let mut prefix: Vec<String> = Vec::new();
    loop {
        let under = |key: &str| {
            found.iter().any(|(p, _)| {
                p.len() > prefix.len() + 1
                    && p[..prefix.len()] == prefix[..]
                    && p[prefix.len()] == key
            })
        };
        match ["state_dict", "model", "state_dict_ema"]
            .into_iter()
            .find(|k| under(k))
        {
            Some(k) => prefix.push(k.to_string()),
            None => break,
        }
    }
    let mut tensors = Vec::new();
    for (path, t) in found {
        if path.len() == prefix.len() + 1 && path[..prefix.len()] == prefix[..] {
            tensors.push((path.into_iter().last().unwrap(), t));
        } else {
            skipped += 1;
        }
    }
    let root = (!prefix.is_empty()).then(|| prefix.join("."));
    StateDict {
        tensors,
        skipped,
        root,
        values: Vec::new(),
    }
}

fn strip_module(name: &str) -> &str {
    let mut n = name;
    while let Some(rest) = n.strip_prefix("module.") {
        n = rest;
    }
    n
}

fn is_torchvision(name: &str) -> bool {
    // `stem.*`: mmcv's ImageNet ResNetV1c (open-mmlab://resnet50_v1c), mmseg's recipe start.
    ["conv1.", "bn1.", "fc.", "stem."]
        .iter()
        .any(|p| name.starts_with(p))
        || name
            .strip_prefix("layer")
            .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
}

/// The model's name for a file key, or None when the key is bookkeeping to drop silently.
fn model_name(key: &str, mode: ImportMode) -> Option<String> {
    let name = strip_module(key);
    if name.ends_with(".num_batches_tracked") {
        return None;
    }
    if mode == ImportMode::Backbone && is_torchvision(name) {
        // ResNetV1c's deep stem Sequential: its last BN is DANet's `bn1`.
        if let Some(rest) = name.strip_prefix("stem.7.") {
            return Some(format!("pretrained.bn1.{rest}"));
        }
        if let Some(rest) = name.strip_prefix("stem.") {
            return Some(format!("pretrained.conv1.{rest}"));
        }
        return Some(format!("pretrained.{name}"));
    }
    Some(name.to_string())
}

/// Copies the file's tensors into `vs` by name. Fails on any shape mismatch (naming the
/// key and both shapes) or on two file keys naming the same variable; missing and
/// unexpected names are reported, not errors (see [`ImportReport::ensure_complete`]). In
/// Backbone mode only `pretrained.*` variables are written.
pub fn import_into(
    vs: &mut nn::VarStore,
    state: StateDict,
    mode: ImportMode,
) -> Result<ImportReport> {
    let mut variables: BTreeMap<String, Tensor> = vs.variables().into_iter().collect();
    if mode == ImportMode::Backbone {
        variables.retain(|n, _| n.starts_with("pretrained."));
    }
    let mut report = ImportReport::default();
    let mut matched: BTreeMap<String, (String, Tensor)> = BTreeMap::new();
    let mut mismatches = Vec::new();
    for (key, tensor) in state.tensors {
        let Some(name) = model_name(&key, mode) else {
            continue;
        };
        let Some(var) = variables.get(&name) else {
            report.unexpected.push(name);
            continue;
        };
        if var.size() != tensor.size() {
            mismatches.push(format!(
                "`{name}`{}: file has shape {:?}, model expects {:?}",
                renamed(&key, &name),
                tensor.size(),
                var.size()
            ));
            continue;
        }
        if let Some((other, _)) = matched.get(&name) {
            bail!("file keys `{other}` and `{key}` both name model variable `{name}`");
        }
        matched.insert(name, (key, tensor));
    }
    if let Some(first) = mismatches.first() {
        let more = if mismatches.len() > 1 {
            format!(" (and {} more shape mismatches)", mismatches.len() - 1)
        } else {
            String::new()
        };
        bail!("shape mismatch: tensor {first}{more}");
    }
    tch::no_grad(|| {
        for (name, var) in variables.iter_mut() {
            match matched.remove(name) {
                Some((_, src)) => {
                    var.copy_(&src.to_kind(var.kind()).to_device(var.device()));
                    report.loaded.push(name.clone());
                }
                None => report.missing.push(name.clone()),
            }
        }
    });
    if mode == ImportMode::Backbone {
        let head = vs
            .variables()
            .into_keys()
            .filter(|n| !n.starts_with("pretrained."));
        report.missing.extend(head.collect::<BTreeSet<_>>());
    }
    report.unexpected.sort();
    if report.loaded.is_empty() {
        bail!("no tensor in the file matches a model variable (wrong --mode? file keys look like `{}`)", report.unexpected.first().map_or("", String::as_str));
    }
    Ok(report)
}

fn renamed(key: &str, name: &str) -> String {
    if key == name {
        String::new()
    } else {
        format!(" (file key `{key}`)")
    }
}
