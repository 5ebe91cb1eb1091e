//! What [`EngineKind::Auto`](super::EngineKind::Auto) runs on a CPU: OpenVINO on the
//! CPUs where it was measured faster than ONNX Runtime, ONNX Runtime everywhere else.
//!
//! The rule is the CPU's instruction set, read once (no timing at open: a robot's start
//! should not pay for two engines). Measured with `bench/openvino_vs_ort.py` on an Intel
//! Xeon with AVX-512 VNNI/BF16 and AMX-BF16/INT8, 2 threads, 512x512 real frames, both
//! engines in float32: OpenVINO ran ResNet-50 DANet at 1.96x ONNX Runtime's speed and the
//! demo model at 1.22x; the INT8 file at 2.06x. No CPU without AVX-512 BF16 or AMX was
//! measured, so there ONNX Runtime stays. The default precision is float32 in both
//! engines, so labels do not change with the choice (OpenVINO f32 against ONNX Runtime:
//! 1.3e-5 on the demo model's logits).
//!
//! ONNX Runtime is kept, whatever the CPU, when execution providers other than the CPU
//! are asked for, and when OpenVINO cannot open the model (its library is missing, or
//! the graph holds operators it does not read, such as `--target ort`'s com.microsoft
//! fused attention); the reason is part of the choice.

/// The CPU feature that makes OpenVINO the choice, when this CPU has one: `AMX-BF16` or
/// `AVX512-BF16` (each implies the AVX-512 foundation, which the OS must enable).
pub(super) fn openvino_cpu_class() -> Option<&'static str> {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid_count;
        if !std::arch::is_x86_feature_detected!("avx512f") || __cpuid_count(0, 0).eax < 7 {
            return None;
        }
        // CPUID leaf 7: sub-leaf 0 EDX bit 22 is AMX-BF16; sub-leaf 1 EAX bit 5 is
        // AVX512_BF16.
        if __cpuid_count(7, 0).edx & (1 << 22) != 0 {
            return Some("AMX-BF16");
        }
        if __cpuid_count(7, 0).eax >= 1 && __cpuid_count(7, 1).eax & (1 << 5) != 0 {
            return Some("AVX512-BF16");
        }
        None
    }
    #[cfg(not(target_arch = "x86_64"))]
    None
}

/// Why auto starts with OpenVINO (`Ok`), or why it runs ONNX Runtime (`Err`).
pub(super) fn prefer_openvino(
    cpu_class: Option<&str>,
    gpu_providers: &[String],
) -> Result<String, String> {
    if !gpu_providers.is_empty() {
        return Err(format!("{} asked for", gpu_providers.join(", ")));
    }
    if !cfg!(feature = "openvino") {
        return Err("this build has no OpenVINO engine".into());
    }
    match cpu_class {
        Some(class) => Ok(format!(
            "this CPU has {class}, where OpenVINO measured faster than ONNX Runtime"
        )),
        None => Err(
            "this CPU has neither AMX nor AVX-512 BF16, where OpenVINO was not measured faster"
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openvino_only_on_the_measured_cpus_and_never_for_a_gpu_request() {
        if cfg!(feature = "openvino") {
            let why = prefer_openvino(Some("AMX-BF16"), &[]).unwrap();
            assert!(why.contains("AMX-BF16"), "{why}");
        }
        let why = prefer_openvino(None, &[]).unwrap_err();
        assert!(why.contains("neither AMX nor AVX-512 BF16"), "{why}");
        let why = prefer_openvino(Some("AMX-BF16"), &["cuda:0".into()]).unwrap_err();
        assert_eq!(why, "cuda:0 asked for");
    }

    #[test]
    fn the_cpu_class_agrees_with_the_kernel() {
        // Linux names the same CPUID bits in /proc/cpuinfo.
        let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
            return;
        };
        let flags = info
            .lines()
            .find(|l| l.starts_with("flags"))
            .unwrap_or_default();
        let has = |f: &str| flags.split_whitespace().any(|x| x == f);
        let want = if has("amx_bf16") && has("avx512f") {
            Some("AMX-BF16")
        } else if has("avx512_bf16") && has("avx512f") {
            Some("AVX512-BF16")
        } else {
            None
        };
        assert_eq!(openvino_cpu_class(), want, "{flags}");
    }
}
