//! The image-file source of `segtool infer`: expanding `--input` values (files, folders,
//! globs with a small built-in matcher) into a sorted, de-duplicated file list, refusing
//! inputs whose outputs would collide, and the source thread that decodes those files
//! batch by batch. Kept apart from the pipeline because file listing and globbing are
//! self-contained and have their own rules (hidden files, `**`, character classes).

use std::path::{Path, PathBuf};
use std::sync::mpsc::SyncSender;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use image::RgbImage;
use rayon::prelude::*;

use segtool_model_spec::images::{is_image, list_images};

use super::pipeline::{send_batch, Batch, Busy, Failure, Prepare};

/// Every `--input` value expanded, in order (each pattern's or folder's matches sorted),
/// duplicates dropped. A value that names nothing is an error naming it.
pub fn expand_inputs(inputs: &[String]) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for input in inputs {
        let path = Path::new(input);
        if path.is_file() {
            files.push(path.to_path_buf());
        } else if path.is_dir() {
            let found =
                list_images(path).with_context(|| format!("reading input {}", path.display()))?;
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

/// How the source thread treats input files.
#[derive(Clone, Copy)]
pub(super) struct DecodeOptions {
    pub(super) batch_size: usize,
    /// An unreadable image is a [`Failure`] carried with its batch, not the end of the run.
    pub(super) keep_going: bool,
    /// `(height, width)` the sessions were built for: an image of another size fails.
    pub(super) fixed_size: Option<(usize, usize)>,
}

/// The source thread over image files: decodes (rayon, one task per image) and prepares
/// batch after batch. Without `keep_going` the first unreadable image in input order ends
/// the input with an error naming it; with it, the batch carries the failure instead.
pub(super) fn decode_files(
    files: Vec<PathBuf>,
    opts: DecodeOptions,
    prepare: &Prepare,
    tx: SyncSender<Result<(Batch, Busy)>>,
) {
    for chunk in files.chunks(opts.batch_size.max(1)) {
        let t0 = Instant::now();
        let decoded: Vec<Result<RgbImage, String>> = chunk
            .par_iter()
            .map(|p| decode_one(p, opts.fixed_size))
            .collect();
        let mut names = Vec::with_capacity(chunk.len());
        let mut images = Vec::with_capacity(chunk.len());
        let mut failures = Vec::new();
        for (path, result) in chunk.iter().zip(decoded) {
            match result {
                Ok(img) => {
                    names.push(
                        path.file_stem()
                            .unwrap_or_default()
                            .to_string_lossy()
                            .into_owned(),
                    );
                    images.push(img);
                }
                Err(reason) if opts.keep_going => failures.push(Failure {
                    path: path.clone(),
                    reason,
                }),
                Err(reason) => {
                    let _ = tx.send(Err(anyhow!(
                        "cannot read image {}: {reason} (--keep-going skips unreadable \
                         images and goes on)",
                        path.display()
                    )));
                    return;
                }
            }
        }
        let decode = t0.elapsed();
        if !send_batch(&tx, names, images, failures, prepare, decode) {
            return;
        }
    }
}

/// One image file decoded to RGB, or why not, in words for the user.
fn decode_one(path: &Path, fixed_size: Option<(usize, usize)>) -> Result<RgbImage, String> {
    let img = match segtool_core::dataset::read_rgb(path) {
        Ok(img) => img,
        Err(segtool_core::dataset::DatasetError::Image { source, .. }) => {
            return Err(describe_image_error(path, &source))
        }
        Err(other) => return Err(other.to_string()),
    };
    if let Some((h, w)) = fixed_size {
        if img.dimensions() != (w as u32, h as u32) {
            // Possible only for a file whose header could not be read when the size
            // was chosen (--keep-going leaves those out of the choice).
            return Err(format!(
                "wrong size: {}x{} (WxH), the session is fixed to {w}x{h} (use \
                 --dynamic-shapes for mixed sizes)",
                img.width(),
                img.height()
            ));
        }
    }
    Ok(img)
}

/// What went wrong reading an image: truncated, unreadable, corrupt, ... and the decoder's
/// own message.
fn describe_image_error(path: &Path, e: &image::ImageError) -> String {
    use image::ImageError as E;
    match e {
        E::IoError(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
            if std::fs::metadata(path).is_ok_and(|m| m.len() == 0) {
                "empty file".to_string()
            } else {
                format!("truncated image ({io})")
            }
        }
        E::IoError(io) => format!("unreadable file ({io})"),
        E::Decoding(d) => format!("corrupt image ({d})"),
        E::Unsupported(u) => format!("unsupported image ({u})"),
        E::Limits(l) => format!("image too large ({l})"),
        other => format!("cannot decode ({other})"),
    }
}
