#![cfg(feature = "train")]
//! `segtool report` on a tiny run, opened in a real headless browser (Debian's
//! chromium; when none is on PATH the test runs `SEGTOOL_BROWSER=1 scripts/setup.sh`,
//! which installs it): the page loads nothing from the network, its inline script runs
//! with no console error, and a screenshot shows the curves. `segtool eval --metrics`
//! writes its two charts beside the metrics file.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{p, segtool};

fn ok(out: &std::process::Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// chromium on PATH, installed by the set-up's browser block when missing.
fn chromium() -> PathBuf {
    let find = || {
        std::env::var_os("PATH")
            .into_iter()
            .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
            .map(|d| d.join("chromium"))
            .find(|p| p.is_file())
    };
    if let Some(found) = find() {
        return found;
    }
    let setup = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/setup.sh");
    let status = Command::new("bash")
        .arg(&setup)
        .env("SEGTOOL_BROWSER", "1")
        .stdout(std::process::Stdio::null())
        .status()
        .expect("running scripts/setup.sh");
    assert!(
        status.success(),
        "SEGTOOL_BROWSER=1 scripts/setup.sh failed"
    );
    find().expect("chromium is still not on PATH after SEGTOOL_BROWSER=1 scripts/setup.sh")
}

/// Runs headless chromium on `page` with `extra` flags; (stdout, stderr).
fn browse(browser: &Path, page: &Path, extra: &[&str]) -> (String, String) {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("running chromium");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "chromium failed: {stderr}");
    (stdout, stderr)
}

/// Lines of chromium's log that report a page console error or an uncaught exception.
fn console_errors(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains("CONSOLE") || l.contains("Uncaught"))
        .filter(|l| l.contains("ERROR") || l.contains("Uncaught") || l.contains("Error"))
        .collect()
}

#[test]
fn report_page_renders_in_headless_chromium() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let run = d.join("tiny-run");
    train_tiny_run(&run);
    eval_writes_its_charts(d, &run);
    let page = self_contained_page(d, &run);
    let browser = chromium();
    // The console scan catches errors: a page whose script throws is reported.
    let broken = d.join("broken.html");
    std::fs::write(
        &broken,
        "<!DOCTYPE html><html><body><script>console.error('segtool-probe'); \
         throw new Error('segtool-probe');</script></body></html>",
    )
    .unwrap();
    let (_, stderr) = browse(&browser, &broken, &["--dump-dom"]);
    assert!(
        !console_errors(&stderr).is_empty(),
        "the console scan saw no error on a page that throws:\n{stderr}"
    );

    // The report: its script ran (the marker is filled in) and nothing went to the
    // console as an error.
    let (dom, stderr) = browse(&browser, &page, &["--dump-dom"]);
    let marker = segtool_train::report::READY_MARKER;
    assert!(
        dom.contains(&format!("id=\"{marker}\">report rendered: ")),
        "the page's script did not run:\n{}",
        &dom[dom.len().saturating_sub(2000)..]
    );
    assert!(
        console_errors(&stderr).is_empty(),
        "console errors: {:?}",
        console_errors(&stderr)
    );

    screenshot_shows_the_curves(d, &browser, &page);
}

/// Six iterations with validation every three: the run folder's pictures.
fn train_tiny_run(run: &Path) {
    let out_dir = format!("out_dir={}", p(run));
    let mut args = vec!["train", "--threads", "1", "--set", &out_dir];
    for set in [
        "data.shapes_size=32",
        "data.shapes_train_count=8",
        "data.shapes_val_count=2",
        "optim.iterations=6",
        "optim.batch_size=2",
        "data.workers=1",
        "log.every=1",
        "eval.every=3",
        "eval.batch_size=2",
    ] {
        args.extend(["--set", set]);
    }
    ok(&segtool(&args), "segtool train");
    for f in [
        "loss.png",
        "lr.png",
        "val_miou.png",
        "environment.json",
        "val_overlays/00.png",
    ] {
        assert!(run.join(f).exists(), "run directory lacks {f}");
    }
}

/// `eval --metrics`: the IoU bar chart and the confusion heatmap beside the JSON.
fn eval_writes_its_charts(d: &Path, run: &Path) {
    let metrics = d.join("m.json");
    ok(
        &segtool(&[
            "eval",
            "--checkpoint",
            p(&run.join("last.safetensors")),
            "--data",
            "shapes",
            "--size",
            "32",
            "--val-count",
            "2",
            "--metrics",
            p(&metrics),
        ]),
        "segtool eval",
    );
    for f in ["m.iou.png", "m.confusion.png"] {
        let img = image::open(d.join(f)).unwrap().to_rgb8();
        assert!(
            img.width() >= 500,
            "{f} is {}x{}",
            img.width(),
            img.height()
        );
    }
}

/// `segtool report`: one page, no external resource, the run's figures and tables.
fn self_contained_page(d: &Path, run: &Path) -> PathBuf {
    let page = d.join("report.html");
    ok(
        &segtool(&["report", p(run), "-o", p(&page)]),
        "segtool report",
    );
    let html = std::fs::read_to_string(&page).unwrap();
    // Self-contained: no external resource of any kind.
    for needle in [
        "http://",
        "https://",
        "<link",
        "src=\"/",
        "src=\"file",
        "@import",
        "url(",
    ] {
        assert!(!html.contains(needle), "the page references {needle:?}");
    }
    assert!(html.matches("data:image/png;base64,").count() >= 3 + 2);
    for needle in [
        "Per-class IoU",
        "c0",
        "Resolved configuration",
        "tiny-run",
        "intra-op threads",
    ] {
        assert!(html.contains(needle), "the page lacks {needle:?}");
    }

    page
}

/// A screenshot shows the curves: the charts start below the summary table; their
/// series colours (tab10 blue, orange) cover a real area, and the chart region is far
/// from blank.
fn screenshot_shows_the_curves(d: &Path, browser: &Path, page: &Path) {
    let shot = d.join("shot.png");
    browse(
        browser,
        page,
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1500,1600",
            "--hide-scrollbars",
        ],
    );
    let img = image::open(&shot).unwrap().to_rgb8();
    let near = |p: &image::Rgb<u8>, c: [u8; 3]| {
        p.0.iter()
            .zip(c)
            .all(|(&a, b)| (a as i32 - b as i32).abs() <= 12)
    };
    let blue = img.pixels().filter(|p| near(p, [31, 119, 180])).count();
    let orange = img.pixels().filter(|p| near(p, [255, 127, 14])).count();
    assert!(
        blue > 300 && orange > 100,
        "curve colours in the screenshot: blue {blue}, orange {orange}"
    );
    let rows: Vec<u32> = (0..img.height())
        .filter(|&y| (0..img.width()).any(|x| near(img.get_pixel(x, y), [31, 119, 180])))
        .collect();
    let (top, bottom) = (rows[0], *rows.last().unwrap());
    let mut ink = 0usize;
    for y in top..=bottom {
        for x in 0..img.width() {
            ink += img.get_pixel(x, y).0.iter().any(|&c| c < 200) as usize;
        }
    }
    let area = ((bottom - top + 1) * img.width()) as usize;
    assert!(
        ink * 100 > area,
        "the curve region ({top}..{bottom}) is nearly blank: {ink} of {area} pixels"
    );
}
