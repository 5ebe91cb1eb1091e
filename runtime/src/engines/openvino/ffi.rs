//! The part of OpenVINO's C API the engine uses, as owned Rust values over `openvino-sys`
//! (Intel's bindings, runtime linking): the core, a model, a compiled model with the
//! properties it was compiled with, an infer request, host tensors and the per-node
//! profiling rows.
//!
//! Why not the `openvino` crate's safe layer: in 0.11 it compiles without per-model
//! properties (so the precision, threads and streams of one model would stick to the
//! core), offers no profiling rows (which carry the precision each node ran in), and
//! does not free the strings the C API returns.
//!
//! Every call's status is checked; a failure is an `Err` with OpenVINO's own message.

use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_void};
use std::path::Path;
use std::ptr;

use openvino_sys as sys;

/// A failed call: what was called and OpenVINO's message.
pub(super) type CallResult<T> = std::result::Result<T, String>;

fn check(status: sys::ov_status_e, what: &str) -> CallResult<()> {
    if status == sys::ov_status_e::OK {
        return Ok(());
    }
    // A heap copy of the thread's last message: freed with ov_free.
    let message = unsafe { take_string(sys::ov_get_last_err_msg() as *mut c_char) };
    // OpenVINO's messages start with a "Exception from src/...cpp:NNN:" line.
    let message: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("Exception from"))
        .collect();
    Err(format!("{what}: {status:?}: {}", message.join(" ")))
}

/// Copies a string the C API allocated, and frees it.
unsafe fn take_string(p: *mut c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    let s = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    unsafe { sys::ov_free(p) };
    s
}

fn c_string(s: &str) -> CallResult<CString> {
    CString::new(s).map_err(|_| format!("{s:?} holds a NUL byte"))
}

/// Loads the C library (process-wide, once per process: callers serialise) and returns
/// OpenVINO's build number, e.g. `2026.4.1-22982-e213a147257`.
pub(super) fn load(library: &Path) -> CallResult<String> {
    sys::library::load_from(library).map_err(|e| format!("loading {}: {e}", library.display()))?;
    version()
}

/// OpenVINO's build number (the library must be loaded).
pub(super) fn version() -> CallResult<String> {
    let mut v = sys::ov_version_t {
        buildNumber: ptr::null(),
        description: ptr::null(),
    };
    check(
        unsafe { sys::ov_get_openvino_version(&mut v) },
        "ov_get_openvino_version",
    )?;
    let build = unsafe { CStr::from_ptr(v.buildNumber) }
        .to_string_lossy()
        .into_owned();
    unsafe { sys::ov_version_free(&mut v) };
    Ok(build)
}

macro_rules! owned {
    ($name:ident, $raw:ty, $free:path) => {
        pub(super) struct $name(*mut $raw);
        impl Drop for $name {
            fn drop(&mut self) {
                unsafe { $free(self.0) }
            }
        }
        // OpenVINO's objects are thread-safe to move; each engine uses its own from one
        // thread at a time (`Engine::run` takes `&mut self`).
        unsafe impl Send for $name {}
    };
}

owned!(Core, sys::ov_core_t, sys::ov_core_free);
owned!(Model, sys::ov_model_t, sys::ov_model_free);
owned!(
    CompiledModel,
    sys::ov_compiled_model_t,
    sys::ov_compiled_model_free
);
owned!(
    InferRequest,
    sys::ov_infer_request_t,
    sys::ov_infer_request_free
);
owned!(Tensor, sys::ov_tensor_t, sys::ov_tensor_free);

impl Core {
    pub(super) fn new() -> CallResult<Self> {
        let mut p = ptr::null_mut();
        check(unsafe { sys::ov_core_create(&mut p) }, "ov_core_create")?;
        Ok(Core(p))
    }

    /// The devices OpenVINO finds on this machine: `CPU`, `GPU.0`, `NPU`, ...
    pub(super) fn devices(&self) -> CallResult<Vec<String>> {
        let mut d = sys::ov_available_devices_t {
            devices: ptr::null_mut(),
            size: 0,
        };
        check(
            unsafe { sys::ov_core_get_available_devices(self.0, &mut d) },
            "ov_core_get_available_devices",
        )?;
        let names = (0..d.size)
            .map(|i| {
                unsafe { CStr::from_ptr(*d.devices.add(i)) }
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        unsafe { sys::ov_available_devices_free(&mut d) };
        Ok(names)
    }

    pub(super) fn read_model(&self, path: &Path) -> CallResult<Model> {
        let p = c_string(&path.to_string_lossy())?;
        let mut m = ptr::null_mut();
        // No weights path: an ONNX file holds its weights (or names its external data).
        check(
            unsafe { sys::ov_core_read_model(self.0, p.as_ptr(), ptr::null(), &mut m) },
            "ov_core_read_model",
        )?;
        Ok(Model(m))
    }

    /// Compiles `model` for `device` with these properties (for this model only).
    pub(super) fn compile(
        &self,
        model: &Model,
        device: &str,
        properties: &[(&str, String)],
    ) -> CallResult<CompiledModel> {
        let device = c_string(device)?;
        let owned = properties
            .iter()
            .map(|(k, v)| Ok((c_string(k)?, c_string(v)?)))
            .collect::<CallResult<Vec<_>>>()?;
        let pairs: Vec<sys::ov_property_t> = owned
            .iter()
            .map(|(k, v)| sys::ov_property_t {
                key: k.as_ptr(),
                value: v.as_ptr() as *const c_void,
            })
            .collect();
        let mut cm = ptr::null_mut();
        let status = unsafe {
            sys::ov_core_compile_model_props(
                self.0,
                model.0,
                device.as_ptr(),
                pairs.len(),
                pairs.as_ptr(),
                &mut cm,
            )
        };
        check(status, "compiling the model")?;
        Ok(CompiledModel(cm))
    }
}

impl CompiledModel {
    /// A property as the compiled model reports it (`EXECUTION_DEVICES`, ...).
    pub(super) fn property(&self, key: &str) -> CallResult<String> {
        let k = c_string(key)?;
        let mut v = ptr::null_mut();
        check(
            unsafe { sys::ov_compiled_model_get_property(self.0, k.as_ptr(), &mut v) },
            key,
        )?;
        Ok(unsafe { take_string(v) })
    }

    pub(super) fn request(&self) -> CallResult<InferRequest> {
        let mut r = ptr::null_mut();
        check(
            unsafe { sys::ov_compiled_model_create_infer_request(self.0, &mut r) },
            "ov_compiled_model_create_infer_request",
        )?;
        Ok(InferRequest(r))
    }
}

/// One node of the compiled graph as the plugin ran it.
pub(super) struct NodeRow {
    pub(super) name: String,
    /// The kernel, e.g. `brgconv_avx512_amx_bf16`: its last word is the precision the
    /// node ran in (the runtime model's `runtimePrecision`), `undef` for fused nodes.
    pub(super) exec_type: String,
}

impl InferRequest {
    /// Sets the tensor named `name` (the data stays the caller's; see [`Tensor::borrowed`]).
    pub(super) fn set(&mut self, name: &CStr, tensor: &Tensor) -> CallResult<()> {
        check(
            unsafe { sys::ov_infer_request_set_tensor(self.0, name.as_ptr(), tensor.0) },
            "setting the input",
        )
    }

    pub(super) fn infer(&mut self) -> CallResult<()> {
        check(unsafe { sys::ov_infer_request_infer(self.0) }, "inference")
    }

    pub(super) fn get(&self, name: &CStr) -> CallResult<Tensor> {
        let mut t = ptr::null_mut();
        check(
            unsafe { sys::ov_infer_request_get_tensor(self.0, name.as_ptr(), &mut t) },
            "reading the output",
        )?;
        Ok(Tensor(t))
    }

    /// The compiled graph's nodes with the kernel each ran (filled in after one run).
    pub(super) fn nodes(&self) -> CallResult<Vec<NodeRow>> {
        let mut list = sys::ov_profiling_info_list_t {
            profiling_infos: ptr::null_mut(),
            size: 0,
        };
        check(
            unsafe { sys::ov_infer_request_get_profiling_info(self.0, &mut list) },
            "ov_infer_request_get_profiling_info",
        )?;
        let text = |p: *const c_char| match p.is_null() {
            true => String::new(),
            false => unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned(),
        };
        let rows = (0..list.size)
            .map(|i| {
                let row = unsafe { &*list.profiling_infos.add(i) };
                NodeRow {
                    name: text(row.node_name),
                    exec_type: text(row.exec_type),
                }
            })
            .collect();
        unsafe { sys::ov_profiling_info_list_free(&mut list) };
        Ok(rows)
    }
}

/// Element types the engine feeds and reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Element {
    F32,
    U8,
    I32,
    I64,
}

impl Element {
    fn raw(self) -> sys::ov_element_type_e {
        match self {
            Element::F32 => sys::ov_element_type_e::F32,
            Element::U8 => sys::ov_element_type_e::U8,
            Element::I32 => sys::ov_element_type_e::I32,
            Element::I64 => sys::ov_element_type_e::I64,
        }
    }
}

impl Tensor {
    /// A tensor over the caller's memory, without a copy.
    ///
    /// # Safety
    /// `data` must hold `dims`' product of `element`s and outlive every use of the tensor
    /// (the engine drops it, and the request's reference, before `run` returns). OpenVINO
    /// reads input tensors and never writes them, so shared data may be passed.
    pub(super) unsafe fn borrowed(
        element: Element,
        dims: &[usize],
        data: *const c_void,
    ) -> CallResult<Self> {
        let dims: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        let mut shape = sys::ov_shape_t {
            rank: 0,
            dims: ptr::null_mut(),
        };
        check(
            unsafe { sys::ov_shape_create(dims.len() as i64, dims.as_ptr(), &mut shape) },
            "ov_shape_create",
        )?;
        let mut t = ptr::null_mut();
        let status = unsafe {
            sys::ov_tensor_create_from_host_ptr(element.raw(), shape, data as *mut c_void, &mut t)
        };
        unsafe { sys::ov_shape_free(&mut shape) };
        check(status, "ov_tensor_create_from_host_ptr")?;
        Ok(Tensor(t))
    }

    pub(super) fn dims(&self) -> CallResult<Vec<usize>> {
        let mut s = sys::ov_shape_t {
            rank: 0,
            dims: ptr::null_mut(),
        };
        check(
            unsafe { sys::ov_tensor_get_shape(self.0, &mut s) },
            "ov_tensor_get_shape",
        )?;
        let dims = unsafe { std::slice::from_raw_parts(s.dims, s.rank as usize) }
            .iter()
            .map(|&d| d as usize)
            .collect();
        unsafe { sys::ov_shape_free(&mut s) };
        Ok(dims)
    }

    pub(super) fn element(&self) -> CallResult<Option<Element>> {
        let mut e = sys::ov_element_type_e::DYNAMIC;
        check(
            unsafe { sys::ov_tensor_get_element_type(self.0, &mut e) },
            "ov_tensor_get_element_type",
        )?;
        Ok([Element::F32, Element::U8, Element::I32, Element::I64]
            .into_iter()
            .find(|x| x.raw() == e))
    }

    /// The elements, copied out, when they are `T`s (`element` says which).
    pub(super) fn to_vec<T: Copy>(&self) -> CallResult<Vec<T>> {
        let mut n = 0usize;
        check(
            unsafe { sys::ov_tensor_get_size(self.0, &mut n) },
            "ov_tensor_get_size",
        )?;
        let mut d = ptr::null_mut();
        check(
            unsafe { sys::ov_tensor_data(self.0, &mut d) },
            "ov_tensor_data",
        )?;
        Ok(unsafe { std::slice::from_raw_parts(d as *const T, n) }.to_vec())
    }
}
