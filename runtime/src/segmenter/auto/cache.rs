//! Auto's choices, kept between runs as TensorRT keeps a timing cache: one JSON file
//! under `$SEGTOOL_HOME` (default `~/.cache/segtool`), one entry per [`Key`].
//!
//! The key is everything that changes which engine is fastest: the model's bytes
//! (SHA-256), the CPU (its model name and the instruction-set flags the kernels
//! dispatch on), each engine library's identity (path, size, modification time: a new
//! ONNX Runtime or OpenVINO is a new key), segtool's version (tract is built in), and the
//! deployment's threads, precision, OpenVINO settings and input size. A file that does not
//! parse is measured over, never trusted in part; writes go to a temporary file renamed
//! into place, so a reader never sees half an entry.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::measure::Timing;
use crate::segmenter::EngineKind;

/// The cache file's name under the cache folder.
const FILE: &str = "auto-engine.json";

/// What a choice depends on (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(in crate::segmenter) struct Key {
    pub model_sha256: String,
    pub cpu: String,
    pub libraries: Vec<String>,
    pub segtool: String,
    pub threads: Option<usize>,
    /// Precision and OpenVINO's device, hint and streams, as one line.
    pub settings: String,
    /// `[height, width]` timed.
    pub size: [usize; 2],
}

/// A choice as cached: the key, the engine kept, what each engine measured, and the
/// engines that did not run with why (reported again on every use of the entry).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(in crate::segmenter) struct Entry {
    pub key: Key,
    pub engine: EngineKind,
    pub timings: Vec<Timing>,
    pub unavailable: Vec<String>,
    /// Where ONNX Runtime's library was looked for, when it was missing.
    pub ort_missing: Option<Vec<String>>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct File {
    entries: Vec<Entry>,
}

/// The cache file: `$SEGTOOL_HOME`, else `$XDG_CACHE_HOME/segtool`, else
/// `$HOME/.cache/segtool`; `None` when none is set.
pub(in crate::segmenter) fn default_path() -> Option<PathBuf> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let folder = var("SEGTOOL_HOME")
        .or_else(|| var("XDG_CACHE_HOME").map(|p| p.join("segtool")))
        .or_else(|| var("HOME").map(|p| p.join(".cache").join("segtool")))?;
    Some(folder.join(FILE))
}

/// The entry for `key` in the cache at `path`, if there is one.
pub(in crate::segmenter) fn lookup(path: &Path, key: &Key) -> Option<Entry> {
    read(path).entries.into_iter().find(|e| &e.key == key)
}

/// Records `entry` (replacing one with the same key). Returns why it could not.
pub(in crate::segmenter) fn store(path: &Path, entry: Entry) -> Result<(), String> {
    let mut file = read(path);
    file.entries.retain(|e| e.key != entry.key);
    file.entries.push(entry);
    let folder = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(folder).map_err(|e| format!("{}: {e}", folder.display()))?;
    let temp = folder.join(format!(".{FILE}.{}.tmp", std::process::id()));
    let text = serde_json::to_string_pretty(&file).map_err(|e| e.to_string())?;
    std::fs::write(&temp, text).map_err(|e| format!("{}: {e}", temp.display()))?;
    std::fs::rename(&temp, path).map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        format!("{}: {e}", path.display())
    })
}

fn read(path: &Path) -> File {
    std::fs::read(path)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

/// SHA-256 of a file's bytes, as hex.
pub(in crate::segmenter) fn sha256_of(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// The CPU as its kernels see it: the model name and the flags that select ONNX
/// Runtime's, OpenVINO's and tract's kernels.
pub(in crate::segmenter) fn cpu_identity() -> String {
    const KERNEL_FLAGS: [&str; 8] = [
        "avx2",
        "fma",
        "avx512f",
        "avx512_vnni",
        "avx_vnni",
        "avx512_bf16",
        "amx_bf16",
        "amx_int8",
    ];
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |name: &str| {
        info.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_default()
    };
    let flags = field("flags");
    let present: Vec<&str> = KERNEL_FLAGS
        .iter()
        .copied()
        .filter(|f| flags.split_whitespace().any(|x| x == *f))
        .collect();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!(
        "{} ({}, {cores} cores: {})",
        field("model name"),
        std::env::consts::ARCH,
        present.join(" ")
    )
}

/// A library file's identity: its path, size and modification time (the first of the
/// candidates that exists), or `name: none found`.
pub(in crate::segmenter) fn library_identity(name: &str, candidates: &[PathBuf]) -> String {
    for path in candidates {
        let Ok(meta) = std::fs::metadata(path) else {
            continue;
        };
        let modified = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        return format!(
            "{name}: {} ({} bytes, mtime {modified})",
            path.display(),
            meta.len()
        );
    }
    format!("{name}: none found")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(model: &str) -> Key {
        Key {
            model_sha256: model.into(),
            cpu: cpu_identity(),
            libraries: vec!["onnxruntime: none found".into()],
            segtool: "0.1.0".into(),
            threads: Some(1),
            settings: "f32".into(),
            size: [64, 64],
        }
    }

    #[test]
    fn entries_are_found_by_their_whole_key_and_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join(FILE);
        assert_eq!(lookup(&path, &key("a")), None);
        let timing = |engine, ms| Timing {
            engine,
            median_ms: ms,
            runs: 3,
        };
        let entry = |k: Key, engine| Entry {
            key: k,
            engine,
            timings: vec![timing(EngineKind::Ort, 2.0), timing(EngineKind::Tract, 3.0)],
            unavailable: vec!["openvino did not open the model (why)".into()],
            ort_missing: None,
        };
        store(&path, entry(key("a"), EngineKind::Ort)).unwrap();
        store(&path, entry(key("b"), EngineKind::Tract)).unwrap();
        store(&path, entry(key("a"), EngineKind::Tract)).unwrap();
        assert_eq!(lookup(&path, &key("a")).unwrap().engine, EngineKind::Tract);
        assert_eq!(lookup(&path, &key("b")).unwrap().engine, EngineKind::Tract);
        let other_threads = Key {
            threads: Some(2),
            ..key("a")
        };
        assert_eq!(lookup(&path, &other_threads), None);
        assert_eq!(read(&path).entries.len(), 2);
        // A damaged file is measured over, not half trusted.
        std::fs::write(&path, "{\"entries\": [").unwrap();
        assert_eq!(lookup(&path, &key("a")), None);
        let leftovers = std::fs::read_dir(path.parent().unwrap()).unwrap().count();
        assert_eq!(leftovers, 1, "no temporary file is left behind");
    }

    #[test]
    fn a_file_hash_changes_with_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.onnx");
        std::fs::write(&path, b"abc").unwrap();
        // SHA-256("abc"), the FIPS 180-2 example.
        assert_eq!(
            sha256_of(&path).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        std::fs::write(&path, b"abd").unwrap();
        assert_ne!(sha256_of(&path).unwrap()[..8], *"ba7816bf");
    }
}
