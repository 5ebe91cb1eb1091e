//! Records where the setup script found libonnxruntime (`SEGTOOL_ORT_DYLIB`) and
//! libopenvino_c (`SEGTOOL_OPENVINO_LIB`), which the engines read with `option_env!`:
//! rebuild when they change so a stale path is never baked in.
fn main() {
    println!("cargo:rerun-if-env-changed=SEGTOOL_ORT_DYLIB");
    println!("cargo:rerun-if-env-changed=SEGTOOL_OPENVINO_LIB");
    println!("cargo:rerun-if-changed=build.rs");
}
