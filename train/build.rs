//! 1. Gives the `segtool` binary (and this package's tests) an rpath to libtorch's lib
//!    folder, so it runs without LD_LIBRARY_PATH. torch-sys reports that folder to its
//!    direct dependents as DEP_TCH_LIBTORCH_LIB.
//! 2. Compiles the C++ shim csrc/pickle_load.cpp (libtorch's unpickler behind a C ABI, for
//!    `segtool import`) against the headers beside that folder: the pip wheel has
//!    `torch/lib` and `torch/include`, a libtorch download `lib` and `include`. With
//!    `SEGTOOL_SHIM_ASAN=1` (the fuzz build, fuzz/) under AddressSanitizer.
//! 3. Compiles the C++ shim csrc/c10d_shim.cpp (c10d process groups and collectives for
//!    `segtool_train::dist`) with `-DUSE_C10D_GLOO` against the same headers plus gloo's
//!    (Debian libgloo-dev, /usr/include), and with `-DUSE_C10D_NCCL` (ProcessGroupNCCL,
//!    `cfg(segtool_nccl)`) against the wheel's nvidia NCCL and CUDA headers, linked to
//!    libnccl with an rpath to its folder. That is the default and a missing header is an
//!    error naming it; only a CPU-only libtorch (no libtorch_cuda.so) or
//!    `SEGTOOL_NO_NCCL=1` builds gloo alone.
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
    let mut pickle = cc::Build::new();
    // The fuzz crate (fuzz/, scripts/fuzz.sh) runs the pickle shim under AddressSanitizer:
    // SEGTOOL_SHIM_ASAN=1 instruments it (the ASan runtime is the one rustc links for
    // -Zsanitizer=address). Off by default.
    println!("cargo:rerun-if-env-changed=SEGTOOL_SHIM_ASAN");
    if std::env::var_os("SEGTOOL_SHIM_ASAN").is_some_and(|v| v == "1") {
        pickle.flag("-fsanitize=address").flag("-fno-omit-frame-pointer");
    }
    pickle
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
        // No debug info for the shims: nobody steps into them, and it slows their compile.
        .debug(false)
        .compile("segtool_pickle");

    build_c10d_shim(&lib, &include, &abi);
}

fn build_c10d_shim(lib: &str, include: &std::path::Path, abi: &str) {
    println!("cargo:rerun-if-changed=csrc/c10d_shim.cpp");
    println!("cargo:rustc-check-cfg=cfg(segtool_nccl)");
    let gloo = ["/usr/include/gloo", "/usr/local/include/gloo"]
        .iter()
        .find(|d| PathBuf::from(d).join("config.h").exists())
        .expect(
            "gloo headers not found (/usr/include/gloo): install libgloo-dev (scripts/setup.sh does)",
        );
    // For env_report (`segtool doctor`): what this build used.
    println!("cargo:rustc-env=SEGTOOL_GLOO_INCLUDE={gloo}");
    println!("cargo:rustc-env=SEGTOOL_TORCH_LIB_DIR={lib}");
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .file("csrc/c10d_shim.cpp")
        .include(include)
        .include(include.join("torch/csrc/api/include"))
        .flag("-std=c++17")
        .define("USE_C10D_GLOO", None)
        .define("_GLIBCXX_USE_CXX11_ABI", abi)
        .flag_if_supported("-Wno-c++20-extensions")
        .warnings(false)
        .debug(false);

    println!("cargo:rerun-if-env-changed=SEGTOOL_NO_NCCL");
    let torch_cuda = PathBuf::from(lib).join("libtorch_cuda.so").exists();
    if std::env::var_os("SEGTOOL_NO_NCCL").is_some() || !torch_cuda {
        if !torch_cuda {
            println!(
                "cargo:warning=c10d shim: {lib} has no libtorch_cuda.so (a CPU-only libtorch): \
                 gloo only, no NCCL"
            );
        }
        build.compile("segtool_c10d");
        return;
    }
    let nccl = NcclPaths::find(lib).unwrap_or_else(|missing| {
        panic!(
            "c10d shim: NCCL is built by default, but {missing}. scripts/setup.sh installs \
             the headers (requirements-gpu-headers.txt: nvidia-cuda-crt, nvidia-cuda-cccl \
             beside the wheel's nvidia-cuda-runtime and nvidia-nccl-cu13); \
             SEGTOOL_NO_NCCL=1 builds gloo only"
        )
    });
    build
        .define("USE_C10D_NCCL", None)
        .define("USE_CUDA", None)
        .include(&nccl.nccl_include)
        .include(&nccl.cuda_include);
    if let Err(e) = build.try_compile("segtool_c10d") {
        panic!("c10d shim: compiling with NCCL failed: {e} (SEGTOOL_NO_NCCL=1 builds gloo only)");
    }
    println!("cargo:rustc-cfg=segtool_nccl");
    // The shim calls NCCL (ncclGetVersion) and c10_cuda (device count, allocator
    // statistics) itself; torch-sys links torch_cuda, which holds ProcessGroupNCCL.
    println!("cargo:rustc-link-lib=dylib=c10_cuda");
    println!("cargo:rustc-link-search=native={}", nccl.nccl_lib.display());
    // The wheel ships libnccl.so.2 only (no libnccl.so development link).
    println!("cargo:rustc-link-lib=dylib:+verbatim=libnccl.so.2");
    // This package's tests and examples find libnccl through an rpath; the `segtool`
    // binary's build script reads DEP_SEGTOOL_C10D_RPATH (the `links` key) for its own.
    let rpath = nccl.nccl_lib.display().to_string();
    println!("cargo:rustc-env=SEGTOOL_NCCL_LIB_DIR={rpath}");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{rpath}");
    println!("cargo:rpath={rpath}");
}

/// Where the pip wheel's nvidia packages keep NCCL and the CUDA runtime headers:
/// `<site-packages>/nvidia/{nccl,cu13}` beside `<site-packages>/torch/lib`.
struct NcclPaths {
    nccl_include: PathBuf,
    nccl_lib: PathBuf,
    cuda_include: PathBuf,
}

impl NcclPaths {
    /// The paths, or what is missing. `cuda_runtime.h` needs `crt/host_config.h`
    /// (nvidia-cuda-crt) and `nccl.h`'s `cuda_fp16.h` needs `nv/target` (nvidia-cuda-cccl):
    /// neither comes with the torch wheel.
    fn find(torch_lib: &str) -> Result<Self, String> {
        let site = PathBuf::from(torch_lib).join("../..");
        let nccl_include = site.join("nvidia/nccl/include");
        let nccl_lib = site.join("nvidia/nccl/lib");
        if !nccl_include.join("nccl.h").exists() {
            return Err(format!(
                "{} is missing",
                nccl_include.join("nccl.h").display()
            ));
        }
        if !nccl_lib.join("libnccl.so.2").exists() {
            return Err(format!(
                "{} is missing",
                nccl_lib.join("libnccl.so.2").display()
            ));
        }
        let candidates = [
            "nvidia/cu13/include",
            "nvidia/cu12/include",
            "nvidia/cuda_runtime/include",
        ];
        let cuda_include = candidates
            .iter()
            .map(|d| site.join(d))
            .find(|d| d.join("cuda_runtime_api.h").exists())
            .ok_or_else(|| {
                format!(
                    "no CUDA runtime headers in {}/{{{}}}",
                    site.display(),
                    candidates.join(",")
                )
            })?;
        for needed in ["crt/host_config.h", "nv/target"] {
            if !cuda_include.join(needed).exists() {
                return Err(format!(
                    "{} is missing",
                    cuda_include.join(needed).display()
                ));
            }
        }
        Ok(Self {
            nccl_include: std::fs::canonicalize(&nccl_include).unwrap_or(nccl_include),
            nccl_lib: std::fs::canonicalize(&nccl_lib).unwrap_or(nccl_lib),
            cuda_include: std::fs::canonicalize(&cuda_include).unwrap_or(cuda_include),
        })
    }
}
