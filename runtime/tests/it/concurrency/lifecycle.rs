//! Shutdown and failure: dropping or shutting down the server answers every handle, one
//! bad request fails only its own handle, dropped handles are skipped, bad configs are
//! refused.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use image::{Rgb, RgbImage};
use ndarray::{Array4, Axis};
use segtool_runtime::batching::{BatchConfig, BatchError, BatchServer, Handle};
use segtool_runtime::RuntimeError;

use super::{
    digit, expected_mask, image, server, spec, FakeEngine, Probe, POISON_ERROR, POISON_PANIC,
};

#[test]
fn dropping_the_server_with_pending_requests_returns_promptly() {
    let probe = Probe::new();
    let config = BatchConfig::new()
        .with_max_batch(2)
        .with_max_wait(Duration::ZERO)
        .with_queue_capacity(100);
    let server = server(&probe, config, 2, 0, Duration::from_millis(50));
    let handles: Vec<Handle> = (0..60).map(|id| server.submit(image(id, 0))).collect();
    std::thread::sleep(Duration::from_millis(10));
    let start = Instant::now();
    drop(server);
    let took = start.elapsed();
    // Processing all 60 would take 30 batches x 50 ms / 2 workers = 750 ms at least;
    // only the (at most two rounds of) running batches may finish. Generous for loaded CI.
    assert!(took < Duration::from_millis(2000), "drop took {took:?}");
    let (mut ok, mut shut_down) = (0, 0);
    for (id, h) in handles.into_iter().enumerate() {
        match h.wait_timeout(Duration::from_secs(1)) {
            Ok(Ok(out)) => {
                assert_eq!(out.mask, expected_mask(id, 0));
                ok += 1;
            }
            Ok(Err(BatchError::ShutDown)) => shut_down += 1,
            Ok(Err(e)) => panic!("request {id}: unexpected error {e}"),
            Err(_) => panic!("request {id}: handle still pending after shutdown"),
        }
    }
    assert!(ok <= 8 && shut_down >= 52, "ok {ok}, shut down {shut_down}");
    assert_eq!(ok + shut_down, 60);
}

#[test]
fn shutdown_answers_later_submissions_and_streams() {
    let probe = Probe::new();
    let server = server(&probe, BatchConfig::new(), 1, 0, Duration::ZERO);
    let before = server.submit(image(1, 1));
    assert_eq!(before.wait().unwrap().mask, expected_mask(1, 1));
    let stream = server.ordered_stream(4);
    server.shutdown();
    server.shutdown(); // idempotent
    assert!(matches!(
        server.submit(image(2, 1)).wait(),
        Err(BatchError::ShutDown)
    ));
    assert!(matches!(
        server.try_submit(image(3, 1)).unwrap().wait(),
        Err(BatchError::ShutDown)
    ));
    assert_eq!(stream.push(image(4, 1)), 0);
    stream.finish();
    assert!(matches!(stream.next(), Some(Err(BatchError::ShutDown))));
    assert!(stream.next().is_none());
}

#[test]
fn one_bad_request_fails_only_its_own_handle() {
    let probe = Probe::new();
    let config = BatchConfig::new()
        .with_max_batch(8)
        .with_max_wait(Duration::from_millis(20));
    let server = server(&probe, config, 2, 0, Duration::ZERO);
    let poisoned = |id: usize, blue: u8| {
        let mut img = image(id, 0);
        img.put_pixel(0, 0, Rgb([digit(id, 0), 1, blue]));
        img
    };
    let handles: Vec<Handle> = (0..40)
        .map(|id| match id {
            17 => server.submit(poisoned(id, POISON_ERROR)),
            29 => server.submit(poisoned(id, POISON_PANIC)),
            _ => server.submit(image(id, 0)),
        })
        .collect();
    let empty = server.submit(RgbImage::new(0, 0));
    let wrong = server.submit(Array4::<f32>::zeros((1, 4, 2, 2)).index_axis_move(Axis(0), 0));
    for (id, h) in handles.into_iter().enumerate() {
        match (id, h.wait()) {
            (17, Err(BatchError::Runtime(RuntimeError::Tract(msg)))) => {
                assert!(msg.contains("poisoned"))
            }
            (29, Err(BatchError::EnginePanicked(msg))) => assert!(msg.contains("poisoned")),
            (17 | 29, other) => panic!("request {id}: {other:?}"),
            (_, out) => assert_eq!(out.unwrap().mask, expected_mask(id, 0)),
        }
    }
    for h in [empty, wrong] {
        assert!(matches!(
            h.wait(),
            Err(BatchError::Runtime(RuntimeError::InputShape { .. }))
        ));
    }
    let stats = server.stats();
    assert!(stats.mean_batch_size() > 1.0, "{stats:?}");
    assert!(stats.workers.iter().map(|w| w.failed_batches).sum::<u64>() >= 2);
    assert_eq!(stats.workers.iter().map(|w| w.errors).sum::<u64>(), 2);
}

#[test]
fn dropped_handles_are_skipped_and_config_is_checked() {
    let probe = Probe::new();
    let config = BatchConfig::new().with_max_batch(4).with_queue_capacity(32);
    let server = server(&probe, config.clone(), 1, 0, Duration::ZERO);
    probe.set_open(false);
    let first = server.submit(image(0, 0));
    while server.stats().in_batches == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    for id in 1..11 {
        drop(server.submit(image(id, 0))); // the caller lost interest
    }
    let last = server.submit(image(11, 0));
    probe.set_open(true);
    assert_eq!(first.wait().unwrap().mask, expected_mask(0, 0));
    assert_eq!(last.wait().unwrap().mask, expected_mask(11, 0));
    assert_eq!(server.stats().abandoned, 10);
    assert_eq!(probe.images.load(Ordering::SeqCst), 2);

    let bad = |c: BatchConfig| {
        BatchServer::new(
            c,
            spec(),
            vec![FakeEngine::boxed(&probe, 1, 0, Duration::ZERO)],
        )
    };
    assert!(matches!(
        bad(config.clone().with_max_batch(0)),
        Err(BatchError::InvalidConfig(_))
    ));
    assert!(matches!(
        bad(config.clone().with_queue_capacity(0)),
        Err(BatchError::InvalidConfig(_))
    ));
    assert!(matches!(
        BatchServer::new(config, spec(), vec![]),
        Err(BatchError::InvalidConfig(_))
    ));
}
