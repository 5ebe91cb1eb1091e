//! 1. Gives the `segtool` binary (and this package's tests) an rpath to libtorch's lib
//!    folder, so it runs without LD_LIBRARY_PATH. torch-sys reports that folder to its
//!    direct dependents as DEP_TCH_LIBTORCH_LIB.
//! 2. Compiles the C++ shim csrc/pickle_load.cpp (libtorch's unpickler behind a C ABI, for
//!    `segtool import`) against the headers beside that folder: the pip wheel has
//!    `torch/lib` and `torch/include`, a libtorch download `lib` and `include`.
//! 3. Compiles the C++ shim csrc/c10d_shim.cpp (c10d process groups and collectives for
//!    `segtool_train::dist`) with `-DUSE_C10D_GLOO` against the same headers plus gloo's
//!    (Debian libgloo-dev, /usr/include). ProcessGroupNCCL is compiled in only when the
//!    NCCL and CUDA runtime headers are found (the wheel's nvidia packages): then
//!    `-DUSE_C10D_NCCL` and `cfg(segtool_nccl)`; if that build fails, gloo only, with a
//!    cargo warning.
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

    build_c10d_shim(&lib, &include, &abi);
}

fn build_c10d_shim(lib: &str, include: &std::path::Path, abi: &str) {
    println!("cargo:rerun-if-changed=csrc/c10d_shim.cpp");
    println!("cargo:rustc-check-cfg=cfg(segtool_nccl)");
    let gloo = ["/usr/include/gloo", "/usr/local/include/gloo"]
        .iter()
        .any(|d| PathBuf::from(d).join("config.h").exists());
    assert!(
        gloo,
        "gloo headers not found (/usr/include/gloo): install libgloo-dev (scripts/setup.sh does)"
    );
    let base = || {
        let mut b = cc::Build::new();
        b.cpp(true)
            .file("csrc/c10d_shim.cpp")
            .include(include)
            .include(include.join("torch/csrc/api/include"))
            .flag("-std=c++17")
            .define("USE_C10D_GLOO", None)
            .define("_GLIBCXX_USE_CXX11_ABI", abi)
            .flag_if_supported("-Wno-c++20-extensions")
            .warnings(false);
        b
    };
    // The wheel: <site-packages>/torch/lib; NCCL and the CUDA runtime headers live in
    // <site-packages>/nvidia/{nccl,cu13 or cuda_runtime}/include (the latter complete:
    // cuda_runtime.h includes crt/host_config.h, which only a CUDA toolkit install adds).
    let site = PathBuf::from(lib).join("../..");
    let nccl_inc = site.join("nvidia/nccl/include");
    let cuda_inc = [
        "nvidia/cu13/include",
        "nvidia/cu12/include",
        "nvidia/cuda_runtime/include",
    ]
    .iter()
    .map(|d| site.join(d))
    .find(|d| d.join("cuda_runtime_api.h").exists() && d.join("crt/host_config.h").exists());
    println!("cargo:rerun-if-env-changed=SEGTOOL_NO_NCCL");
    let want_nccl = std::env::var_os("SEGTOOL_NO_NCCL").is_none();
    if let (true, true, Some(cuda_inc)) = (want_nccl, nccl_inc.join("nccl.h").exists(), cuda_inc) {
        let mut b = base();
        b.define("USE_C10D_NCCL", None)
            .define("USE_CUDA", None)
            .include(&nccl_inc)
            .include(&cuda_inc);
        match b.try_compile("segtool_c10d") {
            Ok(()) => {
                println!("cargo:rustc-cfg=segtool_nccl");
                return;
            }
            Err(e) => {
                println!("cargo:warning=c10d shim: building with NCCL failed ({e}); gloo only")
            }
        }
    }
    base().compile("segtool_c10d");
}
