//! Data-parallel training over a [`ProcessGroup`], as PyTorch's DistributedDataParallel
//! does it: every variable (parameters and buffers) is broadcast from rank 0 at the start,
//! and after the backward of each optimiser step the gradients are averaged over the ranks
//! in buckets — flattened into one tensor per bucket, all-reduced, divided by the world
//! size and copied back — before clipping and the optimiser step. With gradient
//! accumulation the trainer calls [`Ddp::average_gradients`] once, after the last
//! micro-batch (DDP's `no_sync` on the others).

use std::sync::Arc;

use anyhow::{Context, Result};
use tch::{nn, Kind, Tensor};

use super::{ProcessGroup, ReduceOp};

/// PyTorch DDP's default `bucket_cap_mb`.
pub const DEFAULT_BUCKET_MB: f64 = 25.0;

pub struct Ddp {
    group: Arc<ProcessGroup>,
    bucket_bytes: usize,
}

impl Ddp {
    /// Gradients travel in buckets of at most `bucket_mb` MiB (a tensor larger than that
    /// gets a bucket of its own).
    pub fn new(group: Arc<ProcessGroup>, bucket_mb: f64) -> Self {
        let bucket_bytes = (bucket_mb.max(0.0) * 1024.0 * 1024.0) as usize;
        Self {
            group,
            bucket_bytes: bucket_bytes.max(1),
        }
    }

    pub fn group(&self) -> &Arc<ProcessGroup> {
        &self.group
    }

    pub fn rank(&self) -> usize {
        self.group.rank()
    }

    pub fn world_size(&self) -> usize {
        self.group.world_size()
    }

    /// Every variable of `vs` (parameters and BatchNorm running statistics) becomes rank
    /// 0's, so all ranks start from the same model.
    pub fn broadcast_variables(&self, vs: &nn::VarStore) -> Result<()> {
        let vars = sorted_variables(vs);
        let tensors: Vec<Tensor> = vars.into_iter().map(|(_, t)| t).collect();
        tch::no_grad(|| {
            self.for_buckets(&tensors, |flat| self.group.broadcast(flat, 0))
                .context("broadcasting the model from rank 0")
        })
    }

    /// Replaces each trainable variable's gradient by its mean over the ranks. Variables
    /// without a gradient are skipped (every rank must skip the same ones).
    pub fn average_gradients(&self, vs: &nn::VarStore) -> Result<()> {
        if self.world_size() == 1 {
            return Ok(());
        }
        let grads: Vec<Tensor> = sorted_variables(vs)
            .into_iter()
            .filter(|(_, t)| t.requires_grad())
            .map(|(_, t)| t.grad())
            .filter(Tensor::defined)
            .collect();
        let world = self.world_size() as f64;
        tch::no_grad(|| {
            self.for_buckets(&grads, |flat| {
                self.group.all_reduce(flat, ReduceOp::Sum)?;
                let _ = flat.g_div_scalar_(world);
                Ok(())
            })
            .context("averaging gradients over the ranks")
        })
    }

    /// The mean of `value` over the ranks (losses for logging).
    pub fn mean(&self, value: f64) -> Result<f64> {
        Ok(self.mean_all(&[value])?[0])
    }

    /// The means of `values` over the ranks, in one all-reduce on the group's device (NCCL
    /// refuses CPU tensors).
    pub fn mean_all(&self, values: &[f64]) -> Result<Vec<f64>> {
        if self.world_size() == 1 {
            return Ok(values.to_vec());
        }
        self.group
            .all_reduce_values(values, ReduceOp::Avg)
            .context("averaging the loss over the ranks")
    }

    /// The largest of each of `values` over the ranks, in one all-reduce.
    pub fn max_all(&self, values: &[f64]) -> Result<Vec<f64>> {
        if self.world_size() == 1 {
            return Ok(values.to_vec());
        }
        self.group
            .all_reduce_values(values, ReduceOp::Max)
            .context("the largest value over the ranks")
    }

    /// Runs `op` on each bucket of `tensors` (consecutive, same dtype and device, at most
    /// `bucket_bytes`) flattened into one contiguous tensor, then copies the result back.
    fn for_buckets(
        &self,
        tensors: &[Tensor],
        mut op: impl FnMut(&mut Tensor) -> Result<()>,
    ) -> Result<()> {
        let mut start = 0;
        while start < tensors.len() {
            let key = (tensors[start].kind(), tensors[start].device());
            let mut bytes = nbytes(&tensors[start]);
            let mut end = start + 1;
            while end < tensors.len()
                && (tensors[end].kind(), tensors[end].device()) == key
                && bytes + nbytes(&tensors[end]) <= self.bucket_bytes
            {
                bytes += nbytes(&tensors[end]);
                end += 1;
            }
            let bucket = &tensors[start..end];
            let mut flat = Tensor::cat(
                &bucket.iter().map(|t| t.reshape([-1])).collect::<Vec<_>>(),
                0,
            );
            op(&mut flat)?;
            let mut offset = 0;
            for t in bucket {
                let n = t.numel() as i64;
                let mut dst = t.shallow_clone();
                dst.copy_(&flat.narrow(0, offset, n).view_as(t));
                offset += n;
            }
            start = end;
        }
        Ok(())
    }
}

/// Variables by name: the same order on every rank.
fn sorted_variables(vs: &nn::VarStore) -> Vec<(String, Tensor)> {
    let mut vars: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
    vars.sort_by(|a, b| a.0.cmp(&b.0));
    vars
}

fn nbytes(t: &Tensor) -> usize {
    let elem = match t.kind() {
        Kind::Double | Kind::Int64 | Kind::ComplexFloat => 8,
        Kind::Half | Kind::BFloat16 | Kind::Int16 => 2,
        Kind::Uint8 | Kind::Int8 | Kind::Bool => 1,
        _ => 4,
    };
    t.numel() * elem
}
