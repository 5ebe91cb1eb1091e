//! [`BatchServer`]: the queue plus one worker thread per engine.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use segtool_model_spec::ModelSpec;

use super::handle::{Handle, Outcome, Reply};
use super::queue::{Job, Queue};
use super::run::Inputs;
use super::{
    BatchConfig, BatchError, Input, QueueFull, Served, Stats,
    WorkerStats,
};
use crate::card::ModelCard;
use crate::engines::Engine;
use crate::error::Result;
use crate::pipeline::{Plan, Preparer};
use crate::segmenter::SegmenterExt;
use crate::{Segmentation, Segmenter};

/// Batches requests from many threads onto one or more engines.
///
/// `Sync`: share it by reference (or in an `Arc`) between submitting threads. Dropping
/// it shuts it down (see [`shutdown`](Self::shutdown)).
///
/// # Example
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use segtool_runtime::batching::{BatchConfig, BatchServer};
/// use segtool_runtime::Segmenter;
/// // Two sessions of one model; requests of the same size are batched up to 4.
/// let config = BatchConfig::new().with_max_batch(4);
/// let server = BatchServer::open(&Segmenter::builder("model.onnx"), 2, config)?;
/// # let frames = vec![image::RgbImage::new(640, 480); 8];
/// let handles = server.submit_all(frames); // from any thread: `&BatchServer` is enough
/// for handle in handles {
///     let out = handle.wait()?;
///     let served = out.served.expect("a server's answer");
///     println!("request {}: {:?} mask, batch of {}", served.id, out.mask.dim(), served.batch_size);
/// }
/// println!("mean batch size {:.1}", server.stats().mean_batch_size());
/// # Ok(()) }
/// ```
pub struct BatchServer {
    queue: Arc<Queue>,
    config: BatchConfig,
    spec: Arc<ModelSpec>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    count: usize,
}

impl BatchServer {
    /// `workers` segmenters opened from `builder` (the builder and options a single
    /// [`Segmenter`] takes; one engine session per worker), served with `config`.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use segtool_runtime::batching::{BatchConfig, BatchServer};
    /// use segtool_runtime::{Segmenter, SegmenterOptions};
    /// let builder = Segmenter::builder("model.onnx").options(&SegmenterOptions::default())?;
    /// let server = BatchServer::open(&builder, 2, BatchConfig::new().with_max_batch(4))?;
    /// let stream = server.latest_stream(1);
    /// # Ok(()) }
    /// ```
    pub fn open(
        builder: &crate::SegmenterBuilder,
        workers: usize,
        config: BatchConfig,
    ) -> Result<Self, BatchError> {
        if workers == 0 {
            return Err(BatchError::InvalidConfig(
                "workers must be at least 1".into(),
            ));
        }
        let segmenters = (0..workers)
            .map(|_| builder.clone().open())
            .collect::<Result<Vec<_>, _>>()?;
        Self::from_segmenters(config, segmenters)
    }

    /// One worker per segmenter, each driving its model through its own contract
    /// (`--preprocess` graphs get pixels, `--argmax` graphs answer class maps): the way
    /// to serve any export. Every segmenter must carry the same spec.
    pub fn from_segmenters(
        config: BatchConfig,
        segmenters: Vec<Segmenter>,
    ) -> Result<Self, BatchError> {
        let spec = match segmenters.first() {
            Some(s) => s.spec().clone(),
            None => {
                return Err(BatchError::InvalidConfig(
                    "no segmenters (workers) given".into(),
                ))
            }
        };
        if let Some(i) = segmenters.iter().position(|s| *s.spec() != spec) {
            return Err(BatchError::InvalidConfig(format!(
                "segmenter {i} has another model spec than segmenter 0: one server serves one model"
            )));
        }
        // Every model is driven by its card (resize, normalisation, decoding).
        let card = &segmenters[0].card().card;
        if let Some(i) = segmenters.iter().position(|s| s.card().card != *card) {
            return Err(BatchError::InvalidConfig(format!(
                "segmenter {i} has another model card than segmenter 0: one server serves one model"
            )));
        }
        if segmenters.iter().any(|s| s.accuracy().is_some()) {
            return Err(BatchError::InvalidConfig(
                "accuracy mode runs image by image (Segmenter::segment_batch), not in a batch \
                 server"
                    .into(),
            ));
        }
        let engines = segmenters
            .into_iter()
            .map(|s| {
                let preparer = s.preparer().logits(config.keep_logits);
                (s.into_engine(), preparer)
            })
            .collect();
        Self::start(config, spec, engines)
    }

    /// One worker thread per engine, each running the model as the segmenter that made
    /// `preparer` does (its card or spec, its graph's fixed size and batch, its contract):
    /// for engines that stand in for a segmenter's own, such as sessions shared with
    /// callers of the segmenter (Python's). Every engine must run that model.
    pub fn with_preparer(
        config: BatchConfig,
        preparer: Preparer,
        engines: Vec<Box<dyn Engine>>,
    ) -> Result<Self, BatchError> {
        let preparer = preparer.logits(config.keep_logits);
        let spec = preparer.plan().spec.clone();
        let engines = engines.into_iter().map(|e| (e, preparer.clone())).collect();
        Self::start(config, spec, engines)
    }

    /// One worker thread per engine; `spec` gives the normalisation and the class count
    /// every engine's output is checked against. Each engine is driven by the contract it
    /// reports ([`Engine::io_contract`], else plain); for exported files prefer
    /// [`BatchServer::from_segmenters`], which also knows the contract the exporter recorded.
    pub fn new(
        config: BatchConfig,
        spec: ModelSpec,
        engines: Vec<Box<dyn Engine>>,
    ) -> Result<Self, BatchError> {
        let keep_logits = config.keep_logits;
        let engines = engines
            .into_iter()
            .map(|e| {
                let contract = e.io_contract().unwrap_or_default();
                let card = crate::card::from_spec(&spec, contract, "image", "logits").card;
                let preparer = Preparer::new(Plan::for_engine(card, spec.clone(), keep_logits));
                (e, preparer)
            })
            .collect();
        Self::start(config, spec, engines)
    }

    /// One worker thread per engine, each running a model from elsewhere as `card` says
    /// (prepare, run, decode: [`crate::card::pipeline::run`]). Every engine must run the
    /// card's model.
    pub fn with_card(
        config: BatchConfig,
        card: ModelCard,
        engines: Vec<Box<dyn Engine>>,
    ) -> Result<Self, BatchError> {
        let spec = crate::card::spec_of(&card);
        let plan = Plan::for_engine(card, spec.clone(), config.keep_logits);
        let preparer = Preparer::new(plan);
        let engines = engines.into_iter().map(|e| (e, preparer.clone())).collect();
        Self::start(config, spec, engines)
    }

    fn start(
        config: BatchConfig,
        spec: ModelSpec,
        engines: Vec<(Box<dyn Engine>, Preparer)>,
    ) -> Result<Self, BatchError> {
        config.validate()?;
        if engines.is_empty() {
            return Err(BatchError::InvalidConfig(
                "no engines (workers) given".into(),
            ));
        }
        let stats = engines
            .iter()
            .enumerate()
            .map(|(worker, (e, _))| WorkerStats {
                worker,
                engine: e.name().to_string(),
                provider: e.provider().to_string(),
                ..WorkerStats::default()
            })
            .collect();
        let queue = Arc::new(Queue::new(&config, stats));
        let count = engines.len();
        let mut workers = Vec::with_capacity(count);
        for (index, (engine, preparer)) in engines.into_iter().enumerate() {
            let worker = Worker {
                index,
                engine,
                preparer,
                queue: queue.clone(),
            };
            let spawned = std::thread::Builder::new()
                .name(format!("segtool-batch-{index}"))
                .spawn(move || worker.run());
            match spawned {
                Ok(handle) => workers.push(handle),
                Err(e) => {
                    for job in queue.close() {
                        job.reply.send(Err(BatchError::ShutDown));
                    }
                    workers.into_iter().for_each(|h| drop(h.join()));
                    return Err(BatchError::InvalidConfig(format!(
                        "cannot start worker thread {index}: {e}"
                    )));
                }
            }
        }
        Ok(Self {
            queue,
            config,
            spec: Arc::new(spec),
            workers: Mutex::new(workers),
            count,
        })
    }

    /// Builds `count` engines with `factory(0..count)` (e.g. one per GPU: the argument
    /// is a natural device id), then [`new`](Self::new). The first factory error is
    /// returned and the engines built so far are dropped. For exported files, build
    /// segmenters and use [`from_segmenters`](Self::from_segmenters).
    pub fn from_factory<F>(
        config: BatchConfig,
        spec: ModelSpec,
        count: usize,
        factory: F,
    ) -> Result<Self, BatchError>
    where
        F: FnMut(usize) -> Result<Box<dyn Engine>>,
    {
        let engines = (0..count).map(factory).collect::<Result<Vec<_>>>()?;
        Self::new(config, spec, engines)
    }

    /// Queues a request, blocking while the queue is full. Never fails itself: an
    /// invalid input or a shut-down server answers the handle with the error.
    pub fn submit(&self, input: impl Into<Input>) -> Handle {
        match self.queue.push(input.into(), true) {
            Ok(handle) => handle,
            Err(_) => unreachable!("a blocking push waits for room"),
        }
    }

    /// Queues a request if there is room now, else gives it back in [`QueueFull`]
    /// (drop it, or retry later: the "newest frame wins" policy of a live camera).
    pub fn try_submit(&self, input: impl Into<Input>) -> Result<Handle, QueueFull> {
        self.queue.push(input.into(), false)
    }

    /// Same as [`submit`](Self::submit) for many requests; handles in input order.
    pub fn submit_all<I>(&self, inputs: I) -> Vec<Handle>
    where
        I: IntoIterator,
        I::Item: Into<Input>,
    {
        inputs.into_iter().map(|i| self.submit(i)).collect()
    }

    /// Segments `imgs` through the server and waits: like
    /// [`Segmenter::segment_batch`](crate::Segmenter::segment_batch), but spread over
    /// every engine. The first error wins.
    pub fn segment_all(&self, imgs: Vec<image::RgbImage>) -> Result<Vec<Segmentation>, BatchError> {
        self.submit_all(imgs)
            .into_iter()
            .map(Handle::wait)
            .collect()
    }

    /// The queue the streams submit to.
    pub(crate) fn queue(&self) -> Arc<Queue> {
        self.queue.clone()
    }

    /// The configuration the server was started with.
    pub fn config(&self) -> &BatchConfig {
        &self.config
    }

    /// The model spec every worker serves (classes, palette, normalisation).
    pub fn spec(&self) -> &ModelSpec {
        &self.spec
    }

    /// Number of workers (engines).
    pub fn workers(&self) -> usize {
        self.count
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        self.queue.stats()
    }

    /// Stops the server: queued requests are answered with [`BatchError::ShutDown`],
    /// batches already running finish, worker threads are joined, later submissions
    /// fail. Returns after at most one engine run per worker. Idempotent.
    pub fn shutdown(&self) {
        for job in self.queue.close() {
            job.reply.send(Err(BatchError::ShutDown));
        }
        let workers = std::mem::take(&mut *self.workers.lock().unwrap_or_else(|e| e.into_inner()));
        for handle in workers {
            // A worker only panics outside an engine run on a bug; its jobs are answered
            // by their `Reply`s' drop either way.
            let _ = handle.join();
        }
    }
}

impl Drop for BatchServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl std::fmt::Debug for BatchServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchServer")
            .field("config", &self.config)
            .field("workers", &self.count)
            .finish_non_exhaustive()
    }
}

struct Worker {
    index: usize,
    engine: Box<dyn Engine>,
    /// How the worker's model is prepared and decoded (a segtool export's spec and graph,
    /// or a card).
    preparer: Preparer,
    queue: Arc<Queue>,
}

impl Worker {
    fn run(mut self) {
        while let Some(jobs) = self.queue.next_batch() {
            let start = Instant::now();
            let n = jobs.len();
            let (ok, answers) = self.run_batch(jobs);
            let errors = answers.iter().filter(|(_, o)| o.is_err()).count();
            // Count first, so that a caller whose handle resolved sees its request in
            // the stats.
            self.queue.done(self.index, n, errors, ok, start.elapsed());
            for (reply, outcome) in answers {
                reply.send(outcome);
            }
        }
    }

    /// Runs one batch; returns whether it succeeded as a whole, and every answer.
    fn run_batch(&mut self, jobs: Vec<Job>) -> (bool, Vec<(Reply, Outcome)>) {
        let n = jobs.len();
        let (meta, inputs): (Vec<_>, Vec<_>) =
            jobs.into_iter().map(|j| ((j.id, j.reply), j.input)).unzip();
        let inputs = Inputs::new(inputs);
        match self.guarded(&inputs, None) {
            Ok(segs) => {
                let answers = meta
                    .into_iter()
                    .zip(segs)
                    .map(|((id, reply), seg)| (reply, Ok(self.output(id, seg, n))))
                    .collect();
                (true, answers)
            }
            Err(e) if n == 1 => {
                let (_, reply) = meta.into_iter().next().expect("one job");
                (false, vec![(reply, Err(e))])
            }
            Err(_) => {
                // Isolate the culprit: each request alone gets its own result or error.
                let answers = meta
                    .into_iter()
                    .enumerate()
                    .map(|(i, (id, reply))| {
                        let outcome = self
                            .guarded(&inputs, Some(i))
                            .map(|mut segs| self.output(id, segs.pop().expect("one result"), 1));
                        (reply, outcome)
                    })
                    .collect();
                (false, answers)
            }
        }
    }

    /// Runs with panics turned into errors, so that one bad request (or engine bug)
    /// does not take the worker and every later request with it.
    fn guarded(
        &mut self,
        inputs: &Inputs,
        only: Option<usize>,
    ) -> Result<Vec<Segmentation>, BatchError> {
        let (engine, preparer) = (self.engine.as_mut(), &self.preparer);
        match catch_unwind(AssertUnwindSafe(|| inputs.run(only, engine, preparer))) {
            Ok(result) => result.map_err(BatchError::from),
            Err(payload) => Err(BatchError::EnginePanicked(
                payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "non-string panic payload".into()),
            )),
        }
    }

    fn output(&self, id: u64, seg: Segmentation, batch_size: usize) -> Segmentation {
        Segmentation {
            served: Some(Served {
                id,
                frame: None,
                worker: self.index,
                batch_size,
            }),
            ..seg
        }
    }
}
