//! Which integer type activations take, and so where ONNX Runtime can fuse.
//!
//! - [`Layout::Portable`]: int8 activations with zero point 0, the form TensorRT requires
//!   and every engine reads (ORT's CPU, CUDA and TensorRT providers, tract). On x86, ORT's
//!   fused kernels take uint8 activations; its int8 -> uint8 rewrite converts a
//!   QuantizeLinear only when it has a single DequantizeLinear consumer, so every
//!   consumer gets its own Q/DQ pair, and a Relu stays a float op between two of them.
//! - [`Layout::OrtCpu`]: uint8 activations, for ONNX Runtime on CPU. One Q/DQ pair per
//!   tensor (ORT duplicates the DQs it needs itself); a Relu's output is quantised over
//!   [0, T] (zero point 0, scale T/255), so `Conv -> Relu -> Q` becomes one QLinearConv
//!   (ORT drops a Relu whose range the Q already clips); Adds of two activations are
//!   quantised too (QLinearAdd). Measured on a DANet-R18 at 272x640 (AMD EPYC with
//!   AVX-512 VNNI, 1 thread): 21 float Relus -> 2, 0 QLinearAdd -> 11, about 7% less
//!   time. TensorRT refuses nonzero zero points: use the portable layout there.
//! - [`Layout::OpenVino`]: NNCF's placement, for OpenVINO's CPU plugin. As `OrtCpu` (one
//!   pair per tensor, Relus folded, Adds quantised), but signed activations are int8
//!   with zero point 0 (the same grid as uint8 at 128; OpenVINO runs an int8 MatMul only
//!   on zero-point-0 operands, so the attention energies `Q K^T` become int8), and the
//!   attention-weighted sums (`softmax(E) V`, CAM's `softmax(E) X`) are quantised, the
//!   softmax output over [0, T] in uint8. Measured against NNCF 3.4 on ResNet-50 DANet at
//!   512x512 (Intel Xeon with AMX, 2 threads, OpenVINO 2026.4 f32): the same placement
//!   of the position attention, and 0.78x `ort-cpu`'s time (208.6 -> 162.9 ms).

use segtool_onnx::builders::tensor_i8;
use segtool_onnx::proto::{DataType, TensorProto};

use super::scale_of;

/// See the module docs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Layout {
    #[default]
    Portable,
    OrtCpu,
    OpenVino,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Portable => "portable",
            Layout::OrtCpu => "ort-cpu",
            Layout::OpenVino => "openvino",
        }
    }

    /// The layout [`Layout::name`] names.
    pub fn from_name(name: &str) -> Option<Self> {
        [Layout::Portable, Layout::OrtCpu, Layout::OpenVino]
            .into_iter()
            .find(|l| l.name() == name)
    }

    /// Scale and zero point (as a scalar initialiser named `zero_point`) of an activation
    /// whose calibrated threshold is `threshold`; `relu_output`: it cannot be negative.
    pub fn activation(
        self,
        threshold: f32,
        relu_output: bool,
        zero_point: &str,
    ) -> (f32, TensorProto) {
        match self {
            Layout::Portable => (scale_of(threshold), tensor_i8(zero_point, &[], &[0])),
            Layout::OrtCpu => {
                let (scale, zp) = if relu_output {
                    (scale_of(threshold) * 127.0 / 255.0, 0u8)
                } else {
                    (scale_of(threshold), 128u8)
                };
                (scale, tensor_u8(zero_point, zp))
            }
            Layout::OpenVino if relu_output => (
                scale_of(threshold) * 127.0 / 255.0,
                tensor_u8(zero_point, 0),
            ),
            Layout::OpenVino => (scale_of(threshold), tensor_i8(zero_point, &[], &[0])),
        }
    }

    /// Whether Relus fold into the quantised range of their input's Q/DQ pair, Adds of
    /// two activations are quantised, and MaxPools share their input's quantisation.
    pub fn fuses_like_ort_cpu(self) -> bool {
        self != Layout::Portable
    }

    /// Whether each consumer of a quantised tensor needs a Q/DQ pair of its own.
    pub fn pair_per_consumer(self) -> bool {
        self == Layout::Portable
    }
}

fn tensor_u8(name: &str, value: u8) -> TensorProto {
    TensorProto {
        name: name.to_string(),
        data_type: DataType::Uint8 as i32,
        raw_data: vec![value],
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relu_outputs_use_the_whole_uint8_range() {
        let (s, zp) = Layout::OrtCpu.activation(2.55, true, "z");
        assert!((s - 0.01).abs() < 1e-7);
        assert_eq!(
            (zp.data_type, zp.raw_data.as_slice()),
            (DataType::Uint8 as i32, &[0u8][..])
        );
        let (s, zp) = Layout::OrtCpu.activation(1.27, false, "z");
        assert!((s - 0.01).abs() < 1e-7);
        assert_eq!(zp.raw_data, [128]);
        let (s, zp) = Layout::Portable.activation(1.27, true, "z");
        assert!((s - 0.01).abs() < 1e-7);
        assert_eq!(
            (zp.data_type, zp.raw_data.as_slice()),
            (DataType::Int8 as i32, &[0u8][..])
        );
    }
}
