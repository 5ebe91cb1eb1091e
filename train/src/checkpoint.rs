//! Checkpoints as `.safetensors`: PyTorch DANet state-dict names, f32 tensors, BN
//! `num_batches_tracked` as i64 (so PyTorch's strict `load_state_dict` accepts the file),
//! and the model spec as JSON in the header metadata. Written atomically.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use anyhow::{bail, Context, Result};
use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;
use segtool_model_spec::{ModelSpec, SPEC_METADATA_KEY};
use tch::{nn, Kind, Tensor};

/// Extra header entries a checkpoint may carry (training step, loss, ...).
pub type CheckpointInfo = BTreeMap<String, String>;

/// Little-endian bytes of a CPU f32 copy of `t`.
fn f32_bytes(t: &Tensor) -> Vec<u8> {
    let flat = t
        .detach()
        .to_device(tch::Device::Cpu)
        .to_kind(Kind::Float)
        .contiguous()
        .view(-1);
    let values = Vec::<f32>::try_from(&flat).expect("f32 tensor converts");
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Serialises every variable of `vs` (trainable or not) with `spec` in the metadata.
pub fn to_bytes(vs: &nn::VarStore, spec: &ModelSpec, info: &CheckpointInfo) -> Result<Vec<u8>> {
    to_bytes_with(vs, spec, info, &[])
}

/// [`to_bytes`] plus `extra` tensors (e.g. optimiser state) under their own names, which
/// [`Checkpoint::load_into`] ignores.
pub fn to_bytes_with(
    vs: &nn::VarStore,
    spec: &ModelSpec,
    info: &CheckpointInfo,
    extra: &[(String, Tensor)],
) -> Result<Vec<u8>> {
    let mut variables: BTreeMap<String, Tensor> = vs.variables().into_iter().collect();
    for (name, t) in extra {
        if variables.insert(name.clone(), t.shallow_clone()).is_some() {
            bail!("extra checkpoint tensor `{name}` collides with a model variable");
        }
    }
    let mut owned: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, t) in &variables {
        let shape = t.size().iter().map(|&d| d as usize).collect();
        owned.push((name.clone(), Dtype::F32, shape, f32_bytes(t)));
        if let Some(prefix) = name.strip_suffix(".running_mean") {
            owned.push((
                format!("{prefix}.num_batches_tracked"),
                Dtype::I64,
                vec![],
                0i64.to_le_bytes().to_vec(),
            ));
        }
    }
    let views = owned
        .iter()
        .map(|(n, dtype, shape, data)| {
            Ok((n.as_str(), TensorView::new(*dtype, shape.clone(), data)?))
        })
        .collect::<Result<Vec<_>, safetensors::SafeTensorError>>()?;
    let mut metadata: HashMap<String, String> = info.clone().into_iter().collect();
    metadata.insert(SPEC_METADATA_KEY.into(), spec.to_json());
    metadata.insert("format".into(), "pt".into());
    Ok(safetensors::serialize(views, Some(metadata))?)
}

/// Writes a checkpoint atomically.
pub fn save(path: &Path, vs: &nn::VarStore, spec: &ModelSpec, info: &CheckpointInfo) -> Result<()> {
    save_with(path, vs, spec, info, &[])
}

/// Writes a checkpoint with `extra` tensors atomically (temp file, fsync, rename).
pub fn save_with(
    path: &Path,
    vs: &nn::VarStore,
    spec: &ModelSpec,
    info: &CheckpointInfo,
    extra: &[(String, Tensor)],
) -> Result<()> {
    let bytes = to_bytes_with(vs, spec, info, extra)?;
    segtool_model_spec::io::write_atomic(path, &bytes)
        .with_context(|| format!("writing checkpoint {}", path.display()))
}

/// A checkpoint read into memory.
pub struct Checkpoint {
    bytes: Vec<u8>,
    pub spec: ModelSpec,
    pub info: CheckpointInfo,
}

impl Checkpoint {
    pub fn read(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path)
            .with_context(|| format!("reading checkpoint {}", path.display()))?;
        let (_, meta) = SafeTensors::read_metadata(&bytes)
            .with_context(|| format!("{} is not a valid safetensors file", path.display()))?;
        SafeTensors::deserialize(&bytes).with_context(|| {
            format!(
                "{} is not a valid safetensors file (truncated?)",
                path.display()
            )
        })?;
        let mut info: CheckpointInfo = meta
            .metadata()
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect();
        let spec_json = info.remove(SPEC_METADATA_KEY).with_context(|| {
            format!(
                "{} has no `{SPEC_METADATA_KEY}` metadata: not a segtool checkpoint",
                path.display()
            )
        })?;
        let spec = ModelSpec::from_json(&spec_json)
            .with_context(|| format!("model spec in {}", path.display()))?;
        Ok(Self { bytes, spec, info })
    }

    /// Size of the file in bytes.
    pub fn file_len(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// The tensor `name` (f32), or `None` when the file has no such tensor.
    pub fn tensor(&self, name: &str) -> Result<Option<Tensor>> {
        let st = SafeTensors::deserialize(&self.bytes)?;
        match st.tensor(name) {
            Ok(view) => Ok(Some(tensor_from_view(name, &view)?)),
            Err(_) => Ok(None),
        }
    }

    /// Copies every variable of `vs` from the file, checking names and shapes.
    pub fn load_into(&self, vs: &mut nn::VarStore) -> Result<()> {
        let st = SafeTensors::deserialize(&self.bytes)?;
        // Sorted, so the first mismatch reported is the same every run.
        let mut variables: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
        variables.sort_by(|a, b| a.0.cmp(&b.0));
        let mut missing = Vec::new();
        tch::no_grad(|| -> Result<()> {
            for (name, var) in variables.iter_mut() {
                let name = name.as_str();
                let view = match st.tensor(name) {
                    Ok(v) => v,
                    Err(_) => {
                        missing.push(name.to_string());
                        continue;
                    }
                };
                let want: Vec<usize> = var.size().iter().map(|&d| d as usize).collect();
                if view.shape() != want.as_slice() {
                    bail!(
                        "tensor `{name}`: checkpoint has shape {:?}, model expects {want:?}",
                        view.shape()
                    );
                }
                let src = tensor_from_view(name, &view)?;
                var.copy_(&src.to_device(var.device()));
            }
            Ok(())
        })?;
        if !missing.is_empty() {
            missing.sort();
            bail!(
                "checkpoint lacks {} tensors the model needs, e.g. `{}`",
                missing.len(),
                missing[0]
            );
        }
        Ok(())
    }
}

fn tensor_from_view(name: &str, view: &TensorView) -> Result<Tensor> {
    let shape: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
    let data = view.data();
    let values: Vec<f32> = match view.dtype() {
        Dtype::F32 => data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect(),
        other => bail!("tensor `{name}` has dtype {other:?}; expected F32"),
    };
    Ok(Tensor::from_slice(&values).view(shape.as_slice()))
}
