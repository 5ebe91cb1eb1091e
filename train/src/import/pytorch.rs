//! Files written by Python's `torch.save`, read without Python: the container is parsed
//! here, the pickle rewritten by [`super::pickle`], and libtorch's unpickler (through the
//! C++ shim train/csrc/pickle_load.cpp) rebuilds the tensors.
//!
//! Two containers exist:
//! - zip (PyTorch >= 1.6): `<dir>/data.pkl` plus one record `<dir>/data/<key>` per storage;
//! - legacy (before 1.6, still what many published checkpoints are): five pickles in a
//!   row (magic number, protocol version, system info, the object, the sorted storage
//!   keys), then each storage as its element count (u64) and raw bytes.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::io::Read;

use anyhow::{bail, Context, Result};
use tch::Tensor;

use super::pickle::{self, next_op, Rewritten};

pub const ZIP_MAGIC: &[u8] = b"PK\x03\x04";
/// `pickle.dumps(0x1950a86a20f9469cfc6c, protocol=2)` without STOP: legacy files open so.
pub const LEGACY_MAGIC: &[u8] = &[
    0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19,
];

/// Every tensor of a file with its path of dict keys / list indices from the root object.
pub struct Unpickled {
    pub tensors: Vec<(Vec<String>, Tensor)>,
    /// Non-tensor values (epoch numbers, hyper-parameters, ...).
    pub skipped: usize,
    /// The scalar leaves among them (str, int, float, bool) with their paths, as text.
    pub values: Vec<(Vec<String>, String)>,
}

/// Reads a zip-format `torch.save` file.
pub fn read_zip(bytes: &[u8]) -> Result<Unpickled> {
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes)).map_err(|e| match e {
        zip::result::ZipError::InvalidArchive(why) => {
            anyhow::anyhow!("damaged or truncated zip archive ({why})")
        }
        other => anyhow::anyhow!("unreadable zip archive: {other}"),
    })?;
    // torch.save puts everything under one folder whose name is arbitrary ("archive").
    let pkl_name = zip
        .file_names()
        .find(|n| n.ends_with("/data.pkl") && n.matches('/').count() == 1)
        .map(str::to_owned)
        .context("zip archive without <dir>/data.pkl: not written by torch.save")?;
    let dir = &pkl_name[..pkl_name.len() - "data.pkl".len()];
    if let Ok(mut f) = zip.by_name(&format!("{dir}byteorder")) {
        let mut order = String::new();
        f.read_to_string(&mut order)?;
        if order.trim() != "little" {
            bail!("storages are {order} endian; only little-endian files are supported");
        }
    }
    let pkl = read_entry(&mut zip, bytes, &pkl_name)?.into_owned();
    let rewritten = pickle::rewrite(&pkl, 0).context("data.pkl")?;
    let mut records = HashMap::new();
    for s in &rewritten.storages {
        let name = format!("{dir}data/{}", s.key);
        let data = read_entry(&mut zip, bytes, &name)?;
        records.insert(s.key.clone(), data);
    }
    unpickle(&rewritten, &records)
}

/// An entry's bytes: borrowed from the file when stored uncompressed (torch.save's way).
fn read_entry<'a>(
    zip: &mut zip::ZipArchive<std::io::Cursor<&'a [u8]>>,
    bytes: &'a [u8],
    name: &str,
) -> Result<Cow<'a, [u8]>> {
    let mut f = zip
        .by_name(name)
        .with_context(|| format!("zip archive lacks `{name}`"))?;
    if f.compression() == zip::CompressionMethod::Stored {
        let start = f.data_start() as usize;
        let slice = usize::try_from(f.size())
            .ok()
            .and_then(|n| start.checked_add(n))
            .and_then(|end| bytes.get(start..end))
            .with_context(|| format!("`{name}` runs past the end of the file"))?;
        return Ok(Cow::Borrowed(slice));
    }
    // The declared size is the file's word (a patched header claims 4 GiB): reserve no
    // more than a few times the compressed file; the data grows the buffer as it comes.
    let reserve = f.size().min(4 * bytes.len() as u64) as usize;
    let mut data = Vec::with_capacity(reserve);
    f.read_to_end(&mut data)
        .with_context(|| format!("decompressing `{name}`"))?;
    Ok(Cow::Owned(data))
}

/// Reads a legacy (PyTorch < 1.6) `torch.save` file.
pub fn read_legacy(bytes: &[u8]) -> Result<Unpickled> {
    let mut pos = 0;
    for what in ["magic number", "protocol version", "system info"] {
        pos = skip_pickle(bytes, pos).with_context(|| format!("legacy header ({what})"))?;
    }
    let main = pickle::rewrite(bytes, pos).context("legacy pickle")?;
    let (keys, mut pos) = string_list(bytes, main.end).context("legacy storage key list")?;
    let refs: HashMap<&str, _> = main.storages.iter().map(|s| (s.key.as_str(), s)).collect();
    let mut records = HashMap::new();
    for key in keys {
        let count = bytes
            .get(pos..pos + 8)
            .context("file ends in the storage data (truncated?)")?;
        let numel = u64::from_le_bytes(count.try_into().unwrap());
        let r = refs
            .get(key.as_str())
            .with_context(|| format!("storage `{key}` is not referred to by the pickle"))?;
        let size = r
            .element_size()
            .with_context(|| format!("storage `{key}` has unknown type {}Storage", r.dtype))?;
        let start = pos + 8;
        let end = (numel.checked_mul(size).map(|n| n as usize)).and_then(|n| start.checked_add(n));
        let data = end
            .and_then(|end| bytes.get(start..end))
            .context("file ends in the storage data (truncated?)")?;
        records.insert(key, Cow::Borrowed(data));
        pos = start + data.len();
    }
    unpickle(&main, &records)
}

/// Offset just past the STOP of the pickle starting at `pos`.
fn skip_pickle(bytes: &[u8], mut pos: usize) -> Result<usize> {
    loop {
        let (code, _, next) = next_op(bytes, pos)?;
        if code == b'.' {
            return Ok(next);
        }
        pos = next;
    }
}

/// The strings of a pickled list of strings (the legacy storage keys), and where it ends.
fn string_list(bytes: &[u8], mut pos: usize) -> Result<(Vec<String>, usize)> {
    let mut out = Vec::new();
    loop {
        let (code, arg, next) = next_op(bytes, pos)?;
        match code {
            b'X' => out.push(String::from_utf8_lossy(&arg[4..]).into_owned()),
            0x8c => out.push(String::from_utf8_lossy(&arg[1..]).into_owned()),
            b'.' => return Ok((out, next)),
            _ => {}
        }
        pos = next;
    }
}

// ---- the C++ shim (train/csrc/pickle_load.cpp) --------------------------------------

type RecordFn = extern "C" fn(*mut c_void, *const c_char, *mut *const c_char, *mut usize) -> c_int;
type TensorFn = extern "C" fn(*mut c_void, *const *const c_char, usize, *mut c_void);
type ValueFn = extern "C" fn(*mut c_void, *const *const c_char, usize, *const c_char, c_int);

extern "C" {
    fn segtool_unpickle(
        pkl: *const c_char,
        pkl_len: usize,
        read_record: RecordFn,
        on_tensor: TensorFn,
        on_value: ValueFn,
        ctx: *mut c_void,
        skipped: *mut usize,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
}

struct Ctx<'a> {
    records: &'a HashMap<String, Cow<'a, [u8]>>,
    tensors: Vec<(Vec<String>, Tensor)>,
    values: Vec<(Vec<String>, String)>,
}

/// `depth` C strings at `path`, owned.
///
/// # Safety
/// `path` points to `depth` valid C strings.
unsafe fn path_of(path: *const *const c_char, depth: usize) -> Vec<String> {
    (0..depth)
        .map(|i| {
            unsafe { CStr::from_ptr(*path.add(i)) }
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

extern "C" fn on_value(
    ctx: *mut c_void,
    path: *const *const c_char,
    depth: usize,
    text: *const c_char,
    _kind: c_int,
) {
    // SAFETY: as on_tensor; `text` is a C string valid during the call.
    let ctx = unsafe { &mut *(ctx as *mut Ctx) };
    let path = unsafe { path_of(path, depth) };
    let text = unsafe { CStr::from_ptr(text) }
        .to_string_lossy()
        .into_owned();
    ctx.values.push((path, text));
}

// The callbacks run inside segtool_unpickle, one at a time, and must not panic (a panic
// cannot unwind through C++).
extern "C" fn on_record(
    ctx: *mut c_void,
    key: *const c_char,
    data: *mut *const c_char,
    len: *mut usize,
) -> c_int {
    // SAFETY: ctx is the &mut Ctx passed to segtool_unpickle; key is a C string; data and
    // len point to the shim's locals.
    let ctx = unsafe { &*(ctx as *const Ctx) };
    let key = unsafe { CStr::from_ptr(key) }.to_string_lossy();
    match ctx.records.get(key.as_ref()) {
        Some(bytes) => unsafe {
            *data = bytes.as_ptr() as *const c_char;
            *len = bytes.len();
            0
        },
        None => 1,
    }
}

extern "C" fn on_tensor(
    ctx: *mut c_void,
    path: *const *const c_char,
    depth: usize,
    tensor: *mut c_void,
) {
    // SAFETY: as above; `path` holds `depth` C strings; `tensor` is a `new at::Tensor`
    // whose ownership passes to us, which is what Tensor::from_ptr expects.
    let ctx = unsafe { &mut *(ctx as *mut Ctx) };
    let path = unsafe { path_of(path, depth) };
    let tensor = unsafe { Tensor::from_ptr(tensor as *mut torch_sys::C_tensor) };
    ctx.tensors.push((path, tensor));
}

fn unpickle(pickle: &Rewritten, records: &HashMap<String, Cow<[u8]>>) -> Result<Unpickled> {
    // The shim sizes each storage from the pickle (numel x element size) but copies only
    // the record's bytes: check here that every record is long enough.
    for s in &pickle.storages {
        let have = records.get(&s.key).map_or(0, |r| r.len() as u64);
        if let Some(e) = s.element_size() {
            // numel comes from the file: 2^62 elements overflow u64 bytes.
            match e.checked_mul(s.numel) {
                Some(need) if have >= need => {}
                need => bail!(
                    "storage `{}` has {have} bytes, its tensors need {} (truncated file?)",
                    s.key,
                    need.map_or(format!("{} x {e}", s.numel), |n| n.to_string())
                ),
            }
        }
    }
    let mut ctx = Ctx {
        records,
        tensors: Vec::new(),
        values: Vec::new(),
    };
    let mut skipped = 0usize;
    let mut err = vec![0u8; 2048];
    // SAFETY: all pointers outlive the call; the callbacks match the shim's typedefs.
    let rc = unsafe {
        segtool_unpickle(
            pickle.pickle.as_ptr() as *const c_char,
            pickle.pickle.len(),
            on_record,
            on_tensor,
            on_value,
            &mut ctx as *mut Ctx as *mut c_void,
            &mut skipped,
            err.as_mut_ptr() as *mut c_char,
            err.len(),
        )
    };
    if rc != 0 {
        let msg = CStr::from_bytes_until_nul(&err)
            .map(|m| m.to_string_lossy().into_owned())
            .unwrap_or_default();
        bail!("libtorch's unpickler: {msg}");
    }
    Ok(Unpickled {
        tensors: ctx.tensors,
        skipped,
        values: ctx.values,
    })
}
