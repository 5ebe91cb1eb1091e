//! The bounded, size-bucketed request queue shared by submitters and workers.
//!
//! One mutex guards everything (buckets, counters, stats); the critical sections only
//! move jobs, never run models. Requests are bucketed by `(H, W)`; a worker starts a
//! batch with the oldest request of any bucket (no size starves) and fills it from that
//! bucket only. While it waits for more, the bucket is marked as *gathering*, so idle
//! workers do not steal its requests one by one (which would defeat batching) but still
//! serve other sizes.
//!
//! A request may carry a deadline: a worker never starts it later than that (it is
//! answered [`BatchError::DeadlineExpired`] instead), and a queued request can be taken
//! back unstarted ([`Queue::cancel`]); the newest-frame stream is built on both.
//!
//! A request may name its source (a camera of a [`crate::batching::MultiStream`]): a batch takes
//! at most one request per source, oldest first, so a camera with a backlog never fills
//! a batch while another camera's frame waits; the rest of its backlog waits for the
//! next batch.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::handle::{self, Handle, Notify, Reply};
use super::{BatchConfig, BatchError, Input, QueueFull, Stats, WorkerStats};

type Size = (usize, usize);

/// One queued request.
pub(crate) struct Job {
    pub id: u64,
    pub input: Input,
    pub enqueued: Instant,
    /// Not started after this: answered [`BatchError::DeadlineExpired`].
    pub deadline: Option<Instant>,
    /// The source (camera) it came from: one per source per batch.
    pub source: Option<u32>,
    pub reply: Reply,
}

struct State {
    buckets: HashMap<Size, VecDeque<Job>>,
    /// Sizes a worker is currently filling a batch from.
    gathering: Vec<Size>,
    /// Jobs found past their deadline, to be answered outside the lock.
    expired: Vec<Job>,
    closed: bool,
    stats: Stats,
    /// Batches taken so far, and the last batch each source (camera) was in.
    batches: u64,
    served: HashMap<u32, u64>,
}

pub(crate) struct Queue {
    state: Mutex<State>,
    /// Workers wait here: a request arrived, or the queue closed.
    work: Condvar,
    /// Submitters wait here: room was freed, or the queue closed.
    space: Condvar,
    next_id: AtomicU64,
    max_batch: usize,
    max_wait: Duration,
    capacity: usize,
}

impl Queue {
    pub(crate) fn new(config: &BatchConfig, workers: Vec<WorkerStats>) -> Self {
        Self {
            state: Mutex::new(State {
                buckets: HashMap::new(),
                gathering: Vec::new(),
                expired: Vec::new(),
                closed: false,
                stats: Stats {
                    workers,
                    ..Stats::default()
                },
                batches: 0,
                served: HashMap::new(),
            }),
            work: Condvar::new(),
            space: Condvar::new(),
            next_id: AtomicU64::new(0),
            max_batch: config.max_batch,
            max_wait: config.max_wait,
            capacity: config.queue_capacity,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing user-supplied runs under this lock, but stay usable if a panic did.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `input`. Full queue: waits for room when `block`, else gives it back.
    /// Invalid inputs and a closed queue answer the handle at once.
    pub(crate) fn push(&self, input: Input, block: bool) -> Result<Handle, QueueFull> {
        self.push_with(input, block, None, None, None)
    }

    /// [`push`](Self::push) with a start deadline, a wake-up run once the request is
    /// answered by a worker (or by shutdown), and the source it came from.
    pub(crate) fn push_with(
        &self,
        input: Input,
        block: bool,
        deadline: Option<Instant>,
        notify: Option<Notify>,
        source: Option<u32>,
    ) -> Result<Handle, QueueFull> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = input.check() {
            return Ok(handle::answered(id, Err(e.into())));
        }
        let mut st = self.lock();
        loop {
            if st.closed {
                return Ok(handle::answered(id, Err(BatchError::ShutDown)));
            }
            if st.stats.queued < self.capacity {
                break;
            }
            if !block {
                st.stats.rejected += 1;
                return Err(QueueFull::new(input, self.capacity));
            }
            st = self.space.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        let (reply, handle) = handle::pair_notifying(id, notify);
        let size = input.size();
        st.buckets.entry(size).or_default().push_back(Job {
            id,
            input,
            enqueued: Instant::now(),
            deadline,
            source,
            reply,
        });
        st.stats.queued += 1;
        st.stats.submitted += 1;
        st.stats.peak_alive = st.stats.peak_alive.max(st.stats.alive());
        drop(st);
        self.work.notify_all();
        Ok(handle)
    }

    /// Takes back request `id` of input size `size` if no worker has taken it yet.
    pub(crate) fn cancel(&self, id: u64, size: Size) -> Option<Job> {
        let mut st = self.lock();
        let bucket = st.buckets.get_mut(&size)?;
        let at = bucket.iter().position(|j| j.id == id)?;
        let mut job = bucket.remove(at).expect("position is in range");
        job.reply.disarm();
        if bucket.is_empty() {
            st.buckets.remove(&size);
        }
        st.stats.queued -= 1;
        st.stats.cancelled += 1;
        drop(st);
        self.space.notify_all();
        Some(job)
    }

    /// Blocks until a batch is ready for `worker`; `None` once the queue is closed.
    /// The jobs count as `in_batches` until [`Queue::done`]. Jobs met past their
    /// deadline on the way are answered [`BatchError::DeadlineExpired`].
    pub(crate) fn next_batch(&self) -> Option<Vec<Job>> {
        loop {
            let batch = self.gather();
            let expired = std::mem::take(&mut self.lock().expired);
            if !expired.is_empty() {
                self.space.notify_all();
            }
            for job in expired {
                job.reply.send(Err(BatchError::DeadlineExpired));
            }
            match batch {
                Some(jobs) if jobs.is_empty() => continue,
                batch => return batch,
            }
        }
    }

    /// The next batch; an empty one when only expired jobs were found (to be answered
    /// before waiting).
    fn gather(&self) -> Option<Vec<Job>> {
        let mut st = self.lock();
        let (size, first) = loop {
            if st.closed {
                return None;
            }
            if let Some(found) = st.pop_oldest() {
                break found;
            }
            if !st.expired.is_empty() {
                return Some(Vec::new());
            }
            st = self.work.wait(st).unwrap_or_else(|e| e.into_inner());
        };
        let deadline = first.enqueued + self.max_wait;
        let mut batch = vec![first];
        st.take_more(size, self.max_batch, &mut batch);
        if batch.len() < self.max_batch && Instant::now() < deadline {
            st.gathering.push(size);
            loop {
                let now = Instant::now();
                if st.closed || batch.len() >= self.max_batch || now >= deadline {
                    break;
                }
                st = self
                    .work
                    .wait_timeout(st, deadline - now)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
                st.take_more(size, self.max_batch, &mut batch);
            }
            st.gathering.retain(|s| *s != size);
        }
        st.served(&batch);
        st.stats.queued -= batch.len();
        st.stats.in_batches += batch.len();
        let leftovers = st.buckets.contains_key(&size);
        drop(st);
        self.space.notify_all();
        if leftovers {
            // Requests of this size beyond `max_batch`, no longer reserved.
            self.work.notify_all();
        }
        Some(batch)
    }

    /// Records a finished batch of `n` requests (`errors` of them failed).
    pub(crate) fn done(&self, worker: usize, n: usize, errors: usize, ok: bool, busy: Duration) {
        let mut st = self.lock();
        st.stats.in_batches -= n;
        let w = &mut st.stats.workers[worker];
        if ok {
            w.batches += 1;
        } else {
            w.failed_batches += 1;
        }
        w.requests += n as u64;
        w.errors += errors as u64;
        w.max_batch_size = w.max_batch_size.max(n);
        w.busy += busy;
    }

    /// Jobs dropped by [`State::take`] because their handles were gone.
    fn count_abandoned(st: &mut State, n: usize) {
        st.stats.queued -= n;
        st.stats.abandoned += n as u64;
    }

    /// Refuses new requests, wakes everybody and hands back every queued job (to be
    /// answered outside the lock).
    pub(crate) fn close(&self) -> Vec<Job> {
        let mut st = self.lock();
        st.closed = true;
        let mut jobs: Vec<Job> = st.buckets.drain().flat_map(|(_, b)| b).collect();
        st.stats.queued -= jobs.len();
        jobs.append(&mut st.expired);
        drop(st);
        self.work.notify_all();
        self.space.notify_all();
        jobs
    }

    pub(crate) fn stats(&self) -> Stats {
        self.lock().stats.clone()
    }
}

impl State {
    /// Pops the first live job among the buckets nobody is gathering from: by
    /// [`turn`], so the oldest request, or the camera served longest ago.
    fn pop_oldest(&mut self) -> Option<(Size, Job)> {
        loop {
            let size = *self
                .buckets
                .iter()
                .filter(|(size, _)| !self.gathering.contains(size))
                .filter_map(|(size, b)| {
                    b.iter()
                        .map(|j| turn(&self.served, j))
                        .min()
                        .map(|t| (size, t))
                })
                .min_by_key(|(_, turn)| *turn)?
                .0;
            if let Some(job) = self.take(size) {
                return Some((size, job));
            }
        }
    }

    /// Records the sources of a batch taken (the cameras' turns).
    fn served(&mut self, batch: &[Job]) {
        self.batches += 1;
        for source in batch.iter().filter_map(|j| j.source) {
            self.served.insert(source, self.batches);
        }
    }

    /// Appends jobs of `size` to `batch` up to `max` in all, at most one per source.
    fn take_more(&mut self, size: Size, max: usize, batch: &mut Vec<Job>) {
        while batch.len() < max {
            let taken: Vec<u32> = batch.iter().filter_map(|j| j.source).collect();
            let fresh = |job: &Job| job.source.is_none_or(|s| !taken.contains(&s));
            match self.take_where(size, fresh) {
                Some(job) => batch.push(job),
                None => break,
            }
        }
    }

    /// Front job of a bucket (see [`take_where`](Self::take_where)).
    fn take(&mut self, size: Size) -> Option<Job> {
        self.take_where(size, |_| true)
    }

    /// The first job of a bucket in line ([`turn`]) that `wanted` accepts,
    /// dropping jobs whose handles are gone and setting aside those past their deadline
    /// on the way; removes emptied buckets so the map only holds sizes with work.
    fn take_where(&mut self, size: Size, wanted: impl Fn(&Job) -> bool) -> Option<Job> {
        let bucket = self.buckets.get_mut(&size)?;
        let mut abandoned = 0;
        let mut expired = Vec::new();
        let now = Instant::now();
        let mut at = 0;
        while at < bucket.len() {
            let job = &bucket[at];
            if job.reply.abandoned() {
                bucket.remove(at);
                abandoned += 1;
            } else if job.deadline.is_some_and(|d| now >= d) {
                expired.extend(bucket.remove(at));
            } else {
                at += 1;
            }
        }
        let first = bucket
            .iter()
            .enumerate()
            .filter(|(_, job)| wanted(job))
            .min_by_key(|(_, job)| turn(&self.served, job))
            .map(|(at, _)| at);
        let found = first.and_then(|at| bucket.remove(at));
        if bucket.is_empty() {
            self.buckets.remove(&size);
        }
        Queue::count_abandoned(self, abandoned);
        self.stats.queued -= expired.len();
        self.stats.expired += expired.len() as u64;
        self.expired.append(&mut expired);
        found
    }
}

/// A job's place in line: `(the last batch its source was in, its id)`. A request
/// without a source, or from a camera never served, goes by its age alone; among cameras,
/// the one served longest ago goes first, so that a camera whose newest frame keeps
/// replacing its waiting one (and so is always the youngest request) still gets its turn.
fn turn(served: &HashMap<u32, u64>, job: &Job) -> (u64, u64) {
    let last = job.source.and_then(|s| served.get(&s)).copied();
    (last.unwrap_or(0), job.id)
}
