//! The run report: one self-contained HTML page about a run directory (its curves,
//! final and best metrics, the per-class table, validation overlays, the resolved
//! config and the environment receipt). Images are inline `data:` URIs and the page
//! loads nothing from anywhere, so it can be mailed or archived as one file.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::metrics_log::{self, Record, CHART_SIZE, OVERLAY_DIR};
use crate::telemetry::{Environment, ENVIRONMENT_FILE};

/// Id of the element the page's inline script fills in once it ran (headless checks).
pub const READY_MARKER: &str = "segtool-report-ready";

/// Standard base64 (RFC 4648, with padding).
pub fn base64(data: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for k in 0..4 {
            if k <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `text` safe inside HTML elements and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn png_img(png: &[u8], alt: &str, class: &str) -> String {
    format!(
        "<img class=\"{class}\" alt=\"{}\" src=\"data:image/png;base64,{}\">",
        escape(alt),
        base64(png)
    )
}

fn pct(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format!("{:.2}", v * 100.0))
}

fn num(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| {
        if v != 0.0 && v.abs() < 1e-2 {
            format!("{v:.3e}")
        } else {
            format!("{v:.4}")
        }
    })
}

/// The report page for `run_dir`. `receipt`: lines about the tool making the report
/// (segtool version and commit, ONNX Runtime version, ...), shown with the run's own
/// `environment.json`.
pub fn build(run_dir: &Path, receipt: &[(String, String)]) -> Result<String> {
    let metrics = run_dir.join("metrics.jsonl");
    if !metrics.exists() {
        bail!(
            "{} has no metrics.jsonl: not a segtool run directory",
            run_dir.display()
        );
    }
    let records = metrics_log::read_records(&metrics)?;
    let run = run_dir
        .canonicalize()
        .unwrap_or_else(|_| run_dir.to_path_buf())
        .file_name()
        .map_or("run".into(), |n| n.to_string_lossy().into_owned());
    let config = std::fs::read_to_string(run_dir.join("config.toml")).unwrap_or_default();
    let env: Option<Environment> = std::fs::read_to_string(run_dir.join(ENVIRONMENT_FILE))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());

    let train: Vec<&Record> = records.iter().filter(|r| r.kind == "train").collect();
    let val: Vec<&Record> = records.iter().filter(|r| r.kind == "val").collect();
    let last_train = train.last();
    let last_val = val.last();
    let best = val
        .iter()
        .filter(|r| r.miou.is_some())
        .max_by(|a, b| a.miou.partial_cmp(&b.miou).unwrap());

    let mut h = String::new();
    let title = format!("segtool run report: {run}");
    write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{}</h1>\n",
        escape(&title),
        escape(&title)
    )?;

    summary(&mut h, last_train, last_val, best);
    curves(&mut h, &run, &records)?;
    class_table(&mut h, last_val, best);
    overlays(&mut h, run_dir, last_val)?;
    config_and_environment(&mut h, &config, env.as_ref(), receipt);
    let _ = write!(
        h,
        "<p id=\"{READY_MARKER}\"></p>\n<script>\n\
         document.getElementById(\"{READY_MARKER}\").textContent = \
         \"report rendered: \" + document.images.length + \" images\";\n\
         </script>\n</body>\n</html>\n"
    );
    Ok(h)
}

/// Final and best metrics.
fn summary(
    h: &mut String,
    last_train: Option<&&Record>,
    last_val: Option<&&Record>,
    best: Option<&&Record>,
) {
    h.push_str("<h2>Summary</h2>\n<table class=\"kv\">\n");
    let mut row = |k: &str, v: String| {
        let _ = writeln!(h, "<tr><th>{}</th><td>{}</td></tr>", escape(k), escape(&v));
    };
    row(
        "iterations logged",
        last_train.map_or("none".into(), |r| r.iteration.to_string()),
    );
    if let Some(r) = last_train {
        row("final training loss", num(r.loss));
        row(
            "final loss terms (fused / PAM / CAM)",
            format!(
                "{} / {} / {}",
                num(r.loss_fused),
                num(r.loss_pam),
                num(r.loss_cam)
            ),
        );
        row("final learning rate", num(r.lr));
        row(
            "throughput (last interval)",
            r.it_per_s.map_or("–".into(), |v| format!("{v:.2} it/s")),
        );
        row(
            "data wait (last interval)",
            r.data_wait
                .map_or("–".into(), |v| format!("{:.0} %", v * 100.0)),
        );
        if let Some(median) = r.qat_threshold_median {
            row(
                "QAT ranges (min / median / max threshold)",
                format!(
                    "{} / {median:.4} / {}",
                    num(r.qat_threshold_min),
                    num(r.qat_threshold_max)
                ),
            );
            row(
                "QAT range movement (last interval)",
                r.qat_range_movement
                    .map_or("–".into(), |v| format!("{:.3} %", v * 100.0)),
            );
        }
    }
    match last_val {
        Some(r) => {
            row(
                &format!("final val mIoU (iteration {})", r.iteration),
                format!("{} %", pct(r.miou)),
            );
            row(
                "final val pixel accuracy",
                format!("{} %", pct(r.pixel_accuracy)),
            );
        }
        None => row("validation", "none logged".into()),
    }
    if let Some(b) = best {
        row(
            &format!("best val mIoU (iteration {})", b.iteration),
            format!(
                "{} % (pixel accuracy {} %)",
                pct(b.miou),
                pct(b.pixel_accuracy)
            ),
        );
    }
    h.push_str("</table>\n");
}

/// The training curves, one chart each.
fn curves(h: &mut String, run: &str, records: &[Record]) -> Result<()> {
    h.push_str("<h2>Curves</h2>\n<div class=\"charts\">\n");
    for (name, chart) in metrics_log::charts(run, records) {
        let img = segtool_core::plot::line_chart(&chart, CHART_SIZE.0, CHART_SIZE.1)
            .map_err(|e| anyhow::anyhow!("drawing {name}: {e}"))?;
        let png = segtool_core::dataset::encode_png(&image::DynamicImage::ImageRgb8(img));
        let _ = writeln!(h, "{}", png_img(&png, &chart.title, "chart"));
    }
    h.push_str("</div>\n");
    Ok(())
}

/// Per-class IoU: the last validation, and the best one beside it.
fn class_table(h: &mut String, last_val: Option<&&Record>, best: Option<&&Record>) {
    h.push_str("<h2>Per-class IoU</h2>\n");
    match last_val.and_then(|r| r.class_iou.as_ref()) {
        Some(classes) => {
            let best_classes = best.and_then(|b| b.class_iou.as_ref());
            let _ = write!(
                h,
                "<table class=\"classes\">\n<tr><th>class</th><th>IoU % (final, iteration {})</th>",
                last_val.map_or(0, |r| r.iteration)
            );
            if let Some(b) = best {
                let _ = write!(h, "<th>IoU % (best, iteration {})</th>", b.iteration);
            }
            h.push_str("</tr>\n");
            for (k, c) in classes.iter().enumerate() {
                let _ = write!(
                    h,
                    "<tr><td>{}</td><td>{}</td>",
                    escape(&c.class),
                    pct(c.iou)
                );
                if best.is_some() {
                    let b = best_classes.and_then(|b| b.get(k)).and_then(|c| c.iou);
                    let _ = write!(h, "<td>{}</td>", pct(b));
                }
                h.push_str("</tr>\n");
            }
            h.push_str("</table>\n");
        }
        None => h.push_str("<p>No per-class IoU logged.</p>\n"),
    }
}

/// The latest validation overlays (image | ground truth | prediction).
fn overlays(h: &mut String, run_dir: &Path, last_val: Option<&&Record>) -> Result<()> {
    h.push_str("<h2>Validation overlays</h2>\n");
    let mut overlays: Vec<_> = std::fs::read_dir(run_dir.join(OVERLAY_DIR))
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "png"))
                .collect()
        })
        .unwrap_or_default();
    overlays.sort();
    if overlays.is_empty() {
        h.push_str("<p>No validation overlays.</p>\n");
    } else {
        let _ = writeln!(
        h,
        "<p>Latest validation{}: image | ground truth | prediction.</p>\n<div class=\"overlays\">",
        last_val.map_or(String::new(), |r| format!(" (iteration {})", r.iteration))
    );
        for p in &overlays {
            let png = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
            let _ = writeln!(h, "{}", png_img(&png, &p.display().to_string(), "overlay"));
        }
        h.push_str("</div>\n");
    }
    Ok(())
}

/// The resolved configuration, the run's environment and the report tool's receipt.
fn config_and_environment(
    h: &mut String,
    config: &str,
    env: Option<&Environment>,
    receipt: &[(String, String)],
) {
    h.push_str("<h2>Resolved configuration</h2>\n");
    if config.is_empty() {
        h.push_str("<p>No config.toml.</p>\n");
    } else {
        let _ = writeln!(h, "<pre class=\"config\">{}</pre>", escape(&config));
    }
    h.push_str("<h2>Environment</h2>\n<table class=\"kv\">\n");
    match env {
        Some(e) => {
            let rows = [
                ("trained with segtool", e.segtool_version.clone()),
                (
                    "libtorch",
                    match &e.libtorch_cuda {
                        Some(c) => format!("{} (CUDA {c} build)", e.libtorch_version),
                        None => e.libtorch_version.clone(),
                    },
                ),
                ("device", e.device.clone()),
                ("intra-op threads", e.threads.to_string()),
                ("world size", e.world_size.to_string()),
                ("precision", e.precision.clone()),
                ("seed", e.seed.to_string()),
                ("determinism", e.determinism.clone()),
                (
                    "last process started at iteration",
                    e.started_at_iteration.to_string(),
                ),
            ];
            for (k, v) in rows {
                let _ = writeln!(h, "<tr><th>{}</th><td>{}</td></tr>", escape(k), escape(&v));
            }
        }
        None => h.push_str("<tr><th>run</th><td>no environment.json</td></tr>\n"),
    }
    for (k, v) in receipt {
        let _ = writeln!(h, "<tr><th>{}</th><td>{}</td></tr>", escape(k), escape(v));
    }
    h.push_str("</table>\n");
}

const STYLE: &str = "body{font-family:sans-serif;margin:2em;color:#222;max-width:1500px}\
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}\
table{border-collapse:collapse}th,td{padding:3px 10px;border-bottom:1px solid #eee;text-align:left}\
table.classes td:nth-child(n+2){text-align:right;font-variant-numeric:tabular-nums}\
.charts{display:flex;flex-wrap:wrap;gap:12px}.chart{width:720px;max-width:100%;border:1px solid #ddd}\
.overlays{display:flex;flex-wrap:wrap;gap:8px}.overlay{image-rendering:pixelated;width:384px}\
pre.config{background:#f6f6f6;padding:10px;overflow:auto;max-height:40em}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648() {
        for (raw, enc) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(raw.as_bytes()), enc);
        }
        assert_eq!(
            escape("<a href=\"x\">&</a>"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&lt;/a&gt;"
        );
    }
}
