//! The pure-Rust engine: tract-onnx, no native library at all.
//!
//! Exported models have dynamic `batch`/`height`/`width` dims. tract optimises best (and
//! some ops only type-check) with concrete shapes, so the inference model is kept as
//! loaded and an optimised plan is built per input shape `(N, H, W)`, then cached: video
//! and batch users see one shape over and over, the first frame pays the optimisation.
//!
//! Threads: each engine owns one tract executor (a private rayon pool of
//! [`TractOptions::threads`] threads, default all cores) that its runs execute under (a
//! per-run scope, `multithread_tract_scope`, not tract's process-wide default), so several
//! engines never share or overwrite each other's pool. With the default thread count, an
//! input smaller than [`SMALL_INPUT_PIXELS`] per image is split along the batch instead,
//! each part single-threaded on a thread of its own: such convolutions are too small to
//! split, and the pool's hand-offs cost more than they save (the tiny demo DANet at 96x96,
//! batch 8, on 2 AVX-512 cores: 150 img/s on one thread, 110 with the pool; at 256x256 the
//! pool wins, 24.6 against 17.6 img/s at batch 1).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ndarray::Ix4;
use tract_onnx::prelude::multithread::{self, Executor};
use tract_onnx::prelude::*;
use tract_onnx::tract_hir::infer::Factoid;

use crate::engines::{
    check_input_shape, check_mask_shape, check_nhwc_shape, check_output_shape, ensure_exists,
    mask_to_u16, Engine,
};
use crate::error::{Result, RuntimeError};
use crate::engines::io_contract::{EngineInput, EngineOutput, InputLayout, IoContract, OutputKind};
pub use crate::engines::tract_options::TractOptions;
use segtool_onnx::ModelFileError;

type Plan = Arc<TypedRunnableModel>;

/// Below this many pixels per image, an engine on the default thread count splits the
/// batch across its threads, each part single-threaded, instead of splitting each
/// convolution (measured crossover on 2 cores: about 128 x 128).
pub const SMALL_INPUT_PIXELS: usize = 128 * 128;

/// Most plans kept at once; beyond it the cache is cleared (shapes rarely vary that much,
/// and an unbounded cache would grow with every odd image size).
const MAX_PLANS: usize = 8;

/// tract engine for one model file.
///
/// # Example
///
/// ```no_run
/// use segtool_runtime::expert::{load_spec, normalise, run_logits, TractEngine};
/// use segtool_runtime::TractOptions;
/// let mut engine = TractEngine::open_with("model.onnx", &TractOptions::new().with_threads(2))?;
/// let spec = load_spec("model.onnx")?;
/// let x = normalise(&image::RgbImage::new(640, 480), &spec);
/// // The first run of each input size optimises a plan for it; later ones reuse it.
/// let logits = run_logits(&mut engine, x.view())?;
/// assert_eq!(logits.dim().1, spec.num_classes());
/// # Ok::<(), segtool_runtime::RuntimeError>(())
/// ```
pub struct TractEngine {
    path: PathBuf,
    /// The card's input and output names, applied on every load.
    io_names: Option<(String, String)>,
    /// The loaded graph, until the first plan is built from it. The plan holds its own
    /// (packed) copy of every weight, so keeping this one would double the weights in
    /// memory; a later new shape reads the file again (about a second, against the
    /// several seconds of optimisation a plan takes anyway).
    model: Option<InferenceModel>,
    /// This engine's executor, installed for each run of its plans.
    executor: Executor,
    threads: usize,
    /// The thread count was chosen by the caller: used for every input size.
    threads_pinned: bool,
    /// Declared input dims, `None` where dynamic.
    declared: Vec<Option<usize>>,
    /// From the graph's declared input element type (`None`: not declared).
    input: Option<InputLayout>,
    /// From the graph's declared output element type (`None`: not declared; the output's
    /// actual type decides at run time).
    output: Option<OutputKind>,
    plans: HashMap<(InputLayout, usize, usize, usize), Plan>,
}

impl TractEngine {
    /// Loads `path` with the default options (all cores). A missing file, garbage or
    /// truncation fails here, naming the file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, &TractOptions::default())
    }

    /// Loads `path` to run as `options` say.
    pub fn open_with(path: impl AsRef<Path>, options: &TractOptions) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        ensure_exists(&path)?;
        let model = load(&path, options.io_names.as_ref())?;
        let fact = model.input_fact(0).map_err(|e| {
            RuntimeError::File(ModelFileError::Invalid {
                path: path.clone(),
                message: format!("model has no input: {e:#}"),
            })
        })?;
        let mut declared: Vec<Option<usize>> = fact
            .shape
            .dims()
            .map(|d| match d.concretize() {
                Some(TDim::Val(v)) => usize::try_from(v).ok(),
                _ => None,
            })
            .collect();
        // A model without shape info (rare) still takes NCHW.
        declared.resize(4, None);
        let input = fact.datum_type.concretize().map(|t| match t {
            DatumType::U8 => InputLayout::NhwcU8,
            _ => InputLayout::NchwF32,
        });
        let output = model
            .output_fact(0)
            .ok()
            .and_then(|f| f.datum_type.concretize())
            .map(|t| match t {
                DatumType::U8 | DatumType::I32 | DatumType::I64 => OutputKind::Mask,
                _ => OutputKind::Logits,
            });
        let threads = options.resolved_threads();
        let executor = executor_for(threads)?;
        Ok(Self {
            path,
            io_names: options.io_names.clone(),
            model: Some(model),
            executor,
            threads,
            threads_pinned: options.threads.is_some(),
            declared,
            input,
            output,
            plans: HashMap::new(),
        })
    }

    /// The model file this engine was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Threads this engine's runs use.
    pub fn threads(&self) -> usize {
        self.threads
    }

    fn plan(&mut self, layout: InputLayout, n: usize, h: usize, w: usize) -> Result<Plan> {
        if let Some(plan) = self.plans.get(&(layout, n, h, w)) {
            return Ok(plan.clone());
        }
        let fact = match layout {
            InputLayout::NchwF32 => f32::fact([n, 3, h, w]),
            InputLayout::NhwcU8 => u8::fact([n, h, w, 3]),
        };
        let model = match self.model.take() {
            Some(model) => model,
            None => load(&self.path, self.io_names.as_ref())?,
        };
        let plan = model
            .with_input_fact(0, fact.into())
            .and_then(|m| m.into_optimized())
            .and_then(|m| {
                m.into_runnable_with_options(&RunOptions {
                    // Installed per run instead (TractEngine::execute).
                    executor: None,
                    // tract 0.23.9's memory-minimising order runs each of PAM's query
                    // blocks up to its value product, then all the products at the end,
                    // so every block's attention is alive at once (1.7 GB peak at
                    // 1024x1024, the plain order 0.9 GB; same speed).
                    skip_order_opt_ram: true,
                    ..RunOptions::default()
                })
            })
            .map_err(|e| {
                RuntimeError::Tract(format!(
                    "preparing {} for a batch of {n} {w}x{h} ({}): {e:#}",
                    self.path.display(),
                    match layout {
                        InputLayout::NchwF32 => "f32 NCHW",
                        InputLayout::NhwcU8 => "uint8 NHWC",
                    }
                ))
            })?;
        if self.plans.len() >= MAX_PLANS {
            self.plans.clear();
        }
        self.plans.insert((layout, n, h, w), plan.clone());
        Ok(plan)
    }

    /// Runs one batch. A large input runs as one plan on the pool (tract splits its
    /// convolutions across the threads). A small one, on the default thread count, is split
    /// along the batch instead: one part per thread, each run single-threaded on a thread
    /// of its own, outputs stacked in order. Its convolutions are too small to split (the
    /// hand-offs cost more than they save), so the threads take whole images instead.
    fn execute(
        &mut self,
        layout: InputLayout,
        tensor: Tensor,
        (n, h, w): (usize, usize, usize),
    ) -> Result<Tensor> {
        let small = !self.threads_pinned && h * w < SMALL_INPUT_PIXELS;
        let parts = if small { self.threads.min(n) } else { 1 };
        let path = self.path.clone();
        let failed =
            move |e: TractError| RuntimeError::Tract(format!("running {}: {e:#}", path.display()));
        if parts <= 1 {
            let plan = self.plan(layout, n, h, w)?;
            let executor = if small {
                Executor::SingleThread
            } else {
                self.executor.clone()
            };
            return multithread::multithread_tract_scope(executor, || run_plan(&plan, tensor))
                .map_err(&failed);
        }
        let sizes: Vec<usize> = (0..parts)
            .map(|i| n / parts + usize::from(i < n % parts))
            .collect();
        let mut work = Vec::with_capacity(parts);
        let mut start = 0;
        for &size in &sizes {
            let part = tensor.slice(0, start, start + size).map_err(&failed)?;
            work.push((self.plan(layout, size, h, w)?, part));
            start += size;
        }
        let outputs: Vec<TractResult<Tensor>> = std::thread::scope(|scope| {
            let workers: Vec<_> = work
                .into_iter()
                .map(|(plan, part)| {
                    scope.spawn(move || {
                        multithread::multithread_tract_scope(Executor::SingleThread, || {
                            run_plan(&plan, part)
                        })
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| {
                    w.join()
                        .unwrap_or_else(|_| Err(TractError::msg("a tract worker panicked")))
                })
                .collect()
        });
        let outputs = outputs
            .into_iter()
            .collect::<TractResult<Vec<_>>>()
            .map_err(&failed)?;
        Tensor::stack_tensors(0, &outputs).map_err(&failed)
    }
}

/// The plan's first output for `input`.
fn run_plan(plan: &Plan, input: Tensor) -> TractResult<Tensor> {
    let mut outputs = plan.run(tvec!(input.into()))?;
    Ok(outputs.remove(0).into_tensor())
}

/// The ONNX graph of `path`, weights included, with the card's input and output (`io_names`)
/// selected; errors name the file. Every load applies the names: a plan for a new shape
/// reloads the file, and without them it would answer the graph's first output. The
/// graph's `value_info` shape hints are ignored: tract takes them as hard facts and cannot
/// unify their named symbols (`batch`, `height`) with the concrete sizes a plan is built
/// for (the `ort` export writes them for ONNX Runtime's fusions).
fn load(path: &Path, io_names: Option<&(String, String)>) -> Result<InferenceModel> {
    let invalid = |message: String| {
        RuntimeError::File(ModelFileError::Invalid {
            path: path.to_path_buf(),
            message,
        })
    };
    let onnx = tract_onnx::onnx().with_ignore_value_info(true);
    let model = onnx
        .model_for_path(path)
        .map_err(|e| invalid(format!("{e:#}")))?;
    let Some((input, output)) = io_names else {
        return Ok(model);
    };
    model
        .with_input_names([input])
        .and_then(|m| m.with_outputs_by_name([output]))
        .map_err(|e| {
            invalid(format!(
                "the card's input {input:?} / output {output:?}: {e:#}"
            ))
        })
}

/// One thread: tract's single-thread executor (no pool); more: a private rayon pool.
fn executor_for(threads: usize) -> Result<Executor> {
    if threads <= 1 {
        return Ok(Executor::SingleThread);
    }
    // tract panics when the pool cannot be built (no threads left): report it instead.
    std::panic::catch_unwind(|| Executor::multithread_with_name(threads, "segtool-tract"))
        .map_err(|_| RuntimeError::Tract(format!("cannot start a {threads}-thread pool")))
}

impl Engine for TractEngine {
    fn name(&self) -> &str {
        "tract"
    }

    fn provider(&self) -> &str {
        "cpu"
    }

    fn io_contract(&self) -> Option<IoContract> {
        Some(IoContract {
            input: self.input?,
            output: self.output?,
        })
    }

    fn run(&mut self, input: EngineInput<'_>) -> Result<EngineOutput> {
        let (n, h, w) = input.dims();
        let given = match input {
            EngineInput::NchwF32(_) => InputLayout::NchwF32,
            EngineInput::NhwcU8(_) => InputLayout::NhwcU8,
        };
        if self.input.is_some_and(|declared| declared != given) {
            return Err(RuntimeError::InputShape {
                expected: format!(
                    "{} input ({})",
                    match given {
                        InputLayout::NchwF32 => "uint8 NHWC RGB (a --preprocess export)",
                        InputLayout::NhwcU8 => "f32 NCHW normalised",
                    },
                    self.path.display()
                ),
                got: match given {
                    InputLayout::NchwF32 => "f32 NCHW".into(),
                    InputLayout::NhwcU8 => "uint8 NHWC".into(),
                },
            });
        }
        let tensor: Tensor = match input {
            EngineInput::NchwF32(x) => {
                check_input_shape(x.shape(), &self.declared)?;
                x.to_owned().into_dyn().into()
            }
            EngineInput::NhwcU8(x) => {
                check_nhwc_shape(x.shape(), &self.declared)?;
                x.to_owned().into_dyn().into()
            }
        };
        let out = &self.execute(given, tensor, (n, h, w))?;
        match out.datum_type() {
            DatumType::U8 | DatumType::I32 | DatumType::I64 => {
                let mask = match out.datum_type() {
                    DatumType::U8 => {
                        mask_to_u16(out.to_plain_array_view::<u8>().expect("u8 tensor"))?
                    }
                    DatumType::I32 => {
                        mask_to_u16(out.to_plain_array_view::<i32>().expect("i32 tensor"))?
                    }
                    _ => mask_to_u16(out.to_plain_array_view::<i64>().expect("i64 tensor"))?,
                };
                check_mask_shape(n, mask.shape())?;
                Ok(EngineOutput::Mask(mask))
            }
            _ => {
                let logits =
                    out.to_plain_array_view::<f32>()
                        .map_err(|e| RuntimeError::OutputShape {
                            expected: "f32 logits or a uint8/int64 class map".into(),
                            got: format!("{e:#}"),
                        })?;
                check_output_shape(&[n], logits.shape())?;
                Ok(EngineOutput::Logits(
                    logits
                        .into_dimensionality::<Ix4>()
                        .expect("rank checked")
                        .to_owned(),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array4;
    use segtool_testkit::{tiny_model_bytes, tiny_spec};

    #[test]
    fn truncated_or_garbage_file_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("broken.onnx");
        std::fs::write(&path, [0x0a, 0xff, 0xff, 0xff, 0x0f, 1, 2, 3]).unwrap();
        let err = TractEngine::open(&path)
            .err()
            .expect("garbage must not load");
        assert!(
            matches!(err, RuntimeError::File(ModelFileError::Invalid { .. })),
            "{err}"
        );
        assert!(err.to_string().contains("broken.onnx"), "{err}");

        let full = tiny_model_bytes(&tiny_spec(2), &[[1.0; 3], [0.0; 3]], &[0.0; 2]);
        std::fs::write(&path, &full[..full.len() - 40]).unwrap();
        let err = TractEngine::open(&path)
            .err()
            .expect("truncated file must not load");
        assert!(
            matches!(err, RuntimeError::File(ModelFileError::Invalid { .. })),
            "{err}"
        );

        let err = TractEngine::open(dir.path().join("missing.onnx"))
            .err()
            .unwrap();
        assert!(
            matches!(err, RuntimeError::File(ModelFileError::NotFound { .. })),
            "{err}"
        );
    }

    #[test]
    fn runs_tiny_conv_model_with_dynamic_shapes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tiny.onnx");
        let (w, b) = ([[1.0, 0.0, 0.0], [0.0, 1.0, -1.0]], [0.5, 0.0]);
        std::fs::write(&path, tiny_model_bytes(&tiny_spec(2), &w, &b)).unwrap();
        let mut engine = TractEngine::open(&path).unwrap();
        for (n, h, wd) in [(1, 4, 5), (2, 3, 3), (1, 4, 5)] {
            let x = Array4::from_shape_fn((n, 3, h, wd), |(i, c, y, x)| {
                (i + c * 2 + y + x) as f32 * 0.1
            });
            let out = crate::engines::run_logits(&mut engine, x.view()).unwrap();
            assert_eq!(out.shape(), &[n, 2, h, wd]);
            let (i, y, xx) = (n - 1, h - 1, wd - 1);
            let expect0 = x[[i, 0, y, xx]] + 0.5;
            let expect1 = x[[i, 1, y, xx]] - x[[i, 2, y, xx]];
            assert!((out[[i, 0, y, xx]] - expect0).abs() < 1e-5);
            assert!((out[[i, 1, y, xx]] - expect1).abs() < 1e-5);
        }
        assert_eq!(engine.plans.len(), 2);
        let err =
            crate::engines::run_logits(&mut engine, Array4::zeros((1, 4, 2, 2)).view()).unwrap_err();
        assert!(matches!(err, RuntimeError::InputShape { .. }), "{err}");
    }

    #[test]
    fn two_threads_match_one_thread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tiny.onnx");
        let (w, b) = ([[0.3, -1.2, 0.7], [0.9, 0.1, -0.4]], [0.25, -0.5]);
        std::fs::write(&path, tiny_model_bytes(&tiny_spec(2), &w, &b)).unwrap();
        let opts = |n| TractOptions::new().with_threads(n);
        let mut one = TractEngine::open_with(&path, &opts(1)).unwrap();
        let mut two = TractEngine::open_with(&path, &opts(2)).unwrap();
        assert_eq!((one.threads(), two.threads()), (1, 2));
        assert!(TractEngine::open(&path).unwrap().threads() >= 1);
        // Large enough (3 x 240 x 320 = 230k elements) to pass tract's threading gates.
        let x = Array4::from_shape_fn((1, 3, 240, 320), |(_, c, y, x)| {
            ((c * 31 + y * 7 + x * 3) % 101) as f32 / 50.0 - 1.0
        });
        let run = |e: &mut TractEngine| crate::engines::run_logits(e, x.view()).unwrap();
        let (a, b) = (run(&mut one), run(&mut two));
        assert_eq!(a.shape(), b.shape());
        let max = a
            .iter()
            .zip(&b)
            .map(|(p, q)| (p - q).abs())
            .fold(0.0f32, f32::max);
        assert!(max <= 1e-5, "1 vs 2 threads differ by {max}");
    }

    /// A small input on the default thread count runs as one single-threaded part per
    /// thread: the same per-image computation as one thread, so the same bits, in order,
    /// for an odd batch too (parts of 2 and 1 on two threads).
    #[test]
    fn small_batches_split_across_threads_equal_one_thread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tiny.onnx");
        let (w, b) = ([[0.3, -1.2, 0.7], [0.9, 0.1, -0.4]], [0.25, -0.5]);
        std::fs::write(&path, tiny_model_bytes(&tiny_spec(2), &w, &b)).unwrap();
        let mut split = TractEngine::open_with(&path, &TractOptions::new()).unwrap();
        let mut one = TractEngine::open_with(&path, &TractOptions::new().with_threads(1)).unwrap();
        let x = Array4::from_shape_fn((3, 3, 40, 24), |(n, c, y, x)| {
            ((n * 13 + c * 31 + y * 7 + x * 3) % 101) as f32 / 50.0 - 1.0
        });
        let a = crate::engines::run_logits(&mut split, x.view()).unwrap();
        let b = crate::engines::run_logits(&mut one, x.view()).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn thread_option_zero_means_default() {
        assert_eq!(TractOptions::new().with_threads(0).threads, None);
        assert_eq!(TractOptions::new().with_threads(3).resolved_threads(), 3);
    }
}
