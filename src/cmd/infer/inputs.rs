//! The image-file source of `segtool infer`: expanding `--input` values (files, folders,
//! globs with a small built-in matcher) into a sorted, de-duplicated file list, refusing
//! inputs whose outputs would collide, and the source thread that decodes those files
//! batch by batch. Kept apart from the pipeline because file listing and globbing are
//! self-contained and have their own rules (hidden files, `**`, character classes).

use std::path::{Path, PathBuf};
use std::sync::mpsc::SyncSender;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use rayon::prelude::*;

use super::pipeline::{send_batch, Batch, Busy, Prepare};

fn is_image(path: &Path) -> bool {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    matches!(ext.as_str(), "png" | "jpg" | "jpeg")
}

/// Every `--input` value expanded, in order (each pattern's or folder's matches sorted),
/// duplicates dropped. A value that names nothing is an error naming it.
pub fn expand_inputs(inputs: &[String]) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for input in inputs {
        let path = Path::new(input);
        if path.is_file() {
            files.push(path.to_path_buf());
        } else if path.is_dir() {
            let found = segtool_core::dataset::list_images(path)
                .with_context(|| format!("reading input {}", path.display()))?;
            if found.is_empty() {
                bail!("no png/jpg images in {}", path.display());
            }
            files.extend(found);
        } else if has_wildcard(input) {
            let mut found: Vec<PathBuf> = glob(input)
                .with_context(|| format!("expanding input pattern {input:?}"))?
                .into_iter()
                .filter(|p| p.is_file() && is_image(p))
                .collect();
            found.sort();
            if found.is_empty() {
                bail!("input pattern {input:?} matches no png/jpg file");
            }
            files.extend(found);
        } else {
            bail!("input {}: no such file or folder", path.display());
        }
    }
    let mut seen = std::collections::HashSet::new();
    files.retain(|p| seen.insert(p.canonicalize().unwrap_or_else(|_| p.clone())));
    Ok(files)
}

fn has_wildcard(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// Minimal glob: `*`, `?`, `[abc]`, `[a-z]`, `[!x]` within a path component, and `**` as a
/// whole component for any number of folders. Names starting with `.` only match patterns
/// that start with `.`.
fn glob(pattern: &str) -> std::io::Result<Vec<PathBuf>> {
    let absolute = pattern.starts_with('/');
    let parts: Vec<&str> = pattern.split('/').filter(|p| !p.is_empty()).collect();
    let base = if absolute {
        PathBuf::from("/")
    } else {
        PathBuf::new()
    };
    let mut out = Vec::new();
    glob_walk(&base, &parts, &mut out)?;
    Ok(out)
}

fn glob_walk(base: &Path, parts: &[&str], out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let Some((first, rest)) = parts.split_first() else {
        out.push(base.to_path_buf());
        return Ok(());
    };
    let dir = if base.as_os_str().is_empty() {
        Path::new(".")
    } else {
        base
    };
    if *first == "**" {
        // Zero folders, then every (non-hidden) subfolder recursively.
        glob_walk(base, rest, out)?;
        for entry in read_dir_sorted(dir)? {
            let name = entry.to_string_lossy();
            let child = base.join(&entry);
            if !name.starts_with('.') && child.is_dir() {
                glob_walk(&child, parts, out)?;
            }
        }
        return Ok(());
    }
    if !has_wildcard(first) {
        let child = base.join(first);
        if rest.is_empty() || child.is_dir() {
            if child.exists() {
                glob_walk(&child, rest, out)?;
            }
        }
        return Ok(());
    }
    if !dir.is_dir() {
        return Ok(());
    }
    for entry in read_dir_sorted(dir)? {
        let name = entry.to_string_lossy();
        if name.starts_with('.') && !first.starts_with('.') {
            continue;
        }
        if wildcard_match(first.as_bytes(), name.as_bytes()) {
            let child = base.join(&entry);
            if rest.is_empty() || child.is_dir() {
                glob_walk(&child, rest, out)?;
            }
        }
    }
    Ok(())
}

fn read_dir_sorted(dir: &Path) -> std::io::Result<Vec<std::ffi::OsString>> {
    let mut names: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.file_name()))
        .collect();
    names.sort();
    Ok(names)
}

/// Glob match of one path component (bytes; `?` matches one byte).
fn wildcard_match(pat: &[u8], name: &[u8]) -> bool {
    match pat.first() {
        None => name.is_empty(),
        Some(b'*') => (0..=name.len()).any(|i| wildcard_match(&pat[1..], &name[i..])),
        Some(b'?') => !name.is_empty() && wildcard_match(&pat[1..], &name[1..]),
        Some(b'[') => {
            let Some(close) = pat.iter().skip(2).position(|&c| c == b']').map(|p| p + 2) else {
                // No closing bracket: a literal '['.
                return name.first() == Some(&b'[') && wildcard_match(&pat[1..], &name[1..]);
            };
            let Some(&c) = name.first() else { return false };
            let mut class = &pat[1..close];
            let negate = matches!(class.first(), Some(b'!' | b'^'));
            if negate {
                class = &class[1..];
            }
            let mut hit = false;
            let mut i = 0;
            while i < class.len() {
                if i + 2 < class.len() && class[i + 1] == b'-' {
                    hit |= (class[i]..=class[i + 2]).contains(&c);
                    i += 3;
                } else {
                    hit |= class[i] == c;
                    i += 1;
                }
            }
            hit != negate && wildcard_match(&pat[close + 1..], &name[1..])
        }
        Some(&p) => name.first() == Some(&p) && wildcard_match(&pat[1..], &name[1..]),
    }
}

/// Two inputs with the same file stem would overwrite each other's outputs.
pub(super) fn check_unique_stems(files: &[PathBuf]) -> Result<()> {
    let mut seen = std::collections::HashMap::new();
    for f in files {
        let stem = f.file_stem().unwrap_or_default().to_os_string();
        if let Some(other) = seen.insert(stem, f) {
            bail!(
                "inputs {} and {} would both write {}_*.png to the output folder",
                other.display(),
                f.display(),
                f.file_stem().unwrap_or_default().to_string_lossy()
            );
        }
    }
    Ok(())
}

pub(super) fn decode_files(
    files: Vec<PathBuf>,
    batch_size: usize,
    prepare: &Prepare,
    tx: SyncSender<Result<(Batch, Busy)>>,
) {
    for chunk in files.chunks(batch_size) {
        let t0 = Instant::now();
        let decoded = chunk
            .par_iter()
            .map(|p| segtool_core::dataset::read_rgb(p).map_err(anyhow::Error::from))
            .collect::<Result<Vec<_>>>();
        let images = match decoded {
            Ok(images) => images,
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        };
        let decode = t0.elapsed();
        let names = chunk
            .iter()
            .map(|p| {
                p.file_stem()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        if !send_batch(&tx, names, images, prepare, decode) {
            return;
        }
    }
}
