//! 1. Gives the `segtool` binary (and this package's tests) an rpath to libtorch's lib
//!    folder, so it runs without LD_LIBRARY_PATH. torch-sys reports that folder to its
//!    direct dependents as DEP_TCH_LIBTORCH_LIB.
//! 2. Compiles the C++ shim csrc/pickle_load.cpp (libtorch's unpickler behind a C ABI, for
//!    `segtool import`) against the headers beside that folder: the pip wheel has
//!    `torch/lib` and `torch/include`, a libtorch download `lib` and `include`.
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    println!("cargo:rerun-if-changed=csrc/pickle_load.cpp");
    let lib =
        std::env::var("DEP_TCH_LIBTORCH_LIB").expect("torch-sys exports DEP_TCH_LIBTORCH_LIB");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");

    println!("cargo:rerun-if-env-changed=LIBTORCH_CXX11_ABI");
    let abi = std::env::var("LIBTORCH_CXX11_ABI").unwrap_or_else(|_| "1".into());
    let include = PathBuf::from(&lib)
        .parent()
        .expect("libtorch lib dir has a parent")
        .join("include");
    assert!(
        include.join("torch").is_dir(),
        "no libtorch headers in {}",
        include.display()
    );
    cc::Build::new()
        .cpp(true)
        .file("csrc/pickle_load.cpp")
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .flag("-std=c++17")
        // The pip wheels (and libtorch's cxx11-abi downloads) use the new libstdc++ ABI;
        // LIBTORCH_CXX11_ABI=0 (torch-sys's own override) selects the old one.
        .define("_GLIBCXX_USE_CXX11_ABI", abi.as_str())
        // torch's headers use a C++20 extension that GCC accepts in C++17 with a warning.
        .flag_if_supported("-Wno-c++20-extensions")
        .warnings(false)
        .compile("segtool_pickle");
}
