//! ONNX external data: initialiser payloads in a side file next to the model.
//!
//! A protobuf message must stay under 2 GiB (`i32::MAX` bytes; onnxruntime's and
//! onnx's parsers refuse larger ones), so a model whose weights reach that size is
//! written the way onnx's `convert_model_to_external_data(all_tensors_to_one_file=True,
//! size_threshold=1024)` + `save_model` write it:
//!
//! - one side file, `<model file name>.data` (`danet.onnx` -> `danet.onnx.data`, the name
//!   `torch.onnx.export` gives it), in the model's directory; `location` is that bare file
//!   name, i.e. relative to the model file, as the spec requires;
//! - each initialiser with at least `threshold` bytes of raw data (in graph order) moves
//!   there: `data_location = EXTERNAL`, `external_data` = `location`, `offset`, `length`
//!   (in that order, decimal strings, as `onnx.external_data_helper.set_external_data`
//!   writes them) and no `raw_data`; smaller ones stay inline;
//! - every offset is a multiple of [`ALIGNMENT`] (4096, the page size: onnx's
//!   ExternalData.md asks for page-multiple offsets so loaders can mmap them, and
//!   onnxruntime's own writer pads to 4096, `ModelSavingOptions::on_disk_alignment_factor`),
//!   the gap zero-filled. onnx's python writer does not pad by default but accepts gaps of
//!   up to 64 KiB (`_MAX_EXTERNAL_DATA_PADDING`) and its loader reads any offset. The file
//!   ends with the last tensor (no trailing padding).
//!
//! Differences from onnx's helper, on purpose: the threshold compares the payload's length
//! (onnx compares `sys.getsizeof(raw_data)`, which adds ~33 bytes of Python object
//! header), and no `checksum` is written (optional in the spec).
//!
//! Writing ([`write_files`]) keeps the pair consistent: data first (temp file, fsync,
//! rename), model last (`segtool_model_spec::io::write_atomic`), so a model on disk never points
//! at a missing or partial data file.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::proto::{DataLocation, GraphProto, StringStringEntryProto};
use crate::ExportError;

/// Whether large initialisers are written to a side file (ONNX "external data") instead
/// of inside the model. A protobuf message, and so an inline .onnx file, must stay under
/// 2 GiB; external data lifts that limit (see this module).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ExternalData {
    /// External data only when the inline model would reach protobuf's 2 GiB limit.
    #[default]
    Auto,
    /// Always: every initialiser of at least
    /// [`crate::ExportOptions::external_threshold`] bytes goes to the side file.
    Always,
    /// Never: a model over the limit fails with [`crate::ExportError::TooLarge`].
    Never,
}

impl ExternalData {
    /// Every mode, in CLI listing order.
    pub const ALL: [ExternalData; 3] = [
        ExternalData::Auto,
        ExternalData::Always,
        ExternalData::Never,
    ];

    /// CLI spelling: `auto`, `always`, `never`.
    pub fn name(self) -> &'static str {
        match self {
            ExternalData::Auto => "auto",
            ExternalData::Always => "always",
            ExternalData::Never => "never",
        }
    }
}

impl std::fmt::Display for ExternalData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for ExternalData {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(ExternalData::Auto),
            "always" => Ok(ExternalData::Always),
            "never" => Ok(ExternalData::Never),
            _ => Err(format!(
                "unknown external data mode `{s}` (expected auto, always or never)"
            )),
        }
    }
}
/// Offset alignment of every tensor in the side file (bytes).
pub const ALIGNMENT: u64 = 4096;

/// Largest serialised model protobuf accepts: messages must be under `i32::MAX` bytes.
pub(crate) const PROTOBUF_LIMIT: u64 = i32::MAX as u64;

/// Extension appended to the model's file name to name its side file.
pub const DATA_SUFFIX: &str = ".data";

/// The `location` (side file name) for a model written to `model`: its file name plus
/// [`DATA_SUFFIX`]. None when the path has no UTF-8 file name (`location` is a string).
pub fn location_for(model: &Path) -> Option<String> {
    model
        .file_name()
        .and_then(|n| n.to_str())
        .map(|n| format!("{n}{DATA_SUFFIX}"))
}

/// The side file's path for a model written to `model` (whether or not it uses one).
pub fn data_path_for(model: &Path) -> Option<PathBuf> {
    location_for(model).map(|l| model.with_file_name(l))
}

/// Contents of a side file: the payloads moved out of the model, each at its aligned
/// offset. Held as the moved buffers (no copy of the weights); [`Self::write_to`] streams
/// them with their zero padding, [`Self::to_vec`] gives the file's bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExternalDataFile {
    location: String,
    /// (offset, payload), offsets increasing and multiples of [`ALIGNMENT`].
    chunks: Vec<(u64, Vec<u8>)>,
    len: u64,
}

impl ExternalDataFile {
    /// File name relative to the model (the tensors' `location`).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// Size of the file in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file has no bytes (no tensor was moved to it).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of tensors stored in the file.
    pub fn tensors(&self) -> usize {
        self.chunks.len()
    }

    /// Writes the file's bytes (payloads with zero padding between them) to `w`.
    pub fn write_to(&self, w: &mut impl Write) -> io::Result<()> {
        const ZEROS: [u8; ALIGNMENT as usize] = [0; ALIGNMENT as usize];
        let mut pos = 0u64;
        for (offset, data) in &self.chunks {
            // Padding is always shorter than one alignment unit.
            w.write_all(&ZEROS[..(offset - pos) as usize])?;
            w.write_all(data)?;
            pos = offset + data.len() as u64;
        }
        debug_assert_eq!(pos, self.len);
        Ok(())
    }

    /// The file's bytes.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len as usize);
        self.write_to(&mut v).expect("writing to a Vec cannot fail");
        v
    }
}

/// Whether an export uses external data: always, never, or (auto) when the inline model
/// (`inline_len` bytes) would reach `limit` ([`PROTOBUF_LIMIT`] outside tests; a
/// parameter so the decision is testable without building a 2 GiB model).
pub(crate) fn wanted(mode: crate::ExternalData, inline_len: u64, limit: u64) -> bool {
    match mode {
        crate::ExternalData::Always => true,
        crate::ExternalData::Never => false,
        crate::ExternalData::Auto => inline_len >= limit,
    }
}

/// Moves the raw data of every initialiser of `graph` with at least `threshold` bytes
/// (and at least one) into a side file named `location`, in graph order, each at the
/// next multiple of [`ALIGNMENT`], and points the tensor at it.
pub(crate) fn externalize(
    graph: &mut GraphProto,
    location: &str,
    threshold: usize,
) -> ExternalDataFile {
    let mut chunks = Vec::new();
    let mut end = 0u64;
    for t in &mut graph.initializer {
        let n = t.raw_data.len();
        if n == 0 || n < threshold {
            continue;
        }
        let offset = end.div_ceil(ALIGNMENT) * ALIGNMENT;
        let data = std::mem::take(&mut t.raw_data);
        let entry = |k: &str, v: String| StringStringEntryProto {
            key: k.into(),
            value: v,
        };
        t.external_data = vec![
            entry("location", location.to_string()),
            entry("offset", offset.to_string()),
            entry("length", n.to_string()),
        ];
        t.data_location = Some(DataLocation::External as i32);
        end = offset + n as u64;
        chunks.push((offset, data));
    }
    ExternalDataFile {
        location: location.to_string(),
        chunks,
        len: end,
    }
}

/// Writes the model `onnx` to `out` and, when given, its side file beside it, so that no
/// reader ever sees a model pointing at a missing or partial data file:
///
/// 1. the data goes to a temp file in the same directory and is fsynced;
/// 2. an existing model at `out` is removed (it may reference the data file about to be
///    replaced; a reader sees no model rather than an old model over new data);
/// 3. the temp data file is renamed into place;
/// 4. the model is written with `write_atomic` (temp, fsync, rename, directory sync).
///
/// Any failure removes what this call wrote (temp files, and the data file when the model
/// could not be written), so neither file is left behind. Without external data the model
/// is written atomically and a side file left by an earlier external export of the same
/// path (`<out>.data`) is removed, as nothing references it any more.
pub(crate) fn write_files(
    out: &Path,
    onnx: &[u8],
    data: Option<&ExternalDataFile>,
) -> Result<(), ExportError> {
    let werr = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ExportError::Write { path, source }
    };
    let Some(data) = data else {
        segtool_model_spec::io::write_atomic(out, onnx).map_err(werr(out))?;
        if let Some(stale) = data_path_for(out) {
            let _ = fs::remove_file(stale);
        }
        return Ok(());
    };
    let data_path = out.with_file_name(data.location());
    let tmp = segtool_model_spec::io::temp_path(&data_path);
    let staged = (|| {
        if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir)?;
        }
        let mut f = io::BufWriter::with_capacity(1 << 20, fs::File::create(&tmp)?);
        data.write_to(&mut f)?;
        f.into_inner().map_err(|e| e.into_error())?.sync_all()
    })();
    if let Err(e) = staged {
        let _ = fs::remove_file(&tmp);
        return Err(werr(&data_path)(e));
    }
    match fs::remove_file(out) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            return Err(werr(out)(e));
        }
    }
    if let Err(e) = fs::rename(&tmp, &data_path) {
        let _ = fs::remove_file(&tmp);
        return Err(werr(&data_path)(e));
    }
    if let Err(e) = segtool_model_spec::io::write_atomic(out, onnx) {
        let _ = fs::remove_file(&data_path);
        return Err(werr(out)(e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::TensorProto;
    use crate::ExternalData;

    fn tensor(name: &str, n: usize) -> TensorProto {
        TensorProto {
            name: name.into(),
            dims: vec![n as i64],
            data_type: crate::proto::DataType::Uint8 as i32,
            raw_data: (0..n).map(|i| (i % 251) as u8 + 1).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn offsets_are_aligned_and_small_tensors_stay_inline() {
        let mut g = GraphProto {
            initializer: vec![
                tensor("a", 5000),
                tensor("small", 10),
                tensor("b", 1024),
                tensor("empty", 0),
                tensor("c", 4096),
            ],
            ..Default::default()
        };
        let before = g.clone();
        let f = externalize(&mut g, "m.onnx.data", 1024);
        assert_eq!(f.tensors(), 3);
        let info = |t: &TensorProto| -> Vec<(String, String)> {
            t.external_data
                .iter()
                .map(|e| (e.key.clone(), e.value.clone()))
                .collect()
        };
        let expect = |off: u64, len: usize| {
            vec![
                ("location".into(), "m.onnx.data".into()),
                ("offset".into(), off.to_string()),
                ("length".into(), len.to_string()),
            ]
        };
        let i = &g.initializer;
        assert_eq!(info(&i[0]), expect(0, 5000));
        assert_eq!(info(&i[2]), expect(8192, 1024));
        assert_eq!(info(&i[4]), expect(12288, 4096));
        for k in [0, 2, 4] {
            assert!(i[k].raw_data.is_empty());
            assert_eq!(i[k].data_location, Some(DataLocation::External as i32));
        }
        for k in [1, 3] {
            assert_eq!(i[k], before.initializer[k], "{} stays inline", i[k].name);
        }
        assert_eq!(f.len(), 12288 + 4096);
        let bytes = f.to_vec();
        assert_eq!(bytes.len() as u64, f.len());
        assert_eq!(&bytes[..5000], &before.initializer[0].raw_data[..]);
        assert!(bytes[5000..8192].iter().all(|&b| b == 0));
        assert_eq!(&bytes[8192..9216], &before.initializer[2].raw_data[..]);
        assert_eq!(&bytes[12288..], &before.initializer[4].raw_data[..]);
    }

    #[test]
    fn the_limit_decides_auto_only() {
        let limit = 1000;
        assert!(!wanted(ExternalData::Auto, 999, limit));
        assert!(wanted(ExternalData::Auto, 1000, limit));
        assert!(wanted(ExternalData::Always, 0, limit));
        assert!(!wanted(ExternalData::Never, u64::MAX, limit));
        assert_eq!(PROTOBUF_LIMIT, 2_147_483_647);
    }

    #[test]
    fn location_is_the_model_file_name_plus_data() {
        assert_eq!(
            location_for(Path::new("/x/y/danet.onnx")).as_deref(),
            Some("danet.onnx.data")
        );
        assert_eq!(
            data_path_for(Path::new("rel/m.onnx")),
            Some(PathBuf::from("rel/m.onnx.data"))
        );
        assert_eq!(location_for(Path::new("/")), None);
    }
}
