//! `Segmenter` (one model: `segment`, `segment_batch`, spec, provider, fallbacks; plain or
//! accuracy mode), its `Segmentation` results and their `Timings`.

use std::path::PathBuf;
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ndarray::{Array3, ArrayView3};
use numpy::{IntoPyArray, PyArray2, PyArray3, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use segtool_model_spec::ModelSpec;
use segtool_runtime::pipeline::accuracy::AccuracyOptions;
use segtool_runtime::expert::SegmenterExt;
use segtool_runtime::{ClassMap, IoContract, RuntimeError, SegmenterOptions};

use crate::errors;
use crate::pixels::{self, Color};
use opening::{accuracy_options, open, segmenter_options};

mod opening;

/// How long a wait holds no GIL before it looks for signals (Ctrl-C).
pub(crate) const SIGNAL_POLL: Duration = Duration::from_millis(50);

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Pre-processing, engine and post-processing times of one call, in seconds.
#[pyclass(module = "segtool._segtool", frozen, get_all)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Timings {
    /// Reading and normalising the pixels (or packing them for a `--preprocess` graph).
    pub pre: f64,
    /// The engine run(s).
    pub engine: f64,
    /// Class maps (argmax, resize) and scores out.
    pub post: f64,
}

#[pymethods]
impl Timings {
    #[getter]
    fn total(&self) -> f64 {
        self.pre + self.engine + self.post
    }

    fn __repr__(&self) -> String {
        format!(
            "Timings(pre={:.3} ms, engine={:.3} ms, post={:.3} ms)",
            self.pre * 1e3,
            self.engine * 1e3,
            self.post * 1e3
        )
    }
}

/// One image's result: `mask` (HxW at the input's size: uint8 for a model of at most 256
/// classes, uint16 above), `scores` (float32 CxHxW when asked for, else None) and
/// `timings` (of the call that produced it; None for results of a server or stream,
/// whose requests share batches).
#[pyclass(module = "segtool._segtool", frozen, get_all)]
pub struct Segmentation {
    pub mask: Py<PyAny>,
    pub scores: Option<Py<PyArray3<f32>>>,
    pub timings: Option<Timings>,
}

#[pymethods]
impl Segmentation {
    fn __repr__(&self, py: Python<'_>) -> String {
        let mask = self.mask.bind(py);
        let shape = mask
            .cast::<PyUntypedArray>()
            .map(|a| a.shape().to_vec())
            .unwrap_or_default();
        let (h, w) = (
            shape.first().copied().unwrap_or(0),
            shape.get(1).copied().unwrap_or(0),
        );
        let dtype = match mask.cast::<PyArray2<u16>>() {
            Ok(_) => "uint16",
            Err(_) => "uint8",
        };
        format!(
            "Segmentation(mask={h}x{w} {dtype}, scores={}, {:?})",
            self.scores.is_some(),
            self.timings
        )
    }
}

pub(crate) fn segmentation(
    py: Python<'_>,
    mask: ClassMap,
    scores: Option<Array3<f32>>,
    timings: Option<Timings>,
) -> PyResult<Py<Segmentation>> {
    Py::new(
        py,
        Segmentation {
            mask: pixels::class_map_to_array(py, mask),
            scores: scores.map(|s| s.into_pyarray(py).unbind()),
            timings,
        },
    )
}

/// What the engine thread returns: per image its mask and optional scores.
type Decoded = Vec<(ClassMap, Option<Array3<f32>>)>;

/// The model, shared by the segmenter and the servers and streams built over it.
pub(crate) struct Model {
    pub(crate) seg: Mutex<segtool_runtime::Segmenter>,
    pub(crate) spec: ModelSpec,
    pub(crate) contract: IoContract,
    accuracy: Option<AccuracyOptions>,
}

impl Model {
    /// Runs images (of any sizes) and decodes them through the runtime's three stages (the
    /// path every front end takes); `Err` carries the runtime's error. Called without the
    /// GIL.
    fn run(
        &self,
        imgs: &[ArrayView3<'_, u8>],
        color: Color,
        scores: bool,
        t: &mut Timings,
    ) -> Result<Decoded, RuntimeError> {
        let t0 = Instant::now();
        // Read in place where the model takes the pixels at their size (a strided array
        // is packed first).
        let packed: Vec<_> = imgs.iter().map(|v| v.as_standard_layout()).collect();
        let frames = packed
            .iter()
            .map(|v| pixels::frame(v.view(), color))
            .collect::<Result<Vec<_>, _>>()?;
        let mut seg = lock(&self.seg);
        let prepared = seg.preparer().logits(scores).prepare_frames(&frames)?;
        let t1 = Instant::now();
        t.pre += (t1 - t0).as_secs_f64();
        let scored = seg.run(prepared)?;
        drop(seg);
        let t2 = Instant::now();
        t.engine += (t2 - t1).as_secs_f64();
        let decoded = scored
            .decode()?
            .into_iter()
            .map(|s| (s.mask, s.logits))
            .collect();
        t.post += t2.elapsed().as_secs_f64();
        Ok(decoded)
    }
}

/// A model opened for inference; see the Python class `segtool.Segmenter`.
#[pyclass(module = "segtool._segtool", frozen)]
pub struct Segmenter {
    pub(crate) model: Arc<Model>,
    pub(crate) path: PathBuf,
    pub(crate) engine: String,
    pub(crate) provider: String,
    fallbacks: Vec<(String, String)>,
    engine_choice: Option<String>,
    /// What it was opened with, as the runtime reports it.
    options: SegmenterOptions,
    input_size: Option<(i64, i64)>,
    protocol: Option<&'static str>,
}

/// `(kind, message)` per fallback taken: the package's own ONNX Runtime library search
/// (`search`) replaces the runtime's report of it.
fn fallback_rows(
    seg: &segtool_runtime::Segmenter,
    search: Option<&segtool_runtime::Fallback>,
) -> Vec<(String, String)> {
    let runtime_fallbacks = seg.fallbacks().iter().filter(|f| {
        search.is_none() || !matches!(f, segtool_runtime::Fallback::OrtLibraryMissing { .. })
    });
    search
        .into_iter()
        .chain(runtime_fallbacks)
        .map(|f| (f.kind().to_string(), f.to_string()))
        .collect()
}

#[pymethods]
impl Segmenter {
    #[new]
    #[pyo3(signature = (path, engine = "auto", providers = vec!["cpu".to_string()], threads = None,
        ort_libraries = vec![], device = "CPU", precision = "f32", hint = "latency", streams = None,
        openvino_library = None, strict = false, protocol = None, base_size = None, scales = None,
        flip = false, mode = None, crop = None, stride = None, batch_size = 1, fixed_size = None,
        card = None, logits = false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        engine: &str,
        providers: Vec<String>,
        threads: Option<usize>,
        ort_libraries: Vec<(String, String)>,
        device: &str,
        precision: &str,
        hint: &str,
        streams: Option<usize>,
        openvino_library: Option<PathBuf>,
        strict: bool,
        protocol: Option<&str>,
        base_size: Option<usize>,
        scales: Option<Vec<f64>>,
        flip: bool,
        mode: Option<&str>,
        crop: Option<usize>,
        stride: Option<usize>,
        batch_size: usize,
        fixed_size: Option<(usize, usize)>,
        card: Option<PathBuf>,
        logits: bool,
    ) -> PyResult<Self> {
        let options = segmenter_options(
            engine, providers, device, precision, hint, streams, threads, card, strict, fixed_size,
            logits,
        )?;
        let accuracy = accuracy_options(
            protocol, base_size, scales, flip, mode, crop, stride, batch_size,
        )?;
        let (seg, search) = py
            .detach(|| open(&path, &options, openvino_library, &ort_libraries))
            .map_err(errors::runtime)?;
        let fallbacks = fallback_rows(&seg, search.as_ref());
        let seg = match accuracy.clone() {
            Some(opts) => seg.with_accuracy(opts).map_err(errors::runtime)?,
            None => seg,
        };
        let contract = seg.contract();
        let input_size = seg.graph_size().map(|(h, w)| (h as i64, w as i64));
        let spec = seg.spec().clone();
        Ok(Self {
            engine: seg.engine().name().to_string(),
            provider: seg.engine().provider().to_string(),
            engine_choice: seg.engine_choice().map(str::to_string),
            options: seg.options().clone(),
            protocol: accuracy.as_ref().map(|o| o.protocol.name()),
            model: Arc::new(Model {
                seg: Mutex::new(seg),
                spec,
                contract,
                accuracy,
            }),
            path,
            fallbacks,
            input_size,
        })
    }

    /// Segments one HxWx3 uint8 image, read in place.
    #[pyo3(signature = (img, color = "rgb", scores = None))]
    fn segment(
        &self,
        py: Python<'_>,
        img: &Bound<'_, PyAny>,
        color: &str,
        scores: Option<bool>,
    ) -> PyResult<Py<Segmentation>> {
        let color = Color::parse(color)?;
        let scores = self.scores(scores)?;
        let arr = pixels::image_arg(img)?;
        let view = arr.as_array();
        let mut t = Timings::default();
        let model = &self.model;
        let mut out = py
            .detach(|| model.run(std::slice::from_ref(&view), color, scores, &mut t))
            .map_err(errors::runtime)?;
        let (mask, s) = out.pop().expect("one result per image");
        segmentation(py, mask, s, Some(t))
    }

    /// Segments a list of images: one engine call per distinct size (one for a batch of
    /// same-size frames). Results in input order; Ctrl-C interrupts the wait.
    #[pyo3(signature = (imgs, color = "rgb", scores = None))]
    fn segment_batch(
        &self,
        py: Python<'_>,
        imgs: &Bound<'_, PyList>,
        color: &str,
        scores: Option<bool>,
    ) -> PyResult<Vec<Py<Segmentation>>> {
        let color = Color::parse(color)?;
        let scores = self.scores(scores)?;
        let mut owned: Vec<ndarray::Array3<u8>> = Vec::with_capacity(imgs.len());
        for (i, obj) in imgs.iter().enumerate() {
            let arr = pixels::image_arg(&obj)
                .map_err(|e| errors::InputError::new_err(format!("image {i}: {}", e.value(py))))?;
            // The batch outlives this call's borrow (it runs on its own thread so that a
            // Ctrl-C need not wait for it): one copy, in the layout handed in.
            owned.push(arr.as_array().to_owned());
        }
        if owned.is_empty() {
            return Ok(Vec::new());
        }
        // The runtime's pipeline groups the batch by size (one engine run per size).
        let model = self.model.clone();
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("segtool-batch-call".into())
            .spawn(move || {
                let mut t = Timings::default();
                let views: Vec<ArrayView3<u8>> = owned.iter().map(|a| a.view()).collect();
                let _ = tx.send(model.run(&views, color, scores, &mut t).map(|r| (r, t)));
            })
            .map_err(|e| {
                errors::EngineError::new_err(format!("cannot start the batch thread: {e}"))
            })?;
        let (results, t) = wait_interruptibly(py, rx)?.map_err(errors::runtime)?;
        results
            .into_iter()
            .map(|(mask, s)| segmentation(py, mask, s, Some(t)))
            .collect()
    }

    /// classes, palette, mean, std, input_size, protocol, contract, arch, backbone.
    #[getter]
    fn spec<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        let spec = &self.model.spec;
        d.set_item("classes", spec.classes.clone())?;
        d.set_item(
            "palette",
            spec.palette
                .iter()
                .map(|p| (p[0], p[1], p[2]))
                .collect::<Vec<_>>(),
        )?;
        d.set_item("mean", spec.mean.to_vec())?;
        d.set_item("std", spec.std.to_vec())?;
        d.set_item("input_size", self.input_size)?;
        d.set_item("protocol", self.protocol)?;
        d.set_item("input", format!("{:?}", self.model.contract.input))?;
        d.set_item("output", format!("{:?}", self.model.contract.output))?;
        d.set_item("arch", spec.arch.clone())?;
        d.set_item("backbone", spec.backbone_name.clone())?;
        Ok(d)
    }

    #[getter]
    fn engine(&self) -> &str {
        &self.engine
    }

    #[getter]
    fn provider(&self) -> &str {
        &self.provider
    }

    /// `(kind, message)` per fallback taken while opening.
    #[getter]
    fn fallbacks(&self) -> Vec<(String, String)> {
        self.fallbacks.clone()
    }

    /// Which engine `engine="auto"` chose and why; `None` when an engine was named.
    #[getter]
    fn engine_choice(&self) -> Option<String> {
        self.engine_choice.clone()
    }

    /// What it was opened with, keyed by the runtime's option names (`engine`,
    /// `providers`, ..., `logits`), defaults filled in; a fresh dict per call.
    #[getter]
    fn options<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let json = serde_json::to_string(&self.options)
            .map_err(|e| errors::EngineError::new_err(format!("the options as JSON: {e}")))?;
        py.import("json")?.call_method1("loads", (json,))
    }

    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    fn __repr__(&self) -> String {
        format!(
            "Segmenter({:?}, engine={:?}, provider={:?}, classes={})",
            self.path.display().to_string(),
            self.engine,
            self.provider,
            self.model.spec.classes.len()
        )
    }
}

impl Segmenter {
    /// Whether a call returns scores: as asked, else the `logits` option. Asked of a
    /// model without scores (`--argmax`) it is an error; by the option, `None` scores, as
    /// the runtime's `logits` means.
    fn scores(&self, asked: Option<bool>) -> PyResult<bool> {
        let has_scores = self.model.contract.output != segtool_runtime::OutputKind::Mask
            || self.model.accuracy.is_some();
        match asked {
            Some(true) if !has_scores => Err(errors::input(
                "scores=False for a model exported with --argmax (it outputs class maps, no scores)",
                format!("scores=True with {}", self.path.display()),
            )),
            Some(asked) => Ok(asked),
            None => Ok(self.options.logits && has_scores),
        }
    }
}

/// Waits for `rx` without the GIL, checking for signals every [`SIGNAL_POLL`]: a Ctrl-C
/// raises `KeyboardInterrupt` at once (the work itself finishes in the background).
pub(crate) fn wait_interruptibly<T: Send>(py: Python<'_>, rx: mpsc::Receiver<T>) -> PyResult<T> {
    let rx = Mutex::new(rx);
    loop {
        match py.detach(|| lock(&rx).recv_timeout(SIGNAL_POLL)) {
            Ok(v) => return Ok(v),
            Err(mpsc::RecvTimeoutError::Timeout) => py.check_signals()?,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(errors::EngineError::new_err(
                    "the inference thread went away without a result",
                ))
            }
        }
    }
}
