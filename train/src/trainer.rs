//! The training step: SGD (momentum, weight decay on every parameter), the head at 10x
//! the backbone's learning rate, poly decay per iteration, cross-entropy on DANet's three
//! outputs with the ignore label; optional warm-up, OHEM, gradient accumulation and
//! clipping. Checkpointing, validation and logs around it live in [`crate::run`].

use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Result};
use segtool_core::config::PolyForm;
use segtool_core::dataset::{Sample, SegDataset};
use segtool_core::IGNORE_LABEL;
use segtool_model_spec::ModelSpec;
use tch::{nn, Device, Reduction, Tensor};

use crate::data::{images_to_tensor, images_to_tensor_padded, masks_to_tensor, Augment};
use crate::loader::{Loader, LoaderConfig};
use crate::model::{AttentionImpl, DaNet, DaNetOutputs};
use crate::ohem::Ohem;
use crate::optim::{LrSchedule, Sgd, SgdConfig};
use crate::progress::Progress;

mod loss_sums;
use loss_sums::LossSums;

#[derive(Clone, Debug)]
pub struct TrainConfig {
    pub iterations: usize,
    pub batch_size: usize,
    /// Backbone learning rate; the head uses `lr * head_lr_mult`.
    pub lr: f64,
    pub head_lr_mult: f64,
    /// SGD's momentum, weight decay and Nesterov switch (the recipe's by default).
    pub sgd: SgdConfig,
    /// Poly decay: (lr - min_lr) * (1 - it / iterations)^power + min_lr.
    pub poly_power: f64,
    /// The floor of the poly decay (mmengine's PolyLR `eta_min`); 0 for DANet's.
    pub min_lr: f64,
    /// DANet's or mmengine's poly form (which iteration reaches `min_lr`).
    pub poly_form: PolyForm,
    /// Linear warm-up over the first `warmup_iters`, from `warmup_ratio` x the poly lr.
    pub warmup_iters: usize,
    pub warmup_ratio: f64,
    /// Weights of the (fused, position, channel) losses. The auxiliary head's weight is
    /// the model spec's (`aux_head.loss_weight`).
    pub loss_weights: [f64; 3],
    /// How each cross-entropy averages over the pixels (DANet's: over labelled ones).
    pub ce_mean: CeMean,
    /// Online hard example mining in the cross-entropy; `None`: plain mean CE.
    pub ohem: Option<Ohem>,
    /// Dropout2d's probability before the classifiers (mmseg's `dropout_ratio`).
    pub dropout: f64,
    /// Micro-batches whose gradients are summed before one optimiser step.
    pub accumulation: usize,
    /// Global gradient-norm clipping (`torch.nn.utils.clip_grad_norm_`).
    pub grad_clip_norm: Option<f64>,
    pub augment: Augment,
    pub seed: u64,
    pub device: Device,
    /// Report the loop's progress to the [`Progress`] the caller gives
    /// ([`crate::run::RunOptions::progress`], [`Trainer::train_with`]); the library draws
    /// and prints nothing itself.
    pub progress: bool,
    /// PAM/CAM implementation; `Sdpa` trains the same function without PAM's N x N matrix.
    pub attention: AttentionImpl,
    /// Backbone BatchNorm frozen: running statistics, no affine updates (DaNet::set_frozen_bn).
    pub freeze_bn: bool,
}

impl Default for TrainConfig {
    /// The published recipe's optimiser; iterations and batch are the caller's.
    fn default() -> Self {
        Self {
            iterations: 1000,
            batch_size: 8,
            lr: 0.003,
            head_lr_mult: 10.0,
            sgd: SgdConfig::default(),
            poly_power: 0.9,
            min_lr: 0.0,
            poly_form: PolyForm::Danet,
            warmup_iters: 0,
            warmup_ratio: 1.0,
            loss_weights: [1.0, 1.0, 1.0],
            ce_mean: CeMean::LabelledPixels,
            ohem: None,
            dropout: crate::model::DEFAULT_DROPOUT,
            accumulation: 1,
            grad_clip_norm: None,
            augment: Augment {
                flip: true,
                ..Augment::none()
            },
            seed: 0,
            device: Device::Cpu,
            progress: true,
            attention: AttentionImpl::Explicit,
            freeze_bn: false,
        }
    }
}

impl TrainConfig {
    pub fn schedule(&self) -> LrSchedule {
        LrSchedule {
            base_lr: self.lr,
            total_iters: self.iterations,
            power: self.poly_power,
            warmup_iters: self.warmup_iters,
            warmup_ratio: self.warmup_ratio,
            min_lr: self.min_lr,
            form: self.poly_form,
        }
    }

    /// Backbone learning rate at iteration `it` (0-based).
    pub fn lr_at(&self, it: usize) -> f64 {
        self.schedule().at(it)
    }

    /// Head learning rate at iteration `it`: `head_lr_mult` x the backbone's base rate,
    /// decayed to the same `min_lr`.
    pub fn head_lr_at(&self, it: usize) -> f64 {
        self.schedule().scaled_at(it, self.head_lr_mult)
    }
}

/// How a cross-entropy term averages its per-pixel losses over a batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CeMean {
    /// The mean over labelled pixels (PyTorch's `reduction='mean'` with `ignore_index`):
    /// DANet's loss.
    #[default]
    LabelledPixels,
    /// The sum over labelled pixels divided by the number of ALL pixels, ignored ones
    /// included: mmsegmentation's `CrossEntropyLoss` with `avg_non_ignore=False` (its
    /// default; `weight_reduce_loss` with `avg_factor = label.numel()`).
    AllPixels,
}

/// What the training loss is made of, besides the model's outputs.
#[derive(Clone, Copy, Debug)]
pub struct LossSpec<'a> {
    /// Weights of the (fused, position, channel) terms.
    pub weights: [f64; 3],
    /// Weight of the auxiliary head's term, when the outputs carry its logits.
    pub aux_weight: Option<f64>,
    pub ce_mean: CeMean,
    pub ohem: Option<&'a Ohem>,
}

/// The weighted terms of a loss; their sum is the loss.
pub struct LossTerms {
    pub fused: Tensor,
    pub position: Tensor,
    pub channel: Tensor,
    /// The auxiliary head's term (mmsegmentation's `aux.loss_ce`), when it has one.
    pub aux: Option<Tensor>,
}

impl LossTerms {
    pub fn total(&self) -> Tensor {
        let sum = &self.fused + &self.position + &self.channel;
        match &self.aux {
            Some(aux) => sum + aux,
            None => sum,
        }
    }
}

/// Cross-entropy of `logits` (N, C, H, W) against `target` (N, H, W), ignoring label 255,
/// averaged as `mean` says, or with OHEM.
pub fn cross_entropy(
    logits: &Tensor,
    target: &Tensor,
    mean: CeMean,
    ohem: Option<&Ohem>,
) -> Tensor {
    let ignore = IGNORE_LABEL as i64;
    match (ohem, mean) {
        (Some(ohem), _) => ohem.loss(logits, target),
        (None, CeMean::LabelledPixels) => {
            logits.cross_entropy_loss::<Tensor>(target, None, Reduction::Mean, ignore, 0.0)
        }
        (None, CeMean::AllPixels) => {
            let sum =
                logits.cross_entropy_loss::<Tensor>(target, None, Reduction::Sum, ignore, 0.0);
            // mmseg's `weight_reduce_loss`: sum / (avg_factor + eps) with eps float32's
            // epsilon, lost in float32 arithmetic and 1e-11 relative in float64.
            sum / (target.numel() as f64 + f32::EPSILON as f64)
        }
    }
}

/// The weighted terms of the loss on `out`: CE on each DANet output and, when `out` has
/// the auxiliary head's logits and `spec.aux_weight` is set, on those.
pub fn loss_terms(out: &DaNetOutputs, target: &Tensor, spec: &LossSpec) -> LossTerms {
    let ce = |logits: &Tensor| cross_entropy(logits, target, spec.ce_mean, spec.ohem);
    LossTerms {
        fused: ce(&out.fused) * spec.weights[0],
        position: ce(&out.position) * spec.weights[1],
        channel: ce(&out.channel) * spec.weights[2],
        aux: match (&out.aux, spec.aux_weight) {
            (Some(aux), Some(w)) => Some(ce(aux) * w),
            _ => None,
        },
    }
}

/// DANet's loss: the weighted sum of CE on each output, ignoring label 255.
pub fn danet_loss(out: &DaNetOutputs, target: &Tensor, weights: [f64; 3]) -> Tensor {
    danet_loss_with(out, target, weights, None)
}

/// [`danet_loss`] with optional OHEM applied to each output separately.
pub fn danet_loss_with(
    out: &DaNetOutputs,
    target: &Tensor,
    weights: [f64; 3],
    ohem: Option<&Ohem>,
) -> Tensor {
    let [fused, position, channel] = danet_loss_terms(out, target, weights, ohem);
    fused + position + channel
}

/// The three weighted terms of [`danet_loss_with`] (fused, position, channel), whose sum
/// is the loss: CE averaged over labelled pixels, no auxiliary term (see [`loss_terms`]).
pub fn danet_loss_terms(
    out: &DaNetOutputs,
    target: &Tensor,
    weights: [f64; 3],
    ohem: Option<&Ohem>,
) -> [Tensor; 3] {
    let spec = LossSpec {
        weights,
        aux_weight: None,
        ce_mean: CeMean::LabelledPixels,
        ohem,
    };
    let t = loss_terms(out, target, &spec);
    [t.fused, t.position, t.channel]
}

/// The loss was NaN or infinite: the step was not applied, the weights are intact.
#[derive(Debug, thiserror::Error)]
#[error("loss became {value} at iteration {iteration} (lr {lr:.3e}); the step was not applied")]
pub struct NonFiniteLoss {
    pub iteration: usize,
    pub value: f64,
    pub lr: f64,
}

/// What one optimiser step did.
#[derive(Clone, Copy, Debug)]
pub struct StepStats {
    /// Mean loss over the micro-batches.
    pub loss: f64,
    pub lr: f64,
    /// Global gradient norm before clipping (computed only when clipping, and not on a
    /// skipped step).
    pub grad_norm: Option<f64>,
    /// amp: the gradients held inf/NaN, the step was not applied (loss scaling only).
    pub skipped: bool,
    /// amp: the loss scale after this step (loss scaling only).
    pub loss_scale: Option<f64>,
    /// The loss's weighted terms (fused, position, channel output), averaged like it.
    pub loss_terms: [f64; 3],
    /// The auxiliary head's weighted term, when the loss has one.
    pub loss_aux: Option<f64>,
}

pub struct Trainer {
    pub vs: nn::VarStore,
    pub model: DaNet,
    pub optimizer: Sgd,
    pub config: TrainConfig,
    /// (iteration, loss) for every step taken.
    pub losses: Vec<(usize, f64)>,
    /// dist: data-parallel training; `None` for a single process. Set with
    /// [`Trainer::enable_ddp`].
    pub ddp: Option<crate::distributed::Ddp>,
    /// amp: mixed precision (autocast, loss scaling); `None`: fp32. Set with
    /// [`Trainer::enable_amp`].
    pub amp: Option<crate::amp::Amp>,
}

impl Trainer {
    pub fn new(spec: &ModelSpec, config: TrainConfig) -> Result<Self> {
        tch::manual_seed(config.seed as i64);
        let vs = nn::VarStore::new(config.device);
        let model = DaNet::new(&vs.root(), spec);
        Self::from_parts(vs, model, config)
    }

    /// Trains an existing model (e.g. one loaded from a checkpoint). The config's
    /// `attention` and `freeze_bn` are applied to it.
    pub fn from_parts(vs: nn::VarStore, mut model: DaNet, config: TrainConfig) -> Result<Self> {
        if config.iterations == 0 || config.batch_size == 0 || config.accumulation == 0 {
            bail!("iterations, batch size and accumulation must be positive");
        }
        model.set_attention(config.attention);
        model.set_frozen_bn(config.freeze_bn);
        model.set_dropout_ratio(config.dropout);
        let optimizer = Sgd::new(&vs, config.sgd);
        Ok(Self {
            vs,
            model,
            optimizer,
            config,
            losses: Vec::new(),
            ddp: None,
            amp: None,
        })
    }

    /// dist: trains data-parallel over `ddp`'s group from now on: rank 0's variables are
    /// broadcast to every rank, gradients are averaged before clipping and the step, and
    /// losses are averaged over the ranks. Call after loading weights (or resuming).
    pub fn enable_ddp(&mut self, ddp: crate::distributed::Ddp) -> Result<()> {
        ddp.broadcast_variables(&self.vs)?;
        if let Some(q) = self.model.qat() {
            q.set_world_size(ddp.world_size());
        }
        self.ddp = Some(ddp);
        Ok(())
    }

    /// dist: SyncBN over `group` from now on (the model's BatchNorms hold it; see
    /// [`DaNet::set_sync_bn`]). A group of one process keeps plain BatchNorm.
    pub fn enable_sync_bn(&mut self, group: Arc<crate::distributed::ProcessGroup>) {
        self.model.set_sync_bn(Some(group));
    }

    /// QAT: forwards fake-quantise as `qat` says from now on, and the optimiser also
    /// trains its thresholds when they are learned (LSQ). Call before the first step and
    /// before loading a resumed checkpoint (whose variables and optimiser state then
    /// include the thresholds).
    pub fn enable_qat(&mut self, qat: Arc<crate::qat::FakeQuant>) {
        qat.set_world_size(self.ddp.as_ref().map_or(1, |d| d.world_size()));
        self.model.set_qat(Some(qat));
        self.optimizer = Sgd::new(&self.vs, self.config.sgd);
    }

    /// amp: forward passes under `amp`'s autocast from now on, loss in fp32, with loss
    /// scaling when `amp` has a scaler (fp16).
    pub fn enable_amp(&mut self, amp: crate::amp::Amp) {
        self.amp = Some(amp);
    }

    /// One SGD step at iteration `it` on one batch; returns the loss.
    pub fn step(&mut self, images: &Tensor, masks: &Tensor, it: usize) -> Result<f64> {
        Ok(self.step_accumulated(&[(images, masks)], it)?.loss)
    }

    /// One SGD step at iteration `it` whose gradient is the mean over `micro_batches`
    /// (gradient accumulation). Dropout draws from a stream seeded by (seed, it), so a
    /// resumed run repeats an uninterrupted one exactly.
    pub fn step_accumulated(
        &mut self,
        micro_batches: &[(&Tensor, &Tensor)],
        it: usize,
    ) -> Result<StepStats> {
        let lr = self.config.lr_at(it);
        // dist: each rank its own dropout stream (rank 0's is the single-process one).
        let rank = self.ddp.as_ref().map_or(0, |d| d.rank()) as i64;
        tch::manual_seed(iteration_seed(self.config.seed, it).wrapping_add(rank));
        // QAT: BatchNorm statistics frozen from the configured iteration on.
        if let Some(q) = self.model.qat() {
            q.set_bn_frozen(q.options.freeze_bn_at.is_some_and(|f| it >= f));
        }
        self.optimizer.zero_grad();
        let scale = 1.0 / micro_batches.len() as f64;
        let mut sums = LossSums::default();
        for (images, masks) in micro_batches {
            let (loss, value, parts) = self.micro_batch_loss(images, masks)?;
            // dist: a rank alone must not leave (its peers would wait in the gradient
            // all-reduce until the timeout); every rank stops together below, once the
            // averaged loss is non-finite.
            if !value.is_finite() && self.ddp.is_none() {
                self.optimizer.zero_grad();
                return Err(NonFiniteLoss {
                    iteration: it,
                    value,
                    lr,
                }
                .into());
            }
            let loss = loss * scale;
            // amp: backward on the scaled loss.
            match &self.amp {
                Some(amp) => amp.scale_loss(&loss).f_backward()?,
                None => loss.f_backward()?,
            }
            sums.add(value, &parts, scale);
        }
        // dist: one gradient all-reduce per step, after the last micro-batch, before
        // clipping (as PyTorch DDP).
        if let Some(ddp) = &self.ddp {
            ddp.average_gradients(&self.vs)?;
            sums = LossSums::from_values(&ddp.mean_all(&sums.values())?);
            if !sums.total.is_finite() {
                self.optimizer.zero_grad();
                return Err(NonFiniteLoss {
                    iteration: it,
                    value: sums.total,
                    lr,
                }
                .into());
            }
        }
        let stats = self.apply_gradients(it, lr, sums)?;
        // QAT: the observers' step (EMA thresholds, the same on every rank: the range of
        // the global batch, the largest over the ranks).
        if let Some(q) = self.model.qat() {
            q.end_step(|v| match &self.ddp {
                Some(ddp) => ddp.max_all(v),
                None => Ok(v.to_vec()),
            })?;
        }
        Ok(stats)
    }

    /// The forward pass and loss of one micro-batch: the loss tensor, its value, and the
    /// values of its terms (fused, position, channel, then aux when the model has one).
    fn micro_batch_loss(&self, images: &Tensor, masks: &Tensor) -> Result<(Tensor, f64, Vec<f64>)> {
        // amp: the forward under autocast; the loss from fp32 logits.
        let out = match &self.amp {
            Some(amp) => {
                let out = amp.forward(|| self.model.forward_all(images, true))?;
                DaNetOutputs {
                    fused: crate::amp::at_least_fp32(&out.fused),
                    position: crate::amp::at_least_fp32(&out.position),
                    channel: crate::amp::at_least_fp32(&out.channel),
                    aux: out.aux.as_ref().map(crate::amp::at_least_fp32),
                }
            }
            None => self.model.forward_all(images, true),
        };
        let spec = LossSpec {
            weights: self.config.loss_weights,
            aux_weight: self.model.spec.aux_head.as_ref().map(|a| a.loss_weight),
            ce_mean: self.config.ce_mean,
            ohem: self.config.ohem.as_ref(),
        };
        let t = loss_terms(&out, masks, &spec);
        let loss = t.total();
        let mut detached = vec![t.fused.detach(), t.position.detach(), t.channel.detach()];
        detached.extend(t.aux.as_ref().map(Tensor::detach));
        let parts = Tensor::stack(&detached, 0);
        let value = loss.double_value(&[]);
        let parts = Vec::<f64>::try_from(parts.to_kind(tch::Kind::Double).to_device(Device::Cpu))
            .unwrap_or_default();
        Ok((loss, value, parts))
    }

    /// The end of a step whose gradients are in place: AMP's unscale and inf check,
    /// clipping, the SGD update at `lr` (unless AMP skips it) and the loss history.
    fn apply_gradients(&mut self, it: usize, lr: f64, sums: LossSums) -> Result<StepStats> {
        // amp: unscale (after the all-reduce, before clipping); inf/NaN skips the step.
        let found_inf = match &self.amp {
            Some(amp) => amp.unscale(&self.vs)?,
            None => None,
        };
        let skip = found_inf
            .as_ref()
            .is_some_and(|f| f.double_value(&[0]) != 0.0);
        let grad_norm = match self.config.grad_clip_norm {
            Some(max) if !skip => Some(self.optimizer.clip_grad_norm(max)),
            _ => None,
        };
        if !skip {
            self.optimizer.step([lr, self.config.head_lr_at(it)]);
        }
        let (skipped, loss_scale) = match self.amp.as_mut() {
            Some(amp) => (
                amp.finish_step(found_inf.as_ref(), it)?,
                amp.scaler().map(|s| s.scale()),
            ),
            None => (false, None),
        };
        self.losses.push((it, sums.total));
        Ok(StepStats {
            loss: sums.total,
            lr,
            grad_norm,
            skipped,
            loss_scale,
            loss_terms: sums.terms,
            loss_aux: sums.aux,
        })
    }

    /// Runs `config.iterations` steps over shuffled epochs of `dataset` (last partial
    /// batch dropped, as the recipe does), decoding on the calling thread; reports no
    /// progress (see [`Trainer::train_with`]).
    pub fn train(&mut self, dataset: Arc<dyn SegDataset>) -> Result<()> {
        self.train_with(dataset, None)
    }

    /// [`Trainer::train`], reporting progress to `progress` when `config.progress` is set.
    pub fn train_with(
        &mut self,
        dataset: Arc<dyn SegDataset>,
        progress: Option<&dyn Progress>,
    ) -> Result<()> {
        let cfg = self.config.clone();
        let loader_config = LoaderConfig {
            batch_size: cfg.batch_size,
            workers: 0,
            prefetch: 1,
            seed: cfg.seed,
            rank: 0,
            world_size: 1,
        };
        let mut loader = Loader::new(
            dataset,
            cfg.augment.clone(),
            loader_config,
            Default::default(),
        )?;
        let progress = progress.filter(|_| cfg.progress);
        if let Some(p) = progress {
            p.start("train", cfg.iterations as u64, 0);
        }
        let start = Instant::now();
        let mut smoothed = None;
        for it in 0..cfg.iterations {
            let mut batches = Vec::with_capacity(cfg.accumulation);
            for _ in 0..cfg.accumulation {
                batches.push(self.batch_tensors(&loader.next_batch()?.samples));
            }
            let refs: Vec<(&Tensor, &Tensor)> = batches.iter().map(|(i, m)| (i, m)).collect();
            let loss = self.step_accumulated(&refs, it)?.loss;
            let s = smoothed.map_or(loss, |s: f64| 0.95 * s + 0.05 * loss);
            smoothed = Some(s);
            let Some(p) = progress else { continue };
            p.message(format!("loss {s:.4} lr {:.2e}", cfg.lr_at(it)));
            p.advance(1);
            if (it + 1) % (cfg.iterations / 10).max(1) == 0 {
                // For logs without a terminal (CI, pipes): a plain line every 10%.
                let rate = (it + 1) as f64 / start.elapsed().as_secs_f64();
                let eta = (cfg.iterations - it - 1) as f64 / rate;
                p.line(format!(
                    "  it {}/{} loss {s:.4} lr {:.2e} {rate:.2} it/s ETA {eta:.0} s",
                    it + 1,
                    cfg.iterations,
                    cfg.lr_at(it)
                ));
            }
        }
        if let Some(p) = progress {
            p.finish(Some(format!(
                "loss {:.4}, {:.1} s",
                smoothed.unwrap_or(f64::NAN),
                start.elapsed().as_secs_f64()
            )));
        }
        Ok(())
    }

    /// (images, masks) tensors of a batch of same-size samples on the training device.
    pub fn batch_tensors(&self, samples: &[Sample]) -> (Tensor, Tensor) {
        let images: Vec<&image::RgbImage> = samples.iter().map(|s| &s.image).collect();
        let masks: Vec<&image::GrayImage> = samples.iter().map(|s| &s.mask).collect();
        // An image smaller than its mask was left for padding after normalisation
        // (`Augment::pad_after_normalize`).
        let images = if samples
            .iter()
            .any(|s| s.image.dimensions() != s.mask.dimensions())
        {
            images_to_tensor_padded(
                &images,
                masks[0].dimensions(),
                &self.model.spec,
                self.config.device,
            )
        } else {
            images_to_tensor(&images, &self.model.spec, self.config.device)
        };
        let masks = masks_to_tensor(&masks, self.config.device);
        (images, masks)
    }
}

/// libtorch seed of iteration `it`: splitmix64 of (seed, it), so no two iterations (or
/// runs with neighbouring seeds) share a dropout stream.
fn iteration_seed(seed: u64, it: usize) -> i64 {
    let mut z = seed
        .wrapping_add((it as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z ^ (z >> 31)) >> 1) as i64
}
