//! `include/segtool.h` is generated from `src/lib.rs` by cbindgen (settings in
//! `cbindgen.toml`). It is checked in rather than written by a build script, so building
//! the library needs neither cbindgen nor a writable source tree. This test regenerates
//! it and fails when the checked-in copy differs; `SEGTOOL_BLESS=1` rewrites it instead.

use std::path::Path;

#[test]
fn checked_in_header_matches_cbindgen_output() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(root.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        // Only this crate: src/lib.rs and the modules it declares (cbindgen follows `mod`
        // items in source order); no `cargo metadata`, no dependency parsing.
        .with_src(root.join("src/lib.rs"))
        .generate()
        .expect("cbindgen generates the header");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let generated = String::from_utf8(generated).expect("UTF-8 header");

    let path = root.join("include/segtool.h");
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    if std::env::var_os("SEGTOOL_BLESS").is_some_and(|v| v != "0") {
        if current != generated {
            std::fs::write(&path, &generated).expect("write include/segtool.h");
            eprintln!("rewrote {}", path.display());
        }
        return;
    }
    if current != generated {
        let first_diff = current
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(current.lines().count().min(generated.lines().count()));
        panic!(
            "{} is stale (first difference at line {}); regenerate it with\n  \
             SEGTOOL_BLESS=1 cargo test -p segtool-capi --test it -- header::\n\
             --- generated header ---\n{generated}",
            path.display(),
            first_diff + 1
        );
    }
    for item in [
        "segtool_open",
        "segtool_segment",
        "segtool_last_error",
        "SEGTOOL_ERR_NULL_ARGUMENT",
        "typedef struct segtool_segmenter segtool_segmenter",
        "extern \"C\"",
    ] {
        assert!(generated.contains(item), "header lacks {item}");
    }
}

/// The options that open a model carry the runtime's names (`SegmenterOptions::NAMES`):
/// each is a field of `segtool_options` (`fixed_size` is `fixed_height` and
/// `fixed_width`: C has no arrays by value).
#[test]
fn options_struct_fields_are_named_as_the_runtime_options() {
    let header =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/include/segtool.h")).unwrap();
    let start = header
        .find("typedef struct segtool_options {")
        .expect("segtool_options in the header");
    let body = &header[start..start + header[start..].find("} segtool_options;").unwrap()];
    for name in segtool_runtime::SegmenterOptions::NAMES {
        let fields = match name {
            "fixed_size" => vec!["fixed_height", "fixed_width"],
            name => vec![name],
        };
        for field in fields {
            assert!(
                body.contains(&format!(" {field};")) || body.contains(&format!("*{field};")),
                "segtool_options has no field {field}:\n{body}"
            );
        }
    }
}
