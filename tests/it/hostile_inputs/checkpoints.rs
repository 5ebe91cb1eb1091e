//! Checkpoints: safetensors (in process) and PyTorch .pth files (libtorch's unpickler, in
//! children).

use std::path::Path;

use super::{anyhow_string, case_dir, child_runner, fixtures, LIMIT, SMALL_FILE_BOUND};
use super::sweep_support::{self, case_count, mutations, ChildRunner, Tally};

// ---- safetensors checkpoints -----------------------------------------------------------

/// The safetensors header (JSON) of `bytes` and where the data starts.
fn st_header(bytes: &[u8]) -> (serde_json::Value, usize) {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    (serde_json::from_slice(&bytes[8..8 + n]).unwrap(), 8 + n)
}

fn st_with_header(header: &serde_json::Value, data: &[u8]) -> Vec<u8> {
    let text = serde_json::to_vec(header).unwrap();
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&text);
    out.extend_from_slice(data);
    out
}

fn load_checkpoint(p: &Path) -> Result<(), String> {
    let ckpt = segtool_train::Checkpoint::read(p).map_err(anyhow_string)?;
    segtool_train::load_model(&ckpt, tch::Device::Cpu)
        .map(drop)
        .map_err(|e| format!("{}: {e:#}", p.display()))
}

#[test]
fn sweep_safetensors_checkpoints() {
    let f = fixtures();
    let (_, data_start) = st_header(&f.checkpoint);
    let cases = mutations(&f.checkpoint, 0x5afe, case_count(150), &[0, 4, data_start]);
    let dir = case_dir("safetensors");
    let mut t = Tally::new("safetensors (Checkpoint::read + load_model)");
    t.run_in_process(
        &dir,
        "safetensors",
        &cases,
        LIMIT,
        SMALL_FILE_BOUND,
        load_checkpoint,
    );
    t.finish();
    let mut t = Tally::new("safetensors (import::read_state_dict)");
    let few = &cases[..cases.len().min(case_count(200))];
    t.run_in_process(&dir, "safetensors", few, LIMIT, SMALL_FILE_BOUND, |p| {
        segtool_train::import::read_state_dict(p)
            .map(drop)
            .map_err(anyhow_string)
    });
    t.finish();
}

#[test]
fn safetensors_huge_lengths_and_nesting() {
    let f = fixtures();
    let (header, start) = st_header(&f.checkpoint);
    let data = &f.checkpoint[start..];
    let mut cases = Vec::new();
    let mut b = f.checkpoint.clone();
    b[..8].copy_from_slice(&(1u64 << 63).to_le_bytes());
    cases.push(("header length 2^63", b));
    let name = header
        .as_object()
        .unwrap()
        .keys()
        .find(|k| *k != "__metadata__")
        .unwrap()
        .clone();
    let mut h = header.clone();
    h[&name]["shape"] = serde_json::json!([1u64 << 38]); // 2^38 f32 = 1 TB
    cases.push(("a tensor declaring 1 TB (shape)", st_with_header(&h, data)));
    let mut h = header.clone();
    h[&name]["data_offsets"] = serde_json::json!([0, 1u64 << 40]);
    cases.push((
        "a tensor declaring 1 TB (data_offsets)",
        st_with_header(&h, data),
    ));
    let mut h = header.clone();
    h[&name]["shape"] = serde_json::json!([u64::MAX, u64::MAX]);
    cases.push(("shape overflowing u64", st_with_header(&h, data)));
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let text = format!("{{\"x\": {deep}}}");
    let mut b = (text.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(text.as_bytes());
    cases.push(("header JSON nesting 100000 arrays", b));
    let cases: Vec<_> = cases
        .into_iter()
        .map(|(w, bytes)| sweep_support::Case {
            what: w.into(),
            bytes,
        })
        .collect();
    let mut t = Tally::new("safetensors hand-made");
    let dir = case_dir("safetensors_hand");
    t.run_in_process(
        &dir,
        "safetensors",
        &cases,
        LIMIT,
        SMALL_FILE_BOUND,
        load_checkpoint,
    );
    let refused = t.refused;
    t.finish();
    assert_eq!(refused, cases.len(), "every hand-made file is refused");
}

// ---- PyTorch .pth (libtorch's unpickler: in children) ----------------------------------

#[test]
fn sweep_pth_zip_and_legacy() {
    let f = fixtures();
    for (name, seed, n) in [("zip.pth", 0x21b, 250), ("legacy.pth", 0x1e9, 250)] {
        let valid = std::fs::read(f.pth.join(name)).unwrap();
        let cases = mutations(&valid, seed, case_count(n), &[0, 2, 12, 30]);
        let mut t = Tally::new(&format!("pth {name} (import::read_state_dict)"));
        child_runner().run(&mut t, &case_dir("pth"), "pth", "pth", &cases);
        t.finish();
    }
}

#[test]
fn pth_hand_made_hostile_files() {
    let f = fixtures();
    let names = [
        "deep_list_zip.pth",
        "deep_list_legacy.pth",
        "deep_tuple_zip.pth",
        "deep_dict_zip.pth",
        "self_list_zip.pth",
        "numel_2e62_zip.pth",
        "numel_1tb_zip.pth",
        "deflate_4gb_zip.pth",
    ];
    let cases: Vec<_> = names
        .iter()
        .map(|n| sweep_support::Case {
            what: n.to_string(),
            bytes: std::fs::read(f.pth.join(n)).unwrap(),
        })
        .collect();
    let mut t = Tally::new("pth hand-made");
    // 3 GiB of address space: libtorch's own mappings fit, a 4 GiB buffer reserved from
    // the patched size field would not.
    let runner = ChildRunner {
        vmem_kib: 3 << 20,
        ..child_runner()
    };
    runner.run(&mut t, &case_dir("pth_hand"), "pth", "pth", &cases);
    let (refused, accepted) = (t.refused, t.accepted);
    t.finish();
    // deflate_4gb_zip.pth is a sound archive whose size field lies: it may load, within
    // the bound; every other file is refused.
    assert_eq!((refused, accepted), (cases.len() - 1, 1));
}
