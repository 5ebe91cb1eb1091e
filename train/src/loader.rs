//! A deterministic, multi-threaded, prefetching batch loader.
//!
//! Everything a batch contains is a pure function of `(seed, epoch, batch, rank)`:
//!
//! * epoch `e`'s order is a shuffle of `0..len` by `ChaCha8Rng::seed_from_u64(seed)` on
//!   stream `e`;
//! * each epoch has `len / G` global batches of `G = batch_size * world_size` samples
//!   (the last partial one is dropped, as the recipe does); global batch `b` is
//!   `order[b*G .. (b+1)*G]` and rank `r` takes the contiguous `batch_size` slice at
//!   `r * batch_size`;
//! * the sample at position `p` of epoch `e`'s order is augmented with its own RNG (see
//!   [`augment_rng`]), never with a generator shared between samples.
//!
//! So the number of worker threads and the order in which they finish cannot change what
//! comes out, and a run resumed from a saved [`SamplerPosition`] sees exactly the batches
//! the uninterrupted run would have seen.

use std::collections::BTreeMap;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use segtool_core::dataset::{DatasetError, Sample, SegDataset};
use serde::{Deserialize, Serialize};

use crate::data::{Augment, InvalidAugment};

/// Where a loader stands: `offset` batches of `epoch` have been taken. This is what a
/// checkpoint stores to resume the data stream exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct SamplerPosition {
    pub epoch: u64,
    pub offset: usize,
}

#[derive(Clone, Copy, Debug)]
pub struct LoaderConfig {
    /// Samples per batch on this rank.
    pub batch_size: usize,
    /// Decoding threads; 0 decodes on the thread calling [`Loader::next_batch`].
    pub workers: usize,
    /// Batches that may be decoded ahead of the consumer, in progress or finished. Raised
    /// to `workers` when smaller, so that no worker sits idle by construction.
    pub prefetch: usize,
    pub seed: u64,
    pub rank: usize,
    pub world_size: usize,
}

impl Default for LoaderConfig {
    fn default() -> Self {
        Self {
            batch_size: 1,
            workers: 0,
            prefetch: 2,
            seed: 0,
            rank: 0,
            world_size: 1,
        }
    }
}

/// One rank's batch.
pub struct Batch {
    pub samples: Vec<Sample>,
    /// Dataset index of each sample.
    pub indices: Vec<usize>,
    /// The position *after* this batch: resuming from it continues with the next batch.
    pub position: SamplerPosition,
}

#[derive(Debug, thiserror::Error)]
pub enum LoaderError {
    #[error(
        "dataset has {len} samples, fewer than one global batch of {global} \
         ({batch_size} per rank x {world_size} ranks)"
    )]
    TooSmall {
        len: usize,
        global: usize,
        batch_size: usize,
        world_size: usize,
    },
    #[error("invalid loader configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Augment(#[from] InvalidAugment),
    #[error("cannot load sample {index} ({name}): {source}")]
    Sample {
        index: usize,
        name: String,
        source: DatasetError,
    },
    #[error("loader worker panicked on batch {offset} of epoch {epoch}: {message}")]
    WorkerPanicked {
        epoch: u64,
        offset: usize,
        message: String,
    },
    #[error("cannot start loader thread: {0}")]
    Spawn(std::io::Error),
}

/// The augmentation RNG of the sample at `position` in epoch `epoch`'s order.
///
/// The key is splitmix64 of `seed` xor a constant, so it differs from the shuffle's key
/// (`seed` itself) and the two never share a keystream; the ChaCha stream is
/// `epoch << 32 | position`, unique for datasets under 2^32 samples and 2^32 epochs.
pub fn augment_rng(seed: u64, epoch: u64, position: usize) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(splitmix64(seed ^ 0x6175_676d_656e_7421));
    rng.set_stream((epoch << 32) | (position as u64 & 0xffff_ffff));
    rng
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Epoch orders, caching the latest: a worker usually needs the same epoch many times.
struct Orders {
    seed: u64,
    len: usize,
    cached: Option<(u64, Vec<usize>)>,
}

impl Orders {
    fn get(&mut self, epoch: u64) -> &[usize] {
        if self.cached.as_ref().map(|c| c.0) != Some(epoch) {
            let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
            rng.set_stream(epoch);
            let mut order: Vec<usize> = (0..self.len).collect();
            order.shuffle(&mut rng);
            self.cached = Some((epoch, order));
        }
        &self.cached.as_ref().unwrap().1
    }
}

/// What workers and the consumer share. Batches are named by their absolute number
/// `epoch * batches_per_epoch + offset`.
struct Shared {
    dataset: Arc<dyn SegDataset>,
    augment: Augment,
    config: LoaderConfig,
    batches_per_epoch: u64,
    /// How far `next_claim` may run ahead of `consumed`.
    window: u64,
    state: Mutex<State>,
    /// Signalled when the consumer takes a batch (room to claim more) or on shutdown.
    room: Condvar,
    /// Signalled when a worker finishes a batch.
    filled: Condvar,
    /// Set once, by `Drop`; workers also poll it between samples to stop promptly.
    stop: AtomicBool,
}

struct State {
    /// The next batch a worker will claim.
    next_claim: u64,
    /// Every batch before this one has been handed out.
    consumed: u64,
    /// Finished batches, possibly out of order, waiting for the consumer.
    ready: BTreeMap<u64, Result<Batch, LoaderError>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Workers never panic while holding the lock (batches are built outside it).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn position(&self, absolute: u64) -> SamplerPosition {
        SamplerPosition {
            epoch: absolute / self.batches_per_epoch,
            offset: (absolute % self.batches_per_epoch) as usize,
        }
    }

    /// Decodes and augments batch `absolute`; `None` when asked to stop midway.
    fn build(&self, orders: &mut Orders, absolute: u64) -> Option<Result<Batch, LoaderError>> {
        let SamplerPosition { epoch, offset } = self.position(absolute);
        let cfg = &self.config;
        let first = (offset * cfg.world_size + cfg.rank) * cfg.batch_size;
        let indices = orders.get(epoch)[first..first + cfg.batch_size].to_vec();
        let mut samples = Vec::with_capacity(cfg.batch_size);
        for (pos, &index) in (first..).zip(&indices) {
            if self.stop.load(Ordering::Relaxed) {
                return None;
            }
            let sample = match self.dataset.get(index) {
                Ok(sample) => sample,
                Err(source) => {
                    let name = self.dataset.name(index);
                    return Some(Err(LoaderError::Sample {
                        index,
                        name,
                        source,
                    }));
                }
            };
            let mut rng = augment_rng(cfg.seed, epoch, pos);
            samples.push(self.augment.transform(sample, &mut rng));
        }
        let position = self.position(absolute + 1);
        Some(Ok(Batch {
            samples,
            indices,
            position,
        }))
    }

    fn worker(&self) {
        let mut orders = Orders {
            seed: self.config.seed,
            len: self.dataset.len(),
            cached: None,
        };
        loop {
            let absolute = {
                let mut state = self.lock();
                loop {
                    if self.stop.load(Ordering::Relaxed) {
                        return;
                    }
                    if state.next_claim < state.consumed + self.window {
                        break;
                    }
                    state = self.room.wait(state).unwrap_or_else(|e| e.into_inner());
                }
                state.next_claim += 1;
                state.next_claim - 1
            };
            // A panic (say, in a dataset's decoder) becomes this batch's error instead of
            // leaving the consumer waiting forever for a batch nobody will deliver.
            let result =
                panic::catch_unwind(AssertUnwindSafe(|| self.build(&mut orders, absolute)))
                    .unwrap_or_else(|payload| {
                        let SamplerPosition { epoch, offset } = self.position(absolute);
                        let message = payload
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| payload.downcast_ref::<String>().cloned())
                            .unwrap_or_else(|| "unknown panic".into());
                        Some(Err(LoaderError::WorkerPanicked {
                            epoch,
                            offset,
                            message,
                        }))
                    });
            let Some(result) = result else { return };
            self.lock().ready.insert(absolute, result);
            self.filled.notify_one();
        }
    }
}

/// Batches for one rank, in order, decoded ahead by worker threads. See the module docs
/// for what determines their contents. Dropping the loader stops and joins its workers.
pub struct Loader {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Used only when there are no workers.
    orders: Orders,
    /// Absolute number of the next batch to hand out.
    next: u64,
    wait: Duration,
}

impl Loader {
    /// Starts a loader whose first batch is the one at `start` (normalised, so
    /// `{e, batches_per_epoch}` means `{e + 1, 0}`).
    pub fn new(
        dataset: Arc<dyn SegDataset>,
        augment: Augment,
        config: LoaderConfig,
        start: SamplerPosition,
    ) -> Result<Self, LoaderError> {
        if config.batch_size == 0 || config.world_size == 0 {
            return Err(LoaderError::Config(
                "batch size and world size must be positive".into(),
            ));
        }
        if config.rank >= config.world_size {
            return Err(LoaderError::Config(format!(
                "rank {} is not below world size {}",
                config.rank, config.world_size
            )));
        }
        augment.validate()?;
        let global = config.batch_size * config.world_size;
        let len = dataset.len();
        if len < global {
            return Err(LoaderError::TooSmall {
                len,
                global,
                batch_size: config.batch_size,
                world_size: config.world_size,
            });
        }
        let batches_per_epoch = (len / global) as u64;
        let next = start.epoch * batches_per_epoch + start.offset as u64;
        let shared = Arc::new(Shared {
            dataset,
            augment,
            config,
            batches_per_epoch,
            window: config.prefetch.max(config.workers).max(1) as u64,
            state: Mutex::new(State {
                next_claim: next,
                consumed: next,
                ready: BTreeMap::new(),
            }),
            room: Condvar::new(),
            filled: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let mut loader = Loader {
            orders: Orders {
                seed: config.seed,
                len,
                cached: None,
            },
            shared,
            workers: Vec::with_capacity(config.workers),
            next,
            wait: Duration::ZERO,
        };
        for i in 0..config.workers {
            let shared = Arc::clone(&loader.shared);
            let handle = thread::Builder::new()
                .name(format!("segtool-loader-{i}"))
                .spawn(move || shared.worker())
                .map_err(LoaderError::Spawn)?; // Drop stops the workers already started.
            loader.workers.push(handle);
        }
        Ok(loader)
    }

    /// The next batch, blocking until it is ready. After an error the failed batch is
    /// skipped: calling again continues with the one after it.
    pub fn next_batch(&mut self) -> Result<Batch, LoaderError> {
        let started = Instant::now();
        let absolute = self.next;
        self.next += 1;
        let result = if self.workers.is_empty() {
            self.shared
                .build(&mut self.orders, absolute)
                .expect("only Drop stops a loader")
        } else {
            let shared = &*self.shared;
            let mut state = shared.lock();
            let result = loop {
                if let Some(result) = state.ready.remove(&absolute) {
                    break result;
                }
                state = shared.filled.wait(state).unwrap_or_else(|e| e.into_inner());
            };
            state.consumed = absolute + 1;
            drop(state);
            shared.room.notify_all();
            result
        };
        self.wait += started.elapsed();
        result
    }

    /// Total time [`Loader::next_batch`] spent waiting for data (decoding, when inline).
    pub fn wait_time(&self) -> Duration {
        self.wait
    }

    pub fn batches_per_epoch(&self) -> usize {
        self.shared.batches_per_epoch as usize
    }

    /// The position of the next batch [`Loader::next_batch`] will return.
    pub fn position(&self) -> SamplerPosition {
        self.shared.position(self.next)
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        {
            // Set under the lock so that no worker can check the flag, miss it, and then
            // sleep through the notification below.
            let _state = self.shared.lock();
            self.shared.stop.store(true, Ordering::Relaxed);
        }
        self.shared.room.notify_all();
        for handle in self.workers.drain(..) {
            // A worker's panics are caught per batch; a join error has nothing to report.
            let _ = handle.join();
        }
    }
}
