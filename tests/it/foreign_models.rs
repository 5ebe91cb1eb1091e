//! Models from elsewhere, served through their model card, against the tools that made
//! them: torchvision's fcn_resnet50, deeplabv3_mobilenet_v3_large and
//! lraspp_mobilenet_v3_large (random weights with batch-norm statistics recalibrated,
//! exported by `torch.onnx.export` with outputs `out` and `aux`;
//! tests/reference/torchvision_ref.py). segtool's masks must equal the argmax of `out`
//! from onnxruntime-Python on torchvision's own preprocessing, pixel for pixel, except
//! where the top two logits are closer than 1e-3 (float32 noise: segtool scales pixels
//! by 1/255 where torchvision divides by 255, a 1-ulp difference; logits here span more
//! than 1, so such near-ties are rare), and at most 0.1% of pixels even there.
//!
//! Each model gets its card another way: flags, a sidecar `M.segtool.toml`, and a card
//! written into a copy by `segtool card --out`; each runs on ONNX Runtime and on tract.

use crate::common;

use std::path::PathBuf;
use std::sync::OnceLock;

use common::{p, segtool};
use serde_json::Value;

/// The exports and references, made once for both tests (exporting three models is most
/// of this file's time) in cargo's temporary folder for tests (target/tmp, replaced on
/// every run): the folder and the script's report.
fn reference() -> &'static (PathBuf, Value) {
    static MADE: OnceLock<(PathBuf, Value)> = OnceLock::new();
    MADE.get_or_init(|| common::reference("torchvision_ref.py", "foreign_models"))
}

const MEAN: &str = "0.485,0.456,0.406";
const STD: &str = "0.229,0.224,0.225";

#[test]
fn torchvision_exports_served_by_their_card_match_onnxruntime_on_torchvisions_preprocessing() {
    let (dir, report) = reference();
    let classes = report["classes"].as_u64().unwrap() as usize;
    let images = dir.join("images");
    for (i, model) in [
        "fcn_resnet50",
        "deeplabv3_mobilenet_v3_large",
        "lraspp_mobilenet_v3_large",
    ]
    .into_iter()
    .enumerate()
    {
        let range = report["models"][model]["logit_range"].as_f64().unwrap();
        assert!(range > 1.0, "{model}: recalibrated logits span {range}");
        let onnx = dir.join(format!("{model}.onnx"));
        let mut card_flags: Vec<String> = Vec::new();
        let served = match i {
            0 => {
                card_flags = ["--mean", MEAN, "--std", STD, "--num-classes", "6"]
                    .map(String::from)
                    .to_vec();
                onnx.clone()
            }
            1 => {
                let names: Vec<String> = (0..classes).map(|c| format!("\"c{c}\"")).collect();
                std::fs::write(
                    onnx.with_extension("segtool.toml"),
                    format!(
                        "classes = [{}]\n[input]\nmean = [{MEAN}]\nstd = [{STD}]\n[output]\nname = \"out\"\n",
                        names.join(", ")
                    ),
                )
                .unwrap();
                onnx.clone()
            }
            _ => {
                let copy = dir.join(format!("{model}.described.onnx"));
                let shown = segtool(&[
                    "card",
                    p(&onnx),
                    "--show",
                    "--out",
                    p(&copy),
                    "--mean",
                    MEAN,
                    "--std",
                    STD,
                    "--num-classes",
                    "6",
                ]);
                assert!(
                    shown.status.success(),
                    "{}",
                    String::from_utf8_lossy(&shown.stderr)
                );
                let table = String::from_utf8_lossy(&shown.stdout);
                assert!(
                    table.contains("input.mean") && table.contains("command line"),
                    "{table}"
                );
                assert!(
                    table.contains("output.name") && table.contains("the graph"),
                    "{table}"
                );
                copy
            }
        };
        let flags: Vec<&str> = card_flags.iter().map(String::as_str).collect();
        for engine in ["ort", "tract"] {
            common::serve_and_compare(
                &images,
                &dir.join("ref").join(model),
                &dir.join(format!("out-{model}-{engine}")),
                &served,
                engine,
                &flags,
                model,
            );
        }
    }
}

#[test]
fn a_foreign_file_without_a_card_names_what_is_missing_and_contradictions_name_both_sides() {
    let (dir, _) = reference();
    let onnx = dir.join("lraspp_mobilenet_v3_large.onnx");
    let images = dir.join("images");
    let out = dir.join("out");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "infer",
            "--model",
            p(&onnx),
            "--input",
            p(&images),
            "--out",
            p(&out),
        ];
        args.extend_from_slice(extra);
        segtool(&args)
    };
    let failed = run(&[]);
    assert!(!failed.status.success());
    let e = String::from_utf8_lossy(&failed.stderr);
    for what in [
        "lraspp_mobilenet_v3_large.onnx",
        "input.mean",
        "num_classes",
        "segtool.toml",
        "--card",
        "--mean",
    ] {
        assert!(e.contains(what), "{what} not in: {e}");
    }
    assert!(!out.exists(), "nothing written for a refused model");
    let failed = run(&["--mean", "0.5", "--std", "0.5", "--num-classes", "6"]);
    let e = String::from_utf8_lossy(&failed.stderr);
    assert!(
        !failed.status.success() && e.contains("1 mean/std values") && e.contains("3 channel"),
        "{e}"
    );
    // The exporter left the output's channel count symbolic: the contradiction shows when
    // the model answers.
    let failed = run(&["--mean", MEAN, "--std", STD, "--classes", "a,b,c"]);
    let e = String::from_utf8_lossy(&failed.stderr);
    assert!(
        !failed.status.success() && e.contains("3 class channels") && e.contains("6"),
        "{e}"
    );
    let failed = run(&[
        "--mean",
        MEAN,
        "--std",
        STD,
        "--num-classes",
        "6",
        "--output-kind",
        "class_map",
    ]);
    let e = String::from_utf8_lossy(&failed.stderr);
    assert!(
        !failed.status.success() && e.contains("class map") && e.contains("float32"),
        "{e}"
    );
}
