//! The loader's contract: results independent of thread count, exact resume, epoch
//! coverage and rank partitioning, error reporting, prompt shutdown; and the photometric
//! augmentations touching only the image.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use segtool_core::dataset::{DatasetError, Sample, SegDataset, ShapesDataset};
use segtool_core::shapes::ShapesConfig;
use segtool_train::data::Augment;
use segtool_train::loader::{Batch, Loader, LoaderConfig, LoaderError, SamplerPosition};

fn shapes(count: usize) -> Arc<dyn SegDataset> {
    Arc::new(ShapesDataset {
        config: ShapesConfig {
            width: 32,
            height: 32,
            ..Default::default()
        },
        offset: 0,
        count,
    })
}

/// Every augmentation on, so that determinism covers all of them.
fn full_augment() -> Augment {
    Augment {
        flip: true,
        scale: Some((0.75, 1.5)),
        base_size: 32,
        crop: Some(28),
        color_jitter: 0.4,
        blur_prob: 0.5,
        blur_sigma: (0.3, 1.2),
        ..Augment::none()
    }
}

fn config(batch_size: usize, workers: usize) -> LoaderConfig {
    LoaderConfig {
        batch_size,
        workers,
        prefetch: 2,
        seed: 7,
        rank: 0,
        world_size: 1,
    }
}

fn take(loader: &mut Loader, n: usize) -> Vec<Batch> {
    (0..n).map(|_| loader.next_batch().unwrap()).collect()
}

fn assert_same(a: &[Batch], b: &[Batch], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert_eq!(x.indices, y.indices, "{what}: batch {i} indices");
        assert_eq!(x.position, y.position, "{what}: batch {i} position");
        for (s, t) in x.samples.iter().zip(&y.samples) {
            assert_eq!(
                s.image.dimensions(),
                t.image.dimensions(),
                "{what}: batch {i}"
            );
            assert!(
                s.image.as_raw() == t.image.as_raw(),
                "{what}: batch {i} image"
            );
            assert!(s.mask.as_raw() == t.mask.as_raw(), "{what}: batch {i} mask");
        }
    }
}

#[test]
fn worker_count_does_not_change_batches() {
    // 20 samples, batch 2: 10 batches per epoch; 25 batches = 2.5 epochs.
    let run = |workers| {
        let mut loader = Loader::new(
            shapes(20),
            full_augment(),
            config(2, workers),
            SamplerPosition::default(),
        )
        .unwrap();
        assert_eq!(loader.batches_per_epoch(), 10);
        take(&mut loader, 25)
    };
    let inline = run(0);
    assert_same(&inline, &run(1), "1 worker");
    assert_same(&inline, &run(3), "3 workers");
    assert_eq!(
        inline[9].position,
        SamplerPosition {
            epoch: 1,
            offset: 0
        }
    );
    assert_eq!(
        inline[24].position,
        SamplerPosition {
            epoch: 2,
            offset: 5
        }
    );
    // Augmentation really happened (and varies): flips/crops make sizes equal but
    // pixels differ from the raw samples.
    let raw = shapes(20).get(inline[0].indices[0]).unwrap();
    assert_eq!(inline[0].samples[0].image.dimensions(), (28, 28));
    assert_ne!(inline[0].samples[0].mask.as_raw(), raw.mask.as_raw());
}

#[test]
fn resume_continues_exactly() {
    let mut whole = Loader::new(
        shapes(20),
        full_augment(),
        config(2, 2),
        SamplerPosition::default(),
    )
    .unwrap();
    let all = take(&mut whole, 25);
    for k in [1, 7, 10, 13] {
        let start = all[k - 1].position;
        let mut resumed = Loader::new(shapes(20), full_augment(), config(2, 2), start).unwrap();
        assert_eq!(resumed.position(), start);
        let rest = take(&mut resumed, 25 - k);
        assert_same(&all[k..], &rest, &format!("resumed after {k}"));
    }
    // {e, batches_per_epoch} is the start of epoch e + 1.
    let unnormalised = SamplerPosition {
        epoch: 0,
        offset: 10,
    };
    let mut loader = Loader::new(shapes(20), full_augment(), config(2, 0), unnormalised).unwrap();
    assert_eq!(
        loader.position(),
        SamplerPosition {
            epoch: 1,
            offset: 0
        }
    );
    assert_same(&all[10..12], &take(&mut loader, 2), "unnormalised start");
}

#[test]
fn position_roundtrips_through_json() {
    let p = SamplerPosition {
        epoch: 3,
        offset: 4,
    };
    let json = serde_json::to_string(&p).unwrap();
    assert_eq!(serde_json::from_str::<SamplerPosition>(&json).unwrap(), p);
}

#[test]
fn epochs_cover_every_index_once_and_ranks_partition_batches() {
    // 21 samples, 2 per rank x 2 ranks: 5 global batches per epoch, 1 sample dropped.
    let rank = |rank| {
        let cfg = LoaderConfig {
            rank,
            world_size: 2,
            ..config(2, 1)
        };
        Loader::new(shapes(21), Augment::none(), cfg, SamplerPosition::default()).unwrap()
    };
    let (mut r0, mut r1) = (rank(0), rank(1));
    assert_eq!(r0.batches_per_epoch(), 5);
    let mut orders = Vec::new();
    for epoch in 0..3 {
        let mut order = Vec::new();
        for _ in 0..5 {
            let (a, b) = (r0.next_batch().unwrap(), r1.next_batch().unwrap());
            assert_eq!(a.position, b.position);
            assert_eq!((a.indices.len(), b.indices.len()), (2, 2));
            assert!(a.indices.iter().all(|i| !b.indices.contains(i)));
            order.extend(a.indices);
            order.extend(b.indices);
        }
        let distinct: BTreeSet<usize> = order.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            20,
            "epoch {epoch} repeats an index: {order:?}"
        );
        assert!(distinct.iter().all(|&i| i < 21));
        orders.push(order);
    }
    assert_ne!(orders[0], orders[1], "epochs must be reshuffled");

    // Rank slices are the contiguous halves of the single-rank global batch.
    let mut single = Loader::new(
        shapes(21),
        Augment::none(),
        config(4, 0),
        SamplerPosition::default(),
    )
    .unwrap();
    let global: Vec<usize> = take(&mut single, 5)
        .into_iter()
        .flat_map(|b| b.indices)
        .collect();
    assert_eq!(global, orders[0]);
}

/// Shapes, except that one index fails to decode and every read can be slowed down.
struct Faulty {
    inner: Arc<dyn SegDataset>,
    broken: Option<usize>,
    delay: Duration,
}

impl SegDataset for Faulty {
    fn len(&self) -> usize {
        self.inner.len()
    }

    fn get(&self, index: usize) -> Result<Sample, DatasetError> {
        std::thread::sleep(self.delay);
        if Some(index) == self.broken {
            return Err(DatasetError::Io {
                path: PathBuf::from("broken.png"),
                source: std::io::Error::other("truncated file"),
            });
        }
        self.inner.get(index)
    }

    fn name(&self, index: usize) -> String {
        format!("sample-{index:03}")
    }
}

#[test]
fn decode_error_names_the_sample_and_is_skipped() {
    for workers in [0, 2] {
        let dataset = Arc::new(Faulty {
            inner: shapes(20),
            broken: Some(13),
            delay: Duration::ZERO,
        });
        let mut loader = Loader::new(
            dataset,
            Augment::none(),
            config(2, workers),
            SamplerPosition::default(),
        )
        .unwrap();
        let mut failures = 0;
        for _ in 0..10 {
            match loader.next_batch() {
                Ok(batch) => assert!(!batch.indices.contains(&13)),
                Err(err) => {
                    failures += 1;
                    let text = err.to_string();
                    assert!(text.contains("sample-013"), "{text}");
                    assert!(text.contains("truncated file"), "{text}");
                    assert!(
                        matches!(err, LoaderError::Sample { index: 13, .. }),
                        "{err:?}"
                    );
                }
            }
        }
        assert_eq!(failures, 1, "workers {workers}");
        assert_eq!(
            loader.position(),
            SamplerPosition {
                epoch: 1,
                offset: 0
            }
        );
    }
}

#[test]
fn too_small_dataset_and_bad_config_are_rejected() {
    let cfg = LoaderConfig {
        world_size: 2,
        ..config(4, 0)
    };
    let err = Loader::new(shapes(7), Augment::none(), cfg, SamplerPosition::default())
        .err()
        .unwrap();
    let text = err.to_string();
    assert!(text.contains('7') && text.contains('8'), "{text}");
    let cfg = LoaderConfig {
        rank: 2,
        world_size: 2,
        ..config(1, 0)
    };
    assert!(matches!(
        Loader::new(shapes(7), Augment::none(), cfg, SamplerPosition::default()),
        Err(LoaderError::Config(_))
    ));
    let bad = Augment {
        color_jitter: 2.0,
        ..Augment::none()
    };
    assert!(matches!(
        Loader::new(shapes(7), bad, config(1, 0), SamplerPosition::default()),
        Err(LoaderError::Augment(_))
    ));
}

#[test]
fn dropping_a_loader_returns_promptly() {
    // Full queue: the workers are parked waiting for room.
    let mut loader = Loader::new(
        shapes(20),
        full_augment(),
        LoaderConfig {
            prefetch: 3,
            ..config(2, 3)
        },
        SamplerPosition::default(),
    )
    .unwrap();
    loader.next_batch().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    drop(loader);
    assert!(started.elapsed() < Duration::from_secs(2));

    // Mid-batch: slow samples, 50 per batch; workers stop between samples.
    let slow = Arc::new(Faulty {
        inner: shapes(200),
        broken: None,
        delay: Duration::from_millis(20),
    });
    let loader = Loader::new(
        slow,
        Augment::none(),
        config(50, 3),
        SamplerPosition::default(),
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let started = Instant::now();
    drop(loader);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn wait_time_is_bounded_by_wall_time() {
    for workers in [0, 2] {
        let slow = Arc::new(Faulty {
            inner: shapes(20),
            broken: None,
            delay: Duration::from_millis(5),
        });
        let started = Instant::now();
        let mut loader = Loader::new(
            slow,
            Augment::none(),
            config(2, workers),
            SamplerPosition::default(),
        )
        .unwrap();
        assert_eq!(loader.wait_time(), Duration::ZERO);
        take(&mut loader, 6);
        let wall = started.elapsed();
        assert!(loader.wait_time() > Duration::ZERO);
        assert!(
            loader.wait_time() <= wall,
            "{:?} > {wall:?}",
            loader.wait_time()
        );
    }
}

#[test]
fn photometric_augment_changes_only_the_image_and_is_seeded() {
    let sample = shapes(1).get(0).unwrap();
    let aug = Augment {
        color_jitter: 0.5,
        blur_prob: 1.0,
        blur_sigma: (0.8, 1.5),
        ..Augment::none()
    };
    let run = |seed| aug.apply(&sample, &mut ChaCha8Rng::seed_from_u64(seed));
    let (a, b, c) = (run(1), run(1), run(2));
    assert_eq!(a.mask.as_raw(), sample.mask.as_raw());
    assert_eq!(c.mask.as_raw(), sample.mask.as_raw());
    assert_ne!(a.image.as_raw(), sample.image.as_raw());
    assert_eq!(a.image.as_raw(), b.image.as_raw());
    assert_ne!(a.image.as_raw(), c.image.as_raw());

    // Each extra alone also leaves the mask alone.
    for aug in [
        Augment {
            color_jitter: 0.3,
            ..Augment::none()
        },
        Augment {
            blur_prob: 1.0,
            ..Augment::none()
        },
    ] {
        let out = aug.apply(&sample, &mut ChaCha8Rng::seed_from_u64(5));
        assert_eq!(out.mask.as_raw(), sample.mask.as_raw());
        assert_ne!(out.image.as_raw(), sample.image.as_raw());
    }
}
