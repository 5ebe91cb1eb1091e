//! Shared by the C programs' tests: finding the `libsegtool.so` cargo built for this
//! test binary, compiling a program of `tests/c/` against it and the header, running it
//! (optionally under valgrind) with that library first on the search path.

#![allow(dead_code)] // each test binary uses its part

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The directory holding the `libsegtool.so` built alongside this test binary: its
/// `deps/` or `target/<profile>/` (where `cargo build` uplifts it), whichever copy is
/// newer, since `cargo test` rebuilds only the one in `deps/`.
pub fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let candidates = [deps.parent().unwrap().to_path_buf(), deps.to_path_buf()];
    let modified = |d: &PathBuf| {
        std::fs::metadata(d.join("libsegtool.so"))
            .and_then(|m| m.modified())
            .ok()
    };
    candidates
        .iter()
        .filter_map(|d| Some((modified(d)?, d)))
        .max()
        .map(|(_, d)| d.clone())
        .unwrap_or_else(|| {
            panic!(
                "libsegtool.so not found in {candidates:?}; cargo builds it (crate-type \
                 cdylib) before this test"
            )
        })
}

/// Compiles `tests/c/<name>.c` (plus `extra` flags, e.g. `-pthread`); returns the
/// executable.
pub fn compile(name: &str, extra: &[&str]) -> PathBuf {
    {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let lib = lib_dir();
        let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("segtool-capi");
        std::fs::create_dir_all(&out_dir).unwrap();
        let exe = out_dir.join(format!("{name}-{}", std::process::id()));
        let mut rpath = std::ffi::OsString::from("-Wl,-rpath,");
        rpath.push(&lib);
        let output = Command::new(std::env::var_os("CC").unwrap_or_else(|| "cc".into()))
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-g", "-O1"])
            .arg(root.join(format!("tests/c/{name}.c")))
            .arg("-I")
            .arg(root.join("include"))
            .arg("-L")
            .arg(&lib)
            .arg("-lsegtool")
            .arg(&rpath)
            .args(extra)
            .arg("-o")
            .arg(&exe)
            .output()
            .expect("running the C compiler `cc` (set CC to use another)");
        assert!(
            output.status.success(),
            "compiling {name}.c failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        exe
    }
}

pub fn show(output: &Output) -> String {
    format!(
        "status {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// `program` with `args`, under `wrapper` (e.g. valgrind and its options) if not empty,
/// with the library it was linked against ahead of cargo's `LD_LIBRARY_PATH` (which
/// outranks the program's RUNPATH and may list a stale uplifted copy first).
pub fn command(wrapper: &[&str], program: &Path) -> Command {
    let mut cmd = match wrapper.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(program);
            c
        }
        None => Command::new(program),
    };
    let mut library_path = std::ffi::OsString::from(lib_dir());
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
        library_path.push(":");
        library_path.push(old);
    }
    cmd.env("LD_LIBRARY_PATH", library_path);
    cmd
}

/// valgrind's path, if installed.
pub fn valgrind() -> Option<&'static str> {
    ["/usr/bin/valgrind", "/usr/local/bin/valgrind"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
}

/// The options of the leak checks: no memory errors, nothing definitely or indirectly
/// lost ("still reachable": process-wide caches; "possibly lost": thread stacks).
pub const VALGRIND_OPTIONS: [&str; 6] = [
    "--leak-check=full",
    "--show-leak-kinds=definite,indirect",
    "--errors-for-leak-kinds=definite,indirect",
    "--error-exitcode=1",
    "--num-callers=30",
    // tract Conv false positives under smallvec's `union` layout (the file says why)
    concat!("--suppressions=", env!("CARGO_MANIFEST_DIR"), "/tests/valgrind.supp"),
];

/// valgrind's stderr shows no error and no definite or indirect leak.
pub fn valgrind_clean(stderr: &str) -> bool {
    let clean = |kind: &str| {
        stderr.contains("All heap blocks were freed")
            || stderr
                .lines()
                .any(|l| l.contains(&format!("{kind} lost: 0 bytes in 0 blocks")))
            || !stderr.contains(&format!("{kind} lost:"))
    };
    clean("definitely") && clean("indirectly") && stderr.contains("ERROR SUMMARY: 0 errors")
}
