//! What [`EngineKind::Auto`](super::EngineKind::Auto) runs on a CPU: OpenVINO where it
//! was measured faster than ONNX Runtime, ONNX Runtime everywhere else.
//!
//! The rule reads the file's metadata, the precision asked for and the CPU's instruction
//! set once (no timing at open: a robot's start should not pay for two engines).
//! Measured with `bench/openvino_vs_ort.py` on an Intel Xeon with AVX-512 VNNI/BF16 and
//! AMX-BF16/INT8, 2 threads, 512x512, alternating rounds, quiet machine:
//!
//! | file | ONNX Runtime | OpenVINO f32 | |
//! | --- | ---: | ---: | ---: |
//! | ResNet-50 DANet, float32 | 1330 ms | 1375 ms | 0.97x |
//! | the demo's tiny DANet, float32 | 54.3 ms | 44.6 ms | 1.22x |
//! | ResNet-50 DANet, segtool's INT8 file | 475 ms | 223 ms | 2.13x |
//!
//! So: an INT8 file (one segtool calibrated) on a CPU with AMX-INT8 runs in OpenVINO;
//! `bf16` asked for runs in OpenVINO, since ONNX Runtime does not compute it; a float32
//! file at float32 stays in ONNX Runtime (no reliable gain, and ONNX Runtime is the
//! reference for segtool's float numbers). No CPU without AMX was measured, so there
//! INT8 files stay in ONNX Runtime too.
//!
//! One exception comes first: an INT8 file with full-range weights on an x86 CPU without
//! VNNI runs in tract. ONNX Runtime's u8s8 kernels there (AVX2) add u8 x s8 pairs in
//! saturating int16, and so do OpenVINO's: a random tiny DANet agreed with fp32 on 85% of
//! the pixels in ONNX Runtime against 98% in tract, which computes the QDQ graph exactly;
//! a ResNet-18 DANet on 69.8% in OpenVINO (oneDNN capped at AVX2) against 90.4% in ONNX
//! Runtime on this AVX-512 VNNI CPU. `segtool calibrate` picks reduced-range weights on
//! such CPUs; a file calibrated elsewhere says which range it has.
//!
//! ONNX Runtime is also kept when execution providers other than the CPU are asked for,
//! and when OpenVINO cannot open the model (its library is missing, or the graph holds
//! operators it does not read); the reason is part of the choice.

use crate::openvino::Precision;

/// Whether this CPU has AMX-INT8 (CPUID leaf 7, EDX bit 25), with the AVX-512
/// foundation the OS enabled.
pub(super) fn cpu_has_amx_int8() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid_count;
        std::arch::is_x86_feature_detected!("avx512f")
            && __cpuid_count(0, 0).eax >= 7
            && __cpuid_count(7, 0).edx & (1 << 25) != 0
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

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
         and OpenVINO's u8s8 kernels saturate (85% label agreement against tract's 98% on \
         a tiny DANet); tract computes it exactly but slower: recalibrate with \
         --weight-range reduced for ONNX Runtime"
            .into()
    })
}

/// What the choice depends on.
pub(super) struct Situation<'a> {
    /// Execution providers other than the CPU asked of ONNX Runtime.
    pub gpu_providers: &'a [String],
    /// The precision asked of OpenVINO.
    pub precision: Precision,
    /// The file is an INT8 (QDQ) model segtool calibrated.
    pub int8_file: bool,
    /// [`cpu_has_amx_int8`].
    pub amx_int8: bool,
    /// The INT8 file's weights use the full int8 range ([`full_range_weights`]).
    pub full_range_weights: bool,
    /// [`cpu_has_vnni`].
    pub vnni: bool,
}

/// Why auto starts with OpenVINO (`Ok`), or why it runs ONNX Runtime (`Err`).
pub(super) fn prefer_openvino(s: &Situation<'_>) -> Result<String, String> {
    if !s.gpu_providers.is_empty() {
        return Err(format!("{} asked for", s.gpu_providers.join(", ")));
    }
    if !cfg!(feature = "openvino") {
        return Err("this build has no OpenVINO engine".into());
    }
    match (s.precision, s.int8_file, s.amx_int8) {
        (Precision::Bf16, _, _) => Ok("bf16 asked for, which ONNX Runtime does not compute".into()),
        (_, true, true) => Ok("an INT8 file on a CPU with AMX-INT8, where OpenVINO ran \
                               segtool's INT8 files 2.1x faster than ONNX Runtime"
            .into()),
        (_, true, false) => Err("an INT8 file on a CPU without AMX-INT8, where OpenVINO \
                                 was not measured faster"
            .into()),
        (_, false, _) => Err("a float32 file, where OpenVINO f32 measured 0.97x-1.22x \
                              ONNX Runtime's speed (no reliable gain)"
            .into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn situation(precision: Precision, int8_file: bool, amx_int8: bool) -> Situation<'static> {
        Situation {
            gpu_providers: &[],
            precision,
            int8_file,
            amx_int8,
            full_range_weights: false,
            vnni: true,
        }
    }

    #[test]
    fn tract_for_full_range_int8_where_kernels_saturate() {
        let saturating = Situation {
            full_range_weights: true,
            vnni: false,
            ..situation(Precision::F32, true, false)
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
    fn openvino_for_int8_files_on_amx_and_for_bf16_never_for_a_gpu_request() {
        let openvino = cfg!(feature = "openvino");
        let int8_amx = prefer_openvino(&situation(Precision::F32, true, true));
        assert_eq!(int8_amx.is_ok(), openvino, "{int8_amx:?}");
        let bf16 = prefer_openvino(&situation(Precision::Bf16, false, false));
        assert_eq!(bf16.is_ok(), openvino, "{bf16:?}");
        let why = prefer_openvino(&situation(Precision::F32, true, false)).unwrap_err();
        assert!(why.contains("without AMX-INT8"), "{why}");
        let why = prefer_openvino(&situation(Precision::F32, false, true)).unwrap_err();
        assert!(why.starts_with("a float32 file"), "{why}");
        let gpu = ["cuda:0".to_string()];
        let s = Situation {
            gpu_providers: &gpu,
            ..situation(Precision::Bf16, true, true)
        };
        assert_eq!(prefer_openvino(&s).unwrap_err(), "cuda:0 asked for");
    }

    #[test]
    fn amx_int8_as_the_kernel_reports_it() {
        // Linux names the same CPUID bit in /proc/cpuinfo.
        let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
            return;
        };
        let flags = info
            .lines()
            .find(|l| l.starts_with("flags"))
            .unwrap_or_default();
        let has = |f: &str| flags.split_whitespace().any(|x| x == f);
        assert_eq!(
            cpu_has_amx_int8(),
            has("amx_int8") && has("avx512f"),
            "{flags}"
        );
    }
}
