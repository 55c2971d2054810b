//! What a Python stack means: the training-loop phase a stack of the training thread is in, and
//! the data-loading stage a stack of the input pipeline is spending its time in.
//!
//! Pure functions of frame names and file paths (and, for host–device syncs, the source text
//! of the innermost user frame, which the sampler reads once per frame). They know the frames
//! that PyTorch, torchvision, PIL, Lightning, Hugging Face Trainer and accelerate really use;
//! `tests/fixtures/pystacks/` holds stacks captured from real runs that they are tested on.
//!
//! Frames are given outermost first. Names are what CPython 3.11+ reports as the qualified name
//! (`_MultiProcessingDataLoaderIter._next_data`); older versions give the bare function name
//! (`_next_data`), which the rules accept too.

use serde::{Deserialize, Serialize};

/// One frame as the classifier sees it.
#[derive(Debug, Clone, Copy)]
pub struct FrameRef<'a> {
    /// Function name, qualified with its class where the interpreter says so.
    pub name: &'a str,
    /// Source file path as the interpreter knows it.
    pub file: &'a str,
    /// The source line being executed, when it was read (user code only).
    pub src: Option<&'a str>,
}

/// Where the training thread's time goes.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    Default,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[strum(serialize_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Blocked in (or doing) the fetch of the next batch.
    DataWait,
    Forward,
    Backward,
    Optimizer,
    /// Host–device synchronisation (`.item()`, `.cpu()`, `torch.cuda.synchronize`, ...).
    Sync,
    /// Saving a checkpoint.
    CheckpointIo,
    #[default]
    Other,
}

impl Phase {
    pub const ALL: &'static [Phase] = <Phase as strum::VariantArray>::VARIANTS;

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn index(self) -> usize {
        Phase::ALL.iter().position(|p| *p == self).unwrap_or(6)
    }

    pub fn parse(s: &str) -> Option<Phase> {
        Phase::ALL.iter().copied().find(|p| p.as_str() == s)
    }
}

/// The method part of a qualified name: `Foo.bar` → `bar`, `bar` → `bar`.
pub fn method(name: &str) -> &str {
    name.rsplit('.').next().unwrap_or(name)
}

/// The class part of a qualified name, when there is one: `Foo.bar` → `Foo`.
pub fn class(name: &str) -> Option<&str> {
    let mut it = name.rsplitn(2, '.');
    it.next();
    it.next().map(|c| c.rsplit('.').next().unwrap_or(c))
}

/// Normalised path (backslashes turned, so Windows-made fixtures read the same).
fn has(file: &str, part: &str) -> bool {
    file.contains(part)
}

/// Library code (site-packages, the standard library), as opposed to the user's own files.
pub(crate) fn is_library(file: &str) -> bool {
    file.contains("site-packages/")
        || file.contains("dist-packages/")
        || file.contains("/lib/python3")
        || file.starts_with('<')
}

/// A frame that fetches the next batch for the training loop.
fn is_data_fetch(f: &FrameRef) -> bool {
    let m = method(f.name);
    if has(f.file, "torch/utils/data/") {
        // The DataLoader iterator and everything under it.
        return true;
    }
    // Lightning's fetchers, accelerate's DataLoader wrappers, HF Trainer's batch collection.
    if has(f.file, "lightning/pytorch/loops/fetchers.py")
        || has(f.file, "pytorch_lightning/loops/fetchers.py")
        || has(f.file, "lightning/pytorch/loops/fetching.py")
        || has(f.file, "accelerate/data_loader.py")
        || has(f.file, "lightning/fabric/wrappers.py") && m == "__iter__"
    {
        return true;
    }
    if m == "get_batch_samples" && has(f.file, "transformers/trainer.py") {
        return true;
    }
    if matches!(m, "_next_data" | "_get_data" | "_try_get_data") {
        return true;
    }
    // A loader-like iterator of any library or of the user's own (DALI, FFCV, custom loaders).
    if matches!(m, "__next__" | "__iter__" | "next" | "_next_data") {
        if let Some(c) = class(f.name) {
            let c = c.to_ascii_lowercase();
            if c.contains("loader") || c.contains("fetcher") || c.contains("dataiter") {
                return true;
            }
        }
    }
    false
}

/// Source text that synchronises the host with the device.
pub(crate) fn is_sync_source(src: &str) -> bool {
    // Not `.numpy()`: a CUDA tensor refuses it (it needs `.cpu()` first), a CPU one has
    // nothing to wait for.
    const CALLS: [&str; 6] = [
        ".item()",
        ".cpu()",
        ".tolist()",
        "synchronize(",
        ".to(\"cpu\")",
        ".to('cpu')",
    ];
    CALLS.iter().any(|c| src.contains(c))
}

fn marker(f: &FrameRef) -> Option<Phase> {
    let m = method(f.name);
    let c = class(f.name);
    // Checkpoints.
    if (m == "save" || m == "_save") && has(f.file, "torch/serialization.py")
        || matches!(
            m,
            "save_checkpoint" | "_save_checkpoint" | "save_state" | "save_model"
        )
    {
        return Some(Phase::CheckpointIo);
    }
    // Synchronisation visible as Python frames.
    let torch_sync = ["torch/cuda/", "torch/xpu/", "torch/mps/"]
        .iter()
        .any(|d| has(f.file, d))
        || c.is_some_and(|c| c == "Event" || c == "Stream");
    if m == "synchronize" && torch_sync
        || matches!(m, "__format__" | "__repr__") && has(f.file, "torch/_tensor")
    {
        return Some(Phase::Sync);
    }
    // Backward (grad_mode.py holds no_grad's decorators, which wrap any code).
    if has(f.file, "torch/autograd/") && !has(f.file, "grad_mode") && !has(f.file, "profiler")
        || m == "backward"
        || m == "_engine_run_backward"
        || m == "manual_backward"
    {
        return Some(Phase::Backward);
    }
    // Optimizer.
    let optim_class = c.is_some_and(|c| {
        let l = c.to_ascii_lowercase();
        [
            "optim", "sgd", "adam", "scaler", "lamb", "lion", "rmsprop", "adagrad",
        ]
        .iter()
        .any(|k| l.contains(k))
    });
    if has(f.file, "torch/optim/")
        || has(f.file, "accelerate/optimizer.py")
        || has(f.file, "torch/amp/grad_scaler.py")
        || matches!(m, "zero_grad" | "optimizer_step" | "_optimizer_step")
        || m == "step" && optim_class
    {
        return Some(Phase::Optimizer);
    }
    // Forward: a module call, the loss, a training_step hook.
    if m == "forward"
        || matches!(m, "_call_impl" | "_wrapped_call_impl")
        || matches!(m, "training_step" | "compute_loss")
        || has(f.file, "torch/nn/functional.py")
    {
        return Some(Phase::Forward);
    }
    None
}

/// The training-loop phase of one stack of the training thread (frames outermost first).
///
/// Fetching the next batch wins wherever it is in the stack (with `num_workers=0` the
/// transforms running under it are modules with a `forward` too); otherwise the innermost
/// phase marker decides (Lightning runs forward and backward inside the optimizer's closure).
/// An innermost user frame whose line calls `.item()`, `.cpu()`, `.tolist()` or
/// `synchronize()` is a sync: the C call itself is invisible to a Python stack.
pub(crate) fn classify(frames: &[FrameRef]) -> Phase {
    // Importing a module (torch/autograd/__init__.py's `<module>` is no backward pass).
    if frames
        .iter()
        .any(|f| f.file.starts_with("<frozen importlib"))
    {
        return Phase::Other;
    }
    if frames.iter().any(is_data_fetch) {
        return Phase::DataWait;
    }
    if let Some(leaf) = frames.last() {
        if !is_library(leaf.file) && leaf.src.is_some_and(is_sync_source) {
            return Phase::Sync;
        }
    }
    frames.iter().rev().find_map(marker).unwrap_or(Phase::Other)
}

/// A frame a training loop passes through: used to pick the training thread.
pub fn is_loop_phase(p: Phase) -> bool {
    p != Phase::Other
}

/// What a data-loading stage is.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[strum(serialize_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum StageKind {
    /// A transform's `__call__` / `forward` (torchvision, albumentations, the user's own).
    Transform,
    /// PIL image decode (`ImageFile.load`, `Image.open`).
    Decode,
    /// PIL `resize`, `convert`, `thumbnail`.
    Image,
    /// numpy / cv2 calls.
    Array,
    /// File reads (`open`/`read`, `torch.load`, `np.load`).
    Read,
    /// The dataset's own `__getitem__` (its self time and calls not named above).
    Getitem,
}

impl StageKind {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// A frame that starts loading one sample: the dataset's `__getitem__` (the user's, a
/// torchvision or Hugging Face dataset) or PyTorch's fetcher.
fn is_data_root(f: &FrameRef) -> bool {
    let m = method(f.name);
    if m == "fetch" && has(f.file, "torch/utils/data/_utils/fetch.py") {
        return true;
    }
    if m == "__getitem__" || m == "__getitems__" {
        return !is_library(f.file)
            || has(f.file, "torchvision/datasets/")
            || has(f.file, "datasets/arrow_dataset.py")
            || has(f.file, "torch/utils/data/dataset.py");
    }
    false
}

const PIL_DECODE: [&str; 2] = ["load", "open"];
const PIL_IMAGE: [&str; 4] = ["resize", "convert", "thumbnail", "reduce"];

fn stage_of(f: &FrameRef) -> Option<StageKind> {
    let m = method(f.name);
    let file = f.file;
    if has(file, "/PIL/") {
        if m == "load"
            && (class(f.name).is_some_and(|c| c.ends_with("ImageFile"))
                || has(file, "ImageFile.py"))
        {
            return Some(StageKind::Decode);
        }
        if PIL_DECODE.contains(&m) {
            return Some(StageKind::Decode);
        }
        if PIL_IMAGE.contains(&m) {
            return Some(StageKind::Image);
        }
        return None;
    }
    if has(file, "/numpy/") || has(file, "/cv2/") {
        if m == "load" && has(file, "npyio") {
            return Some(StageKind::Read);
        }
        return Some(StageKind::Array);
    }
    if m == "load" && has(file, "torch/serialization.py") {
        return Some(StageKind::Read);
    }
    if matches!(m, "read" | "readinto" | "open" | "read_bytes" | "read_file")
        && (is_library(file) || has(file, "/io.py"))
    {
        return Some(StageKind::Read);
    }
    if matches!(m, "__call__" | "forward") {
        let c = class(f.name).unwrap_or("");
        // Containers that only call the real transforms.
        if !matches!(
            c,
            "Compose" | "Sequential" | "RandomApply" | "RandomChoice" | "OneOf"
        ) {
            return Some(StageKind::Transform);
        }
    }
    if !is_library(file) {
        if let Some(src) = f.src {
            if src.contains("cv2.") || src.contains("np.") || src.contains("numpy.") {
                return Some(StageKind::Array);
            }
            if src.contains("open(") || src.contains(".read(") || src.contains("read_bytes(") {
                return Some(StageKind::Read);
            }
        }
    }
    None
}

/// The stage of a data-loading stack: the index of the frame to charge and its kind, or `None`
/// when the stack is not loading data.
///
/// Walking inwards from the dataset's `__getitem__`, the innermost named stage wins, except that
/// inside one library the frame the caller entered by is kept (`np.stack`, not numpy's private
/// helper beneath it), and PIL's `ImageFile.load` (the JPEG decode) beats the `convert` or
/// `resize` that triggered it. Frames between stages are charged to the stage around them.
pub fn data_stage(frames: &[FrameRef]) -> Option<(usize, StageKind)> {
    let root = frames.iter().position(is_data_root)?;
    // The innermost __getitem__ at or below the root is the dataset's.
    let mut cur = (root, StageKind::Getitem);
    for (i, f) in frames.iter().enumerate().skip(root + 1) {
        if method(f.name) == "__getitem__" && is_data_root(f) {
            cur = (i, StageKind::Getitem);
            continue;
        }
        let Some(k) = stage_of(f) else { continue };
        let cur_file = frames[cur.0].file;
        let same_lib = |a: &str| has(cur_file, a) && has(f.file, a);
        let keep = match k {
            StageKind::Decode => false,
            _ if same_lib("/PIL/") => true,
            StageKind::Array | StageKind::Read if same_lib("/numpy/") || same_lib("/cv2/") => true,
            _ => false,
        };
        if !keep {
            cur = (i, k);
        }
    }
    // A fetch root with nothing below it (collation, sampler) is charged to fetch itself.
    Some(cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(v: &[(&'static str, &'static str)]) -> Vec<FrameRef<'static>> {
        v.iter()
            .map(|(n, f)| FrameRef {
                name: n,
                file: f,
                src: None,
            })
            .collect()
    }

    const DL: &str = "/v/lib/python3.11/site-packages/torch/utils/data/dataloader.py";
    const NN: &str = "/v/lib/python3.11/site-packages/torch/nn/modules/module.py";

    #[test]
    fn data_wait_wins_over_transforms_that_are_modules() {
        let s = st(&[
            ("<module>", "train.py"),
            ("_SingleProcessDataLoaderIter._next_data", DL),
            (
                "_MapDatasetFetcher.fetch",
                "/v/lib/python3.11/site-packages/torch/utils/data/_utils/fetch.py",
            ),
            ("ImageDataset.__getitem__", "/home/u/train.py"),
            ("Module._call_impl", NN),
            (
                "ColorJitter.forward",
                "/v/site-packages/torchvision/transforms/transforms.py",
            ),
        ]);
        assert_eq!(classify(&s), Phase::DataWait);
        let (i, k) = data_stage(&s).unwrap();
        assert_eq!(
            (s[i].name, k),
            ("ColorJitter.forward", StageKind::Transform)
        );
    }

    #[test]
    fn innermost_marker_decides_inside_an_optimizer_closure() {
        let opt = "/v/site-packages/torch/optim/optimizer.py";
        let s = st(&[
            ("main", "/home/u/train.py"),
            ("Optimizer.step", opt),
            (
                "closure",
                "/v/site-packages/lightning/pytorch/loops/optimization/automatic.py",
            ),
            ("Model.training_step", "/home/u/train.py"),
            ("Module._call_impl", NN),
            ("Net.forward", "/home/u/train.py"),
        ]);
        assert_eq!(classify(&s), Phase::Forward);
        assert_eq!(classify(&s[..2]), Phase::Optimizer);
    }

    #[test]
    fn sync_from_the_source_line_of_a_user_frame() {
        let mut s = st(&[("main", "/home/u/train.py")]);
        s[0].src = Some("total += loss.item()");
        assert_eq!(classify(&s), Phase::Sync);
        s[0].src = Some("loss = model(x)");
        assert_eq!(classify(&s), Phase::Other);
    }

    #[test]
    fn pil_decode_beats_the_convert_that_triggered_it() {
        let pil = "/v/site-packages/PIL/Image.py";
        let s = st(&[
            (
                "_worker_loop",
                "/v/site-packages/torch/utils/data/_utils/worker.py",
            ),
            (
                "_MapDatasetFetcher.fetch",
                "/v/site-packages/torch/utils/data/_utils/fetch.py",
            ),
            ("Jpegs.__getitem__", "/home/u/data.py"),
            ("Image.convert", pil),
            ("ImageFile.load", "/v/site-packages/PIL/ImageFile.py"),
        ]);
        let (i, k) = data_stage(&s).unwrap();
        assert_eq!((s[i].name, k), ("ImageFile.load", StageKind::Decode));
        let (i, k) = data_stage(&s[..4]).unwrap();
        assert_eq!((s[i].name, k), ("Image.convert", StageKind::Image));
        let (i, k) = data_stage(&s[..3]).unwrap();
        assert_eq!((s[i].name, k), ("Jpegs.__getitem__", StageKind::Getitem));
    }

    #[test]
    fn not_data_loading_without_a_root() {
        let s = st(&[
            ("main", "/home/u/train.py"),
            ("Net.forward", "/home/u/train.py"),
        ]);
        assert!(data_stage(&s).is_none());
        // A model's ModuleList.__getitem__ is not a dataset.
        let s = st(&[("main", "/home/u/train.py"), ("ModuleList.__getitem__", NN)]);
        assert!(data_stage(&s).is_none());
    }

    #[test]
    fn names_split() {
        assert_eq!(method("A.b.c"), "c");
        assert_eq!(class("A.b.c"), Some("b"));
        assert_eq!(class("c"), None);
        for &p in Phase::ALL {
            assert_eq!(Phase::parse(p.as_str()), Some(p));
            assert_eq!(Phase::ALL[p.index()], p);
        }
    }
}
