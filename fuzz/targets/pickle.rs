//! `.pth` files (`torch.save`): the input is a whole file, zip (PyTorch >= 1.6) or legacy.
//!
//! Feeds it, as a scratch `.pth`, to `segtool import`'s reader, `import::read_state_dict`:
//! Rust opens the container and rewrites the pickle, then libtorch's unpickler runs in the
//! C++ shim (train/csrc/pickle_load.cpp, built with `-fsanitize=address` for fuzzing:
//! SEGTOOL_SHIM_ASAN=1). Then what `segtool import` reads from the state dict before it
//! builds a model: its description, the mmsegmentation check and import (architecture,
//! classes and test pipeline from the file's tensors and meta), or the architecture
//! inferred from the tensor names and shapes.
//!
//! Refuses nothing. Stops before building the model (`import_from` into a `DaNet`), whose
//! size the file's shapes decide.

use std::path::Path;

use segtool_train::import::{self, ImportMode};

pub fn run(data: &[u8]) {
    let path = super::support::write("p.pth", data);
    let Ok(state) = import::read_state_dict(&path) else {
        return;
    };
    let _ = state.describe(Path::new("p.pth"));
    if import::is_mmseg(&state) {
        let _ = import::from_mmseg(state, "p.pth", &Default::default());
    } else {
        let _ = ImportMode::detect(&state);
        if let Ok(arch) = import::infer_architecture(&state) {
            let _ = arch.describe();
            let _ = arch.backbone(8, None);
        }
    }
}
