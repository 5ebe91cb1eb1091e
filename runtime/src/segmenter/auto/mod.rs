//! What [`EngineKind::Auto`](super::EngineKind::Auto) runs: the engine measured fastest
//! for this model on this machine, except where a rule of correctness decides first.
//!
//! Which engine is fastest depends on the CPU (AVX2, AVX-512 VNNI, AMX), the engines'
//! versions, the model and its precision, so no figure from another machine decides it.
//! On first use of a model, auto times every engine that opens it, at the deployment's
//! threads, precision and input size, within a time cap ([`measure`]), keeps the
//! fastest, and caches the choice ([`cache`]), keyed by the model's hash, the CPU and
//! the engines' libraries, as TensorRT keeps a timing cache. What it timed and why it
//! chose is [`Segmenter::engine_choice`](super::Segmenter::engine_choice).
//!
//! The rules that come first are about correctness, not speed:
//! - an INT8 file with full-range weights on an x86 CPU without VNNI runs in tract.
//!   ONNX Runtime's u8s8 kernels there (AVX2) add u8 x s8 pairs in saturating int16,
//!   and so do OpenVINO's, so their labels drift from the QDQ graph's; tract computes it
//!   exactly. `segtool calibrate` picks reduced-range weights on such CPUs; a file
//!   calibrated elsewhere says which range it has.
//! - execution providers other than the CPU asked of ONNX Runtime keep ONNX Runtime.
//! - `bf16` asked for is computed by OpenVINO alone: only OpenVINO is timed, and when it
//!   cannot open the model, ONNX Runtime at float32 is a [`Fallback`](super::Fallback).

pub(super) mod cache;
pub(super) mod measure;

use super::EngineKind;
use crate::engines::openvino_options::Precision;

/// Whether this CPU's u8 x s8 kernels (ONNX Runtime's, OpenVINO's) accumulate without
/// int16 saturation: AVX-512 VNNI or AVX-VNNI on x86_64; other architectures are not
/// affected. Where it is false, full-range INT8 weights drift: calibrate with reduced
/// ones.
pub fn cpu_has_vnni() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512vnni")
            || std::arch::is_x86_feature_detected!("avxvnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    true
}

/// Whether a file's calibration record (`segtool.calibration`) says its weights use the
/// full int8 range; a record without `weight_range` predates the choice, when every
/// file was full-range.
pub(super) fn full_range_weights(calibration: &serde_json::Value) -> bool {
    calibration.get("weight_range").and_then(|v| v.as_str()) != Some("reduced")
}

/// Why auto runs tract for an INT8 file whose weights this CPU's ONNX Runtime and
/// OpenVINO kernels would saturate (`Some`), else `None`.
pub(super) fn prefer_exact_int8(s: &Situation<'_>) -> Option<String> {
    let saturates = s.int8_file && s.full_range_weights && !s.vnni;
    (saturates && s.gpu_providers.is_empty() && cfg!(feature = "tract")).then(|| {
        "an INT8 file with full-range weights on a CPU without VNNI, where ONNX Runtime's \
         and OpenVINO's u8s8 kernels saturate in int16 and drift from the QDQ graph; tract \
         computes it exactly but slower: recalibrate with --weight-range reduced for the \
         faster engines"
            .into()
    })
}

/// What the choice depends on.
pub(super) struct Situation<'a> {
    /// Execution providers other than the CPU asked of ONNX Runtime.
    pub gpu_providers: &'a [String],
    /// The precision asked for.
    pub precision: Precision,
    /// The file is an INT8 (QDQ) model segtool calibrated.
    pub int8_file: bool,
    /// The INT8 file's weights use the full int8 range ([`full_range_weights`]).
    pub full_range_weights: bool,
    /// [`cpu_has_vnni`].
    pub vnni: bool,
}

/// How auto decides in a situation.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Plan {
    /// A rule decides: this engine, for this reason.
    Rule(EngineKind, String),
    /// Time these engines (those this build has) and keep the fastest.
    Measure(Vec<EngineKind>),
}

/// The rules first, then the engines worth timing.
pub(super) fn plan(s: &Situation<'_>) -> Plan {
    if let Some(why) = prefer_exact_int8(s) {
        return Plan::Rule(EngineKind::Tract, why);
    }
    if !s.gpu_providers.is_empty() {
        return Plan::Rule(
            EngineKind::Ort,
            format!("{} asked for", s.gpu_providers.join(", ")),
        );
    }
    if s.precision == Precision::Bf16 {
        return Plan::Rule(
            EngineKind::OpenVino,
            "bf16 asked for, which only OpenVINO computes".into(),
        );
    }
    let built = [
        (EngineKind::Ort, cfg!(feature = "ort")),
        (EngineKind::OpenVino, cfg!(feature = "openvino")),
        (EngineKind::Tract, cfg!(feature = "tract")),
    ];
    Plan::Measure(built.iter().filter(|(_, b)| *b).map(|(k, _)| *k).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn situation(precision: Precision, int8_file: bool) -> Situation<'static> {
        Situation {
            gpu_providers: &[],
            precision,
            int8_file,
            full_range_weights: false,
            vnni: true,
        }
    }

    #[test]
    fn tract_for_full_range_int8_where_kernels_saturate() {
        let saturating = Situation {
            full_range_weights: true,
            vnni: false,
            ..situation(Precision::F32, true)
        };
        let why = prefer_exact_int8(&saturating);
        assert_eq!(why.is_some(), cfg!(feature = "tract"), "{why:?}");
        if let Some(why) = why {
            assert!(why.contains("--weight-range reduced"), "{why}");
        }
        for s in [
            Situation {
                vnni: true,
                ..saturating
            },
            Situation {
                full_range_weights: false,
                ..saturating
            },
            Situation {
                int8_file: false,
                ..saturating
            },
        ] {
            assert_eq!(prefer_exact_int8(&s), None);
        }
        let gpu = ["cuda:0".to_string()];
        assert_eq!(
            prefer_exact_int8(&Situation {
                gpu_providers: &gpu,
                ..saturating
            }),
            None
        );
        let record = |r: &str| serde_json::json!({ "method": "entropy", "weight_range": r });
        assert!(full_range_weights(&record("full")));
        assert!(!full_range_weights(&record("reduced")));
        assert!(full_range_weights(
            &serde_json::json!({ "method": "entropy" })
        ));
    }

    #[test]
    fn rules_first_then_every_engine_is_timed() {
        // No file kind and no CPU decides by itself: float32 and INT8 files alike are timed.
        for int8 in [false, true] {
            let Plan::Measure(engines) = plan(&situation(Precision::F32, int8)) else {
                panic!("a float32 run on the CPU is measured");
            };
            assert_eq!(engines.contains(&EngineKind::Ort), cfg!(feature = "ort"));
            assert_eq!(
                engines.contains(&EngineKind::Tract),
                cfg!(feature = "tract")
            );
            let openvino = engines.contains(&EngineKind::OpenVino);
            assert_eq!(openvino, cfg!(feature = "openvino"));
        }
        let bf16 = plan(&situation(Precision::Bf16, false));
        assert!(
            matches!(bf16, Plan::Rule(EngineKind::OpenVino, _)),
            "{bf16:?}"
        );
        let gpu = ["cuda:0".to_string()];
        let s = Situation {
            gpu_providers: &gpu,
            ..situation(Precision::Bf16, true)
        };
        assert_eq!(
            plan(&s),
            Plan::Rule(EngineKind::Ort, "cuda:0 asked for".into())
        );
        let saturating = Situation {
            full_range_weights: true,
            vnni: false,
            ..situation(Precision::F32, true)
        };
        let exact = plan(&saturating);
        assert_eq!(
            matches!(exact, Plan::Rule(EngineKind::Tract, _)),
            cfg!(feature = "tract"),
            "{exact:?}"
        );
    }
}
