//! The training loop: SGD (momentum, weight decay on every parameter), the head at 10x
//! the backbone's learning rate, poly decay per iteration, cross-entropy on DANet's three
//! outputs with the ignore label.

use std::time::Instant;

use anyhow::{bail, Result};
use indicatif::{ProgressBar, ProgressStyle};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use segtool_core::dataset::SegDataset;
use segtool_core::{ModelSpec, IGNORE_LABEL};
use tch::nn::{self, OptimizerConfig};
use tch::{Device, Reduction, Tensor};

use crate::data::{images_to_tensor, masks_to_tensor, Augment};
use crate::model::{AttentionImpl, DaNet, DaNetOutputs};

#[derive(Clone, Debug)]
pub struct TrainConfig {
    pub iterations: usize,
    pub batch_size: usize,
    /// Backbone learning rate; the head uses `lr * head_lr_mult`.
    pub lr: f64,
    pub head_lr_mult: f64,
    pub momentum: f64,
    pub weight_decay: f64,
    /// Poly decay: lr * (1 - it / iterations)^power.
    pub poly_power: f64,
    /// Weights of the (fused, position, channel) losses.
    pub loss_weights: [f64; 3],
    pub augment: Augment,
    pub seed: u64,
    pub device: Device,
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
            momentum: 0.9,
            weight_decay: 1e-4,
            poly_power: 0.9,
            loss_weights: [1.0, 1.0, 1.0],
            augment: Augment {
                flip: true,
                scale: None,
                base_size: 0,
                crop: None,
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
    /// Backbone learning rate at iteration `it` (0-based).
    pub fn lr_at(&self, it: usize) -> f64 {
        self.lr
            * (1.0 - it as f64 / self.iterations as f64)
                .max(0.0)
                .powf(self.poly_power)
    }
}

/// DANet's loss: the weighted sum of CE on each output, ignoring label 255.
pub fn danet_loss(out: &DaNetOutputs, target: &Tensor, weights: [f64; 3]) -> Tensor {
    let ce = |logits: &Tensor| {
        logits.cross_entropy_loss::<Tensor>(target, None, Reduction::Mean, IGNORE_LABEL as i64, 0.0)
    };
    ce(&out.fused) * weights[0] + ce(&out.position) * weights[1] + ce(&out.channel) * weights[2]
}

pub struct Trainer {
    pub vs: nn::VarStore,
    pub model: DaNet,
    optimizer: nn::Optimizer,
    pub config: TrainConfig,
    /// (iteration, loss) for every step taken.
    pub losses: Vec<(usize, f64)>,
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
        if config.iterations == 0 || config.batch_size == 0 {
            bail!("iterations and batch size must be positive");
        }
        model.set_attention(config.attention);
        model.set_frozen_bn(config.freeze_bn);
        let sgd = nn::Sgd {
            momentum: config.momentum,
            dampening: 0.0,
            wd: config.weight_decay,
            nesterov: false,
        };
        let optimizer = sgd.build(&vs, config.lr)?;
        Ok(Self {
            vs,
            model,
            optimizer,
            config,
            losses: Vec::new(),
        })
    }

    /// One SGD step at iteration `it`; returns the loss.
    pub fn step(&mut self, images: &Tensor, masks: &Tensor, it: usize) -> Result<f64> {
        let lr = self.config.lr_at(it);
        self.optimizer.set_lr_group(DaNet::BACKBONE_GROUP, lr);
        self.optimizer
            .set_lr_group(DaNet::HEAD_GROUP, lr * self.config.head_lr_mult);
        let out = self.model.forward_all(images, true);
        let loss = danet_loss(&out, masks, self.config.loss_weights);
        let value = loss.double_value(&[]);
        if !value.is_finite() {
            bail!("loss became {value} at iteration {it} (lr {lr:.3e}); stopping before the weights are corrupted");
        }
        self.optimizer.backward_step(&loss);
        self.losses.push((it, value));
        Ok(value)
    }

    /// Runs `config.iterations` steps over shuffled epochs of `dataset` (last partial
    /// batch dropped, as the recipe does).
    pub fn train(&mut self, dataset: &dyn SegDataset) -> Result<()> {
        let cfg = self.config.clone();
        if dataset.len() < cfg.batch_size {
            bail!(
                "dataset has {} samples, fewer than one batch of {}",
                dataset.len(),
                cfg.batch_size
            );
        }
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let bar = progress_bar(cfg.iterations as u64, cfg.progress);
        let start = Instant::now();
        let mut order: Vec<usize> = Vec::new();
        let mut smoothed = None;
        for it in 0..cfg.iterations {
            if order.len() < cfg.batch_size {
                order = (0..dataset.len()).collect();
                order.shuffle(&mut rng);
            }
            let samples = order
                .split_off(order.len() - cfg.batch_size)
                .into_iter()
                .map(|i| dataset.get(i).map(|s| cfg.augment.apply(&s, &mut rng)))
                .collect::<Result<Vec<_>, _>>()?;
            let images = images_to_tensor(
                &samples.iter().map(|s| &s.image).collect::<Vec<_>>(),
                &self.model.spec,
                cfg.device,
            );
            let masks = masks_to_tensor(
                &samples.iter().map(|s| &s.mask).collect::<Vec<_>>(),
                cfg.device,
            );
            let loss = self.step(&images, &masks, it)?;
            let s = smoothed.map_or(loss, |s: f64| 0.95 * s + 0.05 * loss);
            smoothed = Some(s);
            bar.set_message(format!("loss {s:.4} lr {:.2e}", cfg.lr_at(it)));
            bar.inc(1);
            if cfg.progress && bar.is_hidden() && (it + 1) % (cfg.iterations / 10).max(1) == 0 {
                // No terminal (CI logs, pipes): a plain line every 10% instead of a bar.
                let rate = (it + 1) as f64 / start.elapsed().as_secs_f64();
                let eta = (cfg.iterations - it - 1) as f64 / rate;
                eprintln!(
                    "  it {}/{} loss {s:.4} lr {:.2e} {rate:.2} it/s ETA {eta:.0} s",
                    it + 1,
                    cfg.iterations,
                    cfg.lr_at(it)
                );
            }
        }
        bar.finish_with_message(format!(
            "loss {:.4}, {:.1} s",
            smoothed.unwrap_or(f64::NAN),
            start.elapsed().as_secs_f64()
        ));
        Ok(())
    }
}

pub fn progress_bar(len: u64, visible: bool) -> ProgressBar {
    if !visible {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{prefix}[{bar:30}] {pos}/{len} {per_sec} ETA {eta} {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar
}
