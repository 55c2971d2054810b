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
pub(crate) struct FrameRef<'a> {
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
    /// Evaluating inside training: a validation or test loop (its own batches and forward
    /// passes), called from the training loop.
    Evaluation,
    #[default]
    Other,
}

impl Phase {
    pub const ALL: &'static [Phase] = <Phase as strum::VariantArray>::VARIANTS;

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn index(self) -> usize {
        Phase::ALL
            .iter()
            .position(|p| *p == self)
            .unwrap_or(Phase::ALL.len() - 1)
    }

    /// The phases of the training loop proper: every one but [`Phase::Other`] (the last).
    pub(crate) const LOOP: usize = Phase::ALL.len() - 1;

    pub fn parse(s: &str) -> Option<Phase> {
        Phase::ALL.iter().copied().find(|p| p.as_str() == s)
    }
}

/// The method part of a qualified name: `Foo.bar` → `bar`, `bar` → `bar`.
pub(crate) fn method(name: &str) -> &str {
    name.rsplit('.').next().unwrap_or(name)
}

/// The class part of a qualified name, when there is one: `Foo.bar` → `Foo`.
pub(crate) fn class(name: &str) -> Option<&str> {
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
        // gpufeed's own step hook, injected as the job's sitecustomize
        || file.contains("/gpufeed-inject-")
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

/// A frame of an evaluation loop run inside training: the user's own function named for it
/// (`evaluate`, `validate`, `run_validation`, `eval_epoch`, `test`, ...), Lightning's
/// evaluation loop and its `validation_step` / `test_step` hooks, or Hugging Face Trainer's
/// `evaluate` / `evaluation_loop` / `prediction_step`.
pub(crate) fn is_evaluation(f: &FrameRef) -> bool {
    let m = method(f.name);
    if has(f.file, "lightning/pytorch/loops/evaluation_loop.py")
        || has(f.file, "pytorch_lightning/loops/evaluation_loop.py")
        || has(
            f.file,
            "pytorch_lightning/loops/dataloader/evaluation_loop.py",
        )
    {
        return true;
    }
    if matches!(m, "validation_step" | "test_step") {
        return true;
    }
    if has(f.file, "transformers/trainer.py") {
        return matches!(m, "evaluate" | "evaluation_loop" | "prediction_step");
    }
    if is_library(f.file) {
        return false;
    }
    is_evaluation_name(m)
}

/// A function of the user's decorated with `@torch.no_grad()` / `@torch.inference_mode()`
/// (PyTorch's `decorate_context` calls it) that runs the model (a module call beneath it): an
/// evaluation the training loop calls (nanoGPT's `estimate_loss`).
fn no_grad_forward(frames: &[FrameRef]) -> bool {
    // py-spy names the wrapper's frame after the context it enters (`no_grad`,
    // `inference_mode`; `enable_grad` is Lightning's training closure, not an evaluation).
    let Some(i) = frames.windows(2).position(|w| {
        has(w[0].file, "torch/utils/_contextlib.py")
            && matches!(method(w[0].name), "no_grad" | "inference_mode")
            && !is_library(w[1].file)
    }) else {
        return false;
    };
    frames[i + 1..].iter().any(|f| {
        matches!(
            method(f.name),
            "_call_impl" | "_wrapped_call_impl" | "forward"
        )
    })
}

/// A function name that says it evaluates: a word of it (split at `_`, lower case) is one of
/// eval, evaluate, evaluation, val, valid, validate, validation, test, testing.
pub(crate) fn is_evaluation_name(name: &str) -> bool {
    const WORDS: [&str; 9] = [
        "eval",
        "evaluate",
        "evaluation",
        "val",
        "valid",
        "validate",
        "validation",
        "test",
        "testing",
    ];
    let lower = name.to_ascii_lowercase();
    lower
        .split(|c: char| c == '_' || c.is_ascii_digit())
        .any(|w| WORDS.contains(&w))
}

/// Source text that converts a whole tensor into Python objects (`.tolist()`), without a
/// one-value read (`.item()`) on the same line: its time is mostly building the objects.
pub(crate) fn converts_in_bulk(src: &str) -> bool {
    src.contains(".tolist()") && !src.contains(".item()")
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
    // Building an optimizer (`AdamW(...)`, whose first call imports half of torch) is start-up,
    // not a step.
    if m == "__init__" && (has(f.file, "torch/optim/") || optim_class) {
        return None;
    }
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

/// A collective of torch.distributed (`all_reduce`, `broadcast`, `barrier`, `all_gather`...,
/// called from Python: Lightning's per-step broadcasts, a metric's sync): a rank in one waits
/// for the slowest rank to join it.
pub(crate) fn is_collective(f: &FrameRef) -> bool {
    has(f.file, "torch/distributed/distributed_c10d.py")
}

/// A DataLoader worker process's loop (`torch.utils.data._utils.worker._worker_loop`).
pub(crate) fn is_worker_loop(f: &FrameRef) -> bool {
    method(f.name) == "_worker_loop" && has(f.file, "torch/utils/data/_utils/worker.py")
}

/// A frame that starts a phase of the training loop (a forward or backward pass, an optimizer
/// step, a sync, a checkpoint, fetching a batch, an evaluation): the training loop's own frames
/// are the ones above it.
pub(crate) fn starts_a_phase(f: &FrameRef) -> bool {
    marker(f).is_some() || is_data_fetch(f) || is_evaluation(f)
}

/// A frame whose work is getting data ready: reading or decoding files, image operations,
/// tokenizing, torchvision's transforms and readers, numpy's `load` / `memmap`, or a line of
/// the user's that opens, decodes or memory-maps a file.
pub(crate) fn loads_data(f: &FrameRef) -> bool {
    if matches!(
        stage_of(f),
        Some(StageKind::Decode | StageKind::Image | StageKind::Read | StageKind::Tokenize)
    ) {
        return true;
    }
    if has(f.file, "torchvision/transforms/")
        || has(f.file, "torchvision/io/")
        || has(f.file, "numpy/core/memmap.py")
        || has(f.file, "numpy/_core/memmap.py")
    {
        return true;
    }
    const SRC: [&str; 10] = [
        "Image.open",
        "imread",
        "np.load(",
        "np.memmap(",
        "torch.load(",
        "decode_image",
        "decode_jpeg",
        "read_image",
        "open(",
        "from_numpy(",
    ];
    !is_library(f.file) && f.src.is_some_and(|s| SRC.iter().any(|k| s.contains(k)))
}

/// A function name that says it makes batches or samples: a word of it (split at `_`, lower
/// case) is batch, load, read, decode, fetch, collate, augment, transform, preprocess, prepare
/// or tokenize (`get_batch`, `load_images`, `make_batches`, `next_batch`). Not a callback
/// hook named for when it runs (`on_train_batch_end`, `on_batch_begin`): it runs after a batch,
/// it does not make one.
pub(crate) fn is_batch_name(name: &str) -> bool {
    const WORDS: [&str; 14] = [
        "batch",
        "batches",
        "minibatch",
        "load",
        "loader",
        "read",
        "decode",
        "fetch",
        "collate",
        "augment",
        "transform",
        "preprocess",
        "prepare",
        "tokenize",
    ];
    let lower = method(name).to_ascii_lowercase();
    if lower.starts_with("on_") {
        return false;
    }
    lower.split('_').any(|w| WORDS.contains(&w))
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
    // An evaluation loop fetches its own batches and runs forward passes: all of it is the
    // evaluation's time, not the training loop's data wait or forward.
    if frames.iter().any(is_evaluation) || no_grad_forward(frames) {
        return Phase::Evaluation;
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
    /// The dataset's own `__getitem__` (its self time and calls not named above), or the
    /// generator of an `IterableDataset`.
    Getitem,
    /// The batch's collate function: the `collate_fn` the user gave the DataLoader (a function,
    /// a lambda, a class's `__call__`), or PyTorch's `default_collate` with its recursion.
    Collate,
    /// The sampler the DataLoader draws indices from (PyTorch's or the user's), which runs in
    /// the training process whatever `num_workers` is.
    Sampler,
    /// Copying a batch into page-locked memory (`pin_memory=True`; the pin-memory thread).
    PinMemory,
    /// A tokenizer's call: Hugging Face `transformers` tokenizers (`PreTrainedTokenizerBase.
    /// __call__`, `encode`, ...) and the `tokenizers` library's Python wrappers.
    Tokenize,
    /// Hugging Face `datasets` turning Arrow rows into Python objects or tensors as they are
    /// read (its formatting: `format_table`, the python/numpy/torch formatters).
    ArrowFormat,
    /// The user's function a dataset library runs on every read: Hugging Face `datasets`'
    /// `set_transform` / `with_transform` (named as the user wrote it, with its line).
    OnTheFly,
}

/// The data-loading library a stage runs under, when it is one whose fix is said in its own
/// terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum DataLibrary {
    /// Hugging Face `datasets` (Arrow tables, `map`, `set_transform`).
    Datasets,
    /// `webdataset` (tar shards streamed through a pipeline of generators).
    Webdataset,
}

/// The library the loading stack `frames` runs under (its dataset or pipeline), if any.
pub(crate) fn data_library(frames: &[FrameRef]) -> Option<DataLibrary> {
    frames.iter().find_map(|f| {
        if has(f.file, "-packages/webdataset/") {
            Some(DataLibrary::Webdataset)
        } else if has(f.file, "-packages/datasets/") {
            Some(DataLibrary::Datasets)
        } else {
            None
        }
    })
}

impl StageKind {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Where data loading enters a stack: the frame that starts it and what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Root {
    /// PyTorch's fetcher (`_MapDatasetFetcher.fetch`, `_IterableDatasetFetcher.fetch`): it
    /// calls the dataset and then the collate function.
    Fetch,
    /// The DataLoader iterator asking its sampler for the next indices (`_next_index`).
    Sampler,
    /// PyTorch's `pin_memory` (the pin-memory thread, or the loop with `num_workers=0`).
    PinMemory,
    /// A dataset's `__getitem__` / `__getitems__` reached without PyTorch's fetcher.
    Dataset,
}

/// The dataset's own `__getitem__` / `__getitems__`: the user's, a torchvision or Hugging Face
/// dataset, or PyTorch's dataset wrappers (`Subset`, `ConcatDataset`, `TensorDataset`).
fn is_dataset_getitem(f: &FrameRef) -> bool {
    matches!(method(f.name), "__getitem__" | "__getitems__")
        && (!is_library(f.file)
            || has(f.file, "torchvision/datasets/")
            || has(f.file, "datasets/arrow_dataset.py")
            || has(f.file, "torch/utils/data/dataset.py"))
}

/// A stack of the training thread starting or stopping DataLoader worker processes: creating the
/// multi-process iterator (`_MultiProcessingDataLoaderIter.__init__`: forking the workers,
/// their queues and threads) or shutting them down (`_shutdown_workers`: joining them). With
/// `persistent_workers=False` both happen every epoch; with `True`, once.
pub(crate) fn starts_or_stops_workers(frames: &[FrameRef]) -> bool {
    frames.iter().any(|f| {
        let m = method(f.name);
        has(f.file, "torch/utils/data/dataloader.py")
            && (m == "_shutdown_workers"
                || m == "__init__" && class(f.name).is_none_or(|c| c.contains("MultiProcessing")))
    })
}

/// A frame that starts loading data, and what kind of start it is.
fn data_root(f: &FrameRef) -> Option<Root> {
    let m = method(f.name);
    if m == "fetch" && has(f.file, "torch/utils/data/_utils/fetch.py") {
        return Some(Root::Fetch);
    }
    if m == "_next_index" && has(f.file, "torch/utils/data/dataloader.py") {
        return Some(Root::Sampler);
    }
    if m == "pin_memory" && has(f.file, "torch/utils/data/_utils/pin_memory.py") {
        return Some(Root::PinMemory);
    }
    is_dataset_getitem(f).then_some(Root::Dataset)
}

/// PyTorch's DataLoader machinery that only hands work on: the iterators, the fetchers, the
/// worker loop, `default_collate`'s recursion, `BatchSampler` (which batches the real sampler's
/// indices), the pin-memory loop. Never a stage: its time is charged to the user's or library's
/// function it calls. Not plumbing: the datasets of `dataset.py`, the samplers, `default_collate`
/// and `default_convert` themselves, `pin_memory` itself.
pub(crate) fn is_loader_plumbing(f: &FrameRef) -> bool {
    if !has(f.file, "torch/utils/data/") {
        return false;
    }
    let m = method(f.name);
    if has(f.file, "_utils/collate.py") {
        return !matches!(m, "default_collate" | "default_convert");
    }
    if has(f.file, "torch/utils/data/sampler.py") || has(f.file, "torch/utils/data/distributed.py")
    {
        return class(f.name) == Some("BatchSampler");
    }
    if has(f.file, "torch/utils/data/dataset.py") {
        return false;
    }
    if has(f.file, "_utils/pin_memory.py") {
        return m != "pin_memory";
    }
    true
}

/// A lambda (`collate_fn=lambda b: ...`): named by where it is defined, or by the function it
/// hands the work to.
fn is_lambda(f: &FrameRef) -> bool {
    method(f.name) == "<lambda>"
}

/// What the fetcher `fetch` called when it called `f` (not a dataset's `__getitem__`): the
/// collate function, or, for an `IterableDataset`'s fetcher, the dataset's generator unless
/// the function is named as a collate.
fn fetch_callee_kind(fetch: &FrameRef, f: &FrameRef) -> StageKind {
    let iterable = class(fetch.name).is_some_and(|c| c.contains("Iterable"));
    let m = method(f.name);
    let collate_named = m.to_ascii_lowercase().contains("collate");
    if collate_named || is_lambda(f) {
        return StageKind::Collate;
    }
    if iterable || matches!(m, "__iter__" | "__next__" | "__getitem__" | "__getitems__") {
        StageKind::Getitem
    } else {
        StageKind::Collate
    }
}

const PIL_DECODE: [&str; 2] = ["load", "open"];
const PIL_IMAGE: [&str; 4] = ["resize", "convert", "thumbnail", "reduce"];

fn stage_of(f: &FrameRef) -> Option<StageKind> {
    let m = method(f.name);
    let file = f.file;
    if m == "default_collate" && has(file, "torch/utils/data/_utils/collate.py") {
        return Some(StageKind::Collate);
    }
    // Before `__call__`: datasets' formatters are called like transforms, but are none.
    if has(file, "-packages/datasets/formatting/") {
        return Some(StageKind::ArrowFormat);
    }
    // webdataset's `.decode(...)` (its handlers call PIL, whose decode is the innermost stage).
    if has(file, "-packages/webdataset/autodecode.py") {
        return Some(StageKind::Decode);
    }
    // Before `__call__`: a tokenizer is called like a transform, but is none.
    if has(file, "transformers/tokenization_")
        || has(file, "transformers/models/") && has(file, "/tokenization_")
        || has(file, "site-packages/tokenizers/")
    {
        return Some(StageKind::Tokenize);
    }
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
    // torchvision v2: every transform's `forward` is the base class's (`Transform.forward`);
    // the concrete one shows as the `transform` method it calls (`ColorJitter.transform`).
    if has(file, "torchvision/transforms/v2/")
        && matches!(m, "transform" | "_transform")
        && class(f.name).is_some_and(|c| c != "Transform")
    {
        return Some(StageKind::Transform);
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
            // The `tokenizers` library's Rust calls have no Python frame.
            if src.contains("encode_batch(") {
                return Some(StageKind::Tokenize);
            }
        }
    }
    None
}

/// The stage of a data-loading stack: the index of the frame to charge and its kind, or `None`
/// when the stack is not loading data.
///
/// Stages are the user's code or a library's public step, never PyTorch's DataLoader plumbing
/// ([`is_loader_plumbing`]): a stack under the fetcher is charged to the function the fetcher
/// called (the dataset's `__getitem__`/`__getitems__`, the `collate_fn`, an `IterableDataset`'s
/// generator), a stack under `_next_index` to the sampler, a stack under `pin_memory` to it. A
/// lambda hands its stage on to the user's function it calls. Walking inwards from there, the
/// innermost named stage wins, except that inside one library the frame the caller entered by
/// is kept (`np.stack`, not numpy's private helper beneath it), and PIL's `ImageFile.load` (the
/// JPEG decode) beats the `convert` or `resize` that triggered it. Frames between stages are
/// charged to the stage around them.
pub(crate) fn data_stage(frames: &[FrameRef]) -> Option<(usize, StageKind)> {
    let (root, r) = frames
        .iter()
        .enumerate()
        .find_map(|(i, f)| data_root(f).map(|r| (i, r)))?;
    let mut cur = match r {
        Root::Sampler => (root, StageKind::Sampler),
        Root::PinMemory => (root, StageKind::PinMemory),
        Root::Fetch | Root::Dataset => (root, StageKind::Getitem),
    };
    // Still at the DataLoader's own frame: the next frame that is not plumbing is the user's or
    // library's function it called.
    let mut at_plumbing = matches!(r, Root::Fetch | Root::Sampler);
    for (i, f) in frames.iter().enumerate().skip(root + 1) {
        if is_loader_plumbing(f) {
            continue;
        }
        if is_dataset_getitem(f) {
            // The innermost __getitem__ at or below the root is the dataset's.
            cur = (i, StageKind::Getitem);
            at_plumbing = false;
            continue;
        }
        if at_plumbing {
            let kind = match r {
                Root::Sampler => StageKind::Sampler,
                // `collate_fn=tokenizer`: a tokenizer is what it is, wherever it is called from.
                _ if stage_of(f) == Some(StageKind::Tokenize) => StageKind::Tokenize,
                _ => fetch_callee_kind(&frames[root], f),
            };
            cur = (i, kind);
            at_plumbing = false;
            continue;
        }
        if is_lambda(&frames[cur.0]) && !is_library(f.file) {
            // `collate_fn=lambda b: pad(b, 0)`: the work is `pad`'s.
            cur = (i, cur.1);
            continue;
        }
        if cur.1 == StageKind::ArrowFormat && !is_library(f.file) {
            // datasets' formatting calling the user's code: the transform given to
            // `set_transform` / `with_transform`, run on every read.
            cur = (i, StageKind::OnTheFly);
            continue;
        }
        if cur.1 == StageKind::Getitem && is_library(frames[cur.0].file) && !is_library(f.file) {
            // A library's dataset calling the user's code (`ImageFolder(loader=open_slowly)`, a
            // `target_transform` function): the user's function is what they can change.
            cur = (i, StageKind::Getitem);
            continue;
        }
        let Some(k) = stage_of(f) else { continue };
        let cur_file = frames[cur.0].file;
        let same_lib = |a: &str| has(cur_file, a) && has(f.file, a);
        let keep = match k {
            StageKind::Decode => false,
            // The tokenizer's call the caller made, not its private helpers.
            StageKind::Tokenize => cur.1 == StageKind::Tokenize,
            // The formatting entry point datasets called, not its helpers.
            StageKind::ArrowFormat => cur.1 == StageKind::ArrowFormat,
            _ if same_lib("/PIL/") => true,
            StageKind::Array | StageKind::Read if same_lib("/numpy/") || same_lib("/cv2/") => true,
            _ => false,
        };
        if !keep {
            cur = (i, k);
        }
    }
    // A fetch with nothing below it that is not plumbing is charged to fetch itself.
    Some(cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_names_are_makers_not_callback_hooks() {
        for n in [
            "get_batch",
            "load_images",
            "Data.make_batches",
            "next_batch",
        ] {
            assert!(is_batch_name(n), "{n}");
        }
        for n in [
            "ModelInspectionCallback.on_train_batch_end",
            "on_batch_begin",
            "train_step",
        ] {
            assert!(!is_batch_name(n), "{n}");
        }
    }

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
    fn evaluation_is_its_own_phase_and_building_an_optimizer_is_none() {
        let ctx = "/v/site-packages/torch/utils/_contextlib.py";
        // nanoGPT: `@torch.no_grad() def estimate_loss()` runs the model from the loop.
        let s = st(&[
            ("main", "/home/u/train.py"),
            ("no_grad", ctx),
            ("estimate_loss", "/home/u/train.py"),
            ("Module._wrapped_call_impl", NN),
        ]);
        assert_eq!(classify(&s), Phase::Evaluation);
        // Lightning's training closure runs under `enable_grad`: training, not evaluation.
        let s = st(&[
            ("main", "/home/u/train.py"),
            ("enable_grad", ctx),
            (
                "Closure.closure",
                "/opt/lightning/pytorch/loops/optimization/automatic.py",
            ),
            ("Module._wrapped_call_impl", NN),
        ]);
        assert_eq!(classify(&s), Phase::Forward);
        // A decorated function that runs no model is not an evaluation (an EMA update).
        let s = st(&[
            ("main", "/home/u/train.py"),
            ("no_grad", ctx),
            ("update_ema", "/home/u/train.py"),
        ]);
        assert_eq!(classify(&s), Phase::Other);
        // Named for it: its batches are the evaluation's, not the loop's data wait.
        let s = st(&[
            ("main", "/home/u/train.py"),
            ("validate", "/home/u/train.py"),
            ("_SingleProcessDataLoaderIter._next_data", DL),
        ]);
        assert_eq!(classify(&s), Phase::Evaluation);
        assert!(is_evaluation_name("run_validation") && is_evaluation_name("eval_epoch"));
        assert!(!is_evaluation_name("evaluator_setup") && !is_evaluation_name("interval"));
        let s = st(&[
            ("main", "/home/u/train.py"),
            ("AdamW.__init__", "/v/site-packages/torch/optim/adamw.py"),
        ]);
        assert_eq!(classify(&s), Phase::Other);
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

    const FETCH: &str = "/v/lib/python3.11/site-packages/torch/utils/data/_utils/fetch.py";
    const COLLATE: &str = "/v/lib/python3.11/site-packages/torch/utils/data/_utils/collate.py";
    const SAMPLER: &str = "/v/lib/python3.11/site-packages/torch/utils/data/sampler.py";
    const PIN: &str = "/v/lib/python3.11/site-packages/torch/utils/data/_utils/pin_memory.py";
    const WORKER: &str = "/v/lib/python3.11/site-packages/torch/utils/data/_utils/worker.py";

    /// The stage's function and kind.
    fn stage(s: &[FrameRef<'static>]) -> Option<(&'static str, StageKind)> {
        data_stage(s).map(|(i, k)| (s[i].name, k))
    }

    /// The loop with `num_workers=0` under the map-style fetcher, then `tail`.
    fn fetched(tail: &[(&'static str, &'static str)]) -> Vec<FrameRef<'static>> {
        let mut v = vec![
            ("<module>", "/home/u/train.py"),
            ("_BaseDataLoaderIter.__next__", DL),
            ("_SingleProcessDataLoaderIter._next_data", DL),
            ("_MapDatasetFetcher.fetch", FETCH),
        ];
        v.extend_from_slice(tail);
        st(&v)
    }

    /// The user's `collate_fn` is the stage, not the fetcher line that calls it
    /// (the stack of a real `pad_collate` job, Python 3.11, torch 2.15).
    #[test]
    fn a_custom_collate_fn_is_the_stage_not_the_fetcher() {
        let s = fetched(&[("pad_collate", "/home/u/train.py")]);
        assert_eq!(stage(&s), Some(("pad_collate", StageKind::Collate)));
        // Its own list comprehension is its work too.
        let s = fetched(&[
            ("pad_collate", "/home/u/train.py"),
            ("<listcomp>", "/home/u/train.py"),
        ]);
        assert_eq!(stage(&s), Some(("pad_collate", StageKind::Collate)));
        // A collate object's __call__ is the collate function, not a transform.
        let s = fetched(&[("PadCollate.__call__", "/home/u/train.py")]);
        assert_eq!(stage(&s), Some(("PadCollate.__call__", StageKind::Collate)));
        // functools.partial(pad_collate, value=0) is C: its function is the frame.
        let s = fetched(&[("pad_collate", "/home/u/train.py")]);
        assert_eq!(stage(&s).unwrap().0, "pad_collate");
        // The dataset below the fetcher's list comprehension (3.11) stays the dataset's.
        let s = fetched(&[
            ("<listcomp>", FETCH),
            ("Tokens.__getitem__", "/home/u/train.py"),
        ]);
        assert_eq!(stage(&s), Some(("Tokens.__getitem__", StageKind::Getitem)));
        let s = fetched(&[("Tokens.__getitems__", "/home/u/train.py")]);
        assert_eq!(stage(&s), Some(("Tokens.__getitems__", StageKind::Getitem)));
        // A library's dataset not known by its path is still the dataset, not a collate.
        let s = fetched(&[("Shards.__getitem__", "/v/site-packages/somelib/data.py")]);
        assert_eq!(stage(&s), Some(("Shards.__getitem__", StageKind::Getitem)));
        // A library's dataset calling the user's function (ImageFolder's `loader=`): the
        // user's function, which the user can change; a decode inside it is still the decode.
        let folder = "/v/site-packages/torchvision/datasets/folder.py";
        let s = fetched(&[
            ("DatasetFolder.__getitem__", folder),
            ("open_slowly", "/home/u/train.py"),
        ]);
        assert_eq!(stage(&s), Some(("open_slowly", StageKind::Getitem)));
        let s = fetched(&[
            ("DatasetFolder.__getitem__", folder),
            ("open_slowly", "/home/u/train.py"),
            ("default_loader", folder),
            ("ImageFile.load", "/v/site-packages/PIL/ImageFile.py"),
        ]);
        assert_eq!(stage(&s), Some(("ImageFile.load", StageKind::Decode)));
        // Only a fetcher with nothing beneath it is charged to the fetcher.
        let s = fetched(&[]);
        assert_eq!(
            stage(&s),
            Some(("_MapDatasetFetcher.fetch", StageKind::Getitem))
        );
    }

    #[test]
    fn default_collate_is_a_stage_and_its_recursion_is_its_own() {
        let s = fetched(&[
            ("default_collate", COLLATE),
            ("collate", COLLATE),
            ("<listcomp>", COLLATE),
            ("collate", COLLATE),
            ("collate_tensor_fn", COLLATE),
        ]);
        assert_eq!(stage(&s), Some(("default_collate", StageKind::Collate)));
        // The user's collate handing the batch to default_collate: the cost is default_collate's.
        let s = fetched(&[
            ("skip_none", "/home/u/train.py"),
            ("default_collate", COLLATE),
            ("collate", COLLATE),
        ]);
        assert_eq!(stage(&s), Some(("default_collate", StageKind::Collate)));
        let s = fetched(&[("skip_none", "/home/u/train.py")]);
        assert_eq!(stage(&s), Some(("skip_none", StageKind::Collate)));
    }

    #[test]
    fn a_lambda_collate_is_named_where_it_is_defined_or_by_what_it_calls() {
        let s = fetched(&[("<lambda>", "/home/u/train.py")]);
        let (i, k) = data_stage(&s).unwrap();
        assert_eq!(
            (s[i].name, s[i].file, k),
            ("<lambda>", "/home/u/train.py", StageKind::Collate)
        );
        let s = fetched(&[("main.<locals>.<lambda>", "/home/u/train.py")]);
        assert_eq!(
            stage(&s),
            Some(("main.<locals>.<lambda>", StageKind::Collate))
        );
        // `lambda b: pad(b, 0)`: the work is pad's.
        let s = fetched(&[("<lambda>", "/home/u/train.py"), ("pad", "/home/u/util.py")]);
        assert_eq!(stage(&s), Some(("pad", StageKind::Collate)));
        // `lambda b: default_collate(b)`.
        let s = fetched(&[
            ("<lambda>", "/home/u/train.py"),
            ("default_collate", COLLATE),
        ]);
        assert_eq!(stage(&s), Some(("default_collate", StageKind::Collate)));
    }

    #[test]
    fn an_iterable_datasets_generator_is_its_stage() {
        let s = st(&[
            ("_worker_loop", WORKER),
            ("_IterableDatasetFetcher.fetch", FETCH),
            ("Stream.__iter__", "/home/u/train.py"),
        ]);
        assert_eq!(stage(&s), Some(("Stream.__iter__", StageKind::Getitem)));
        let s = st(&[
            ("_worker_loop", WORKER),
            ("_IterableDatasetFetcher.fetch", FETCH),
            ("lines", "/home/u/train.py"),
        ]);
        assert_eq!(stage(&s), Some(("lines", StageKind::Getitem)));
        let s = st(&[
            ("_worker_loop", WORKER),
            ("_IterableDatasetFetcher.fetch", FETCH),
            ("pad_collate", "/home/u/train.py"),
        ]);
        assert_eq!(stage(&s), Some(("pad_collate", StageKind::Collate)));
        // The worker loop waiting for its next indices is not loading.
        let s = st(&[
            ("_worker_loop", WORKER),
            ("Queue.get", "/usr/lib/python3.11/multiprocessing/queues.py"),
        ]);
        assert_eq!(stage(&s), None);
    }

    #[test]
    fn the_sampler_and_the_pin_memory_thread_are_stages() {
        let s = st(&[
            ("<module>", "/home/u/train.py"),
            ("_SingleProcessDataLoaderIter._next_data", DL),
            ("_BaseDataLoaderIter._next_index", DL),
            ("BatchSampler.__iter__", SAMPLER),
            ("WeightedRandomSampler.__iter__", SAMPLER),
        ]);
        assert_eq!(
            stage(&s),
            Some(("WeightedRandomSampler.__iter__", StageKind::Sampler))
        );
        let s = st(&[
            ("<module>", "/home/u/train.py"),
            ("_MultiProcessingDataLoaderIter._try_put_index", DL),
            ("_BaseDataLoaderIter._next_index", DL),
            ("BatchSampler.__iter__", SAMPLER),
            ("BucketSampler.__iter__", "/home/u/train.py"),
            ("<listcomp>", "/home/u/train.py"),
        ]);
        assert_eq!(
            stage(&s),
            Some(("BucketSampler.__iter__", StageKind::Sampler))
        );
        let s = st(&[
            ("Thread._bootstrap", "/usr/lib/python3.11/threading.py"),
            ("Thread.run", "/usr/lib/python3.11/threading.py"),
            ("_pin_memory_loop", PIN),
            ("_pin_memory_loop.<locals>.do_one_step", PIN),
            ("pin_memory", PIN),
            ("<listcomp>", PIN),
            ("pin_memory", PIN),
        ]);
        let (i, k) = data_stage(&s).unwrap();
        assert_eq!((i, k), (4, StageKind::PinMemory));
        // The pin-memory thread waiting for a batch is not loading.
        assert_eq!(stage(&s[..4]), None);
    }

    /// Stacks of a real job's training thread (torch 2.15, `persistent_workers=False`).
    #[test]
    fn starting_and_stopping_workers_is_told_apart_from_waiting_for_them() {
        let base = [
            ("<module>", "/home/u/train.py"),
            ("DataLoader.__iter__", DL),
            ("DataLoader._get_iterator", DL),
        ];
        let mut start = base.to_vec();
        start.extend([
            ("_MultiProcessingDataLoaderIter.__init__", DL),
            (
                "BaseProcess.start",
                "/usr/lib/python3.11/multiprocessing/process.py",
            ),
        ]);
        assert!(starts_or_stops_workers(&st(&start)));
        let stop = [
            ("<module>", "/home/u/train.py"),
            ("_BaseDataLoaderIter.__next__", DL),
            ("_MultiProcessingDataLoaderIter._next_data", DL),
            ("_MultiProcessingDataLoaderIter._shutdown_workers", DL),
            (
                "BaseProcess.join",
                "/usr/lib/python3.11/multiprocessing/process.py",
            ),
        ];
        assert!(starts_or_stops_workers(&st(&stop)));
        let wait = [
            ("<module>", "/home/u/train.py"),
            ("_BaseDataLoaderIter.__next__", DL),
            ("_MultiProcessingDataLoaderIter._next_data", DL),
            ("_MultiProcessingDataLoaderIter._get_data", DL),
            ("Queue.get", "/usr/lib/python3.11/multiprocessing/queues.py"),
        ];
        assert!(!starts_or_stops_workers(&st(&wait)));
        // Building the DataLoader itself, or a single-process iterator, starts nothing.
        let mut single = base.to_vec();
        single.push(("_SingleProcessDataLoaderIter.__init__", DL));
        assert!(!starts_or_stops_workers(&st(&single)));
        let build = [
            ("<module>", "/home/u/train.py"),
            ("DataLoader.__init__", DL),
        ];
        assert!(!starts_or_stops_workers(&st(&build)));
        // Python before 3.11 names no class: the iterator's __init__ in dataloader.py counts.
        let old = [("<module>", "/home/u/train.py"), ("__init__", DL)];
        assert!(starts_or_stops_workers(&st(&old)));
    }

    /// A tokenizers call is its own stage, not a transform: stacks of a real job (transformers 5,
    /// a WordLevel tokenizer built locally), tokenizing one text per `__getitem__` or a batch in
    /// the `collate_fn`.
    #[test]
    fn a_tokenizers_call_is_its_own_stage_not_a_transform() {
        const BASE: &str = "/v/site-packages/transformers/tokenization_utils_base.py";
        const RUST: &str = "/v/site-packages/transformers/tokenization_utils_tokenizers.py";
        let s = fetched(&[
            ("<listcomp>", FETCH),
            ("Texts.__getitem__", "/home/u/train.py"),
            ("PreTrainedTokenizerBase.__call__", BASE),
            ("TokenizersBackend._encode_plus", RUST),
        ]);
        assert_eq!(
            stage(&s),
            Some(("PreTrainedTokenizerBase.__call__", StageKind::Tokenize))
        );
        let s = fetched(&[
            ("collate", "/home/u/train.py"),
            ("PreTrainedTokenizerBase.__call__", BASE),
            ("TokenizersBackend._encode_plus", RUST),
        ]);
        assert_eq!(
            stage(&s),
            Some(("PreTrainedTokenizerBase.__call__", StageKind::Tokenize))
        );
        let s = fetched(&[(
            "BertTokenizer.tokenize",
            "/v/site-packages/transformers/models/bert/tokenization_bert.py",
        )]);
        assert_eq!(stage(&s).unwrap().1, StageKind::Tokenize);
        // The `tokenizers` library called directly: Rust, no frame; the user's line says it.
        let mut s = fetched(&[("collate", "/home/u/train.py")]);
        s[4].src = Some("enc = tok.encode_batch(texts)");
        // The collate function is the stage the fetcher called, at its line calling the tokenizer.
        assert_eq!(stage(&s), Some(("collate", StageKind::Tokenize)));
        let mut s = fetched(&[
            ("Texts.__getitem__", "/home/u/train.py"),
            ("Texts._ids", "/home/u/train.py"),
        ]);
        s[5].src = Some("return self.tok.encode_batch([t])[0].ids");
        assert_eq!(stage(&s), Some(("Texts._ids", StageKind::Tokenize)));
    }

    /// Hugging Face datasets: stacks of a real job (datasets 5) whose
    /// `set_transform(normalize)` runs per batch under the DataLoader's `__getitems__`.
    #[test]
    fn datasets_formatting_is_arrow_format_and_set_transform_names_the_users_function() {
        const AD: &str = "/v/site-packages/datasets/arrow_dataset.py";
        const FMT: &str = "/v/site-packages/datasets/formatting/formatting.py";
        let s = fetched(&[
            ("Dataset.__getitems__", AD),
            ("Dataset.__getitem__", AD),
            ("Dataset._getitem", AD),
            ("format_table", FMT),
            ("Formatter.__call__", FMT),
            ("CustomFormatter.format_batch", FMT),
            ("normalize", "/home/u/train.py"),
            ("normalize.<locals>.<listcomp>", "/home/u/train.py"),
        ]);
        assert_eq!(stage(&s), Some(("normalize", StageKind::OnTheFly)));
        assert_eq!(data_library(&s), Some(DataLibrary::Datasets));
        // No transform: the Arrow -> tensor conversion, at the entry datasets called.
        let s = fetched(&[
            ("Dataset.__getitems__", AD),
            ("Dataset._getitem", AD),
            ("format_table", FMT),
            ("Formatter.__call__", FMT),
            (
                "TorchFormatter.format_batch",
                "/v/site-packages/datasets/formatting/torch_formatter.py",
            ),
            (
                "TorchFormatter._tensorize",
                "/v/site-packages/datasets/formatting/torch_formatter.py",
            ),
        ]);
        assert_eq!(stage(&s), Some(("format_table", StageKind::ArrowFormat)));
        // A torchvision dataset is not Hugging Face's.
        let s = fetched(&[(
            "CIFAR10.__getitem__",
            "/v/site-packages/torchvision/datasets/cifar.py",
        )]);
        assert_eq!(data_library(&s), None);
    }

    /// torchvision v2: the concrete transform is named, not the base class's
    /// `Transform.forward` that every v2 transform runs through (a real job's stack).
    #[test]
    fn a_torchvision_v2_transform_is_named_by_its_class() {
        const V2: &str = "/v/site-packages/torchvision/transforms/v2/_transform.py";
        let s = fetched(&[
            ("Frames.__getitem__", "/home/u/train.py"),
            (
                "Compose.forward",
                "/v/site-packages/torchvision/transforms/v2/_container.py",
            ),
            ("Transform.forward", V2),
            ("Transform.forward.<locals>.<listcomp>", V2),
            (
                "ColorJitter.transform",
                "/v/site-packages/torchvision/transforms/v2/_color.py",
            ),
            ("Transform._call_kernel", V2),
            (
                "adjust_brightness_image",
                "/v/site-packages/torchvision/transforms/v2/functional/_color.py",
            ),
        ]);
        assert_eq!(
            stage(&s),
            Some(("ColorJitter.transform", StageKind::Transform))
        );
    }

    /// webdataset: its stages are fixed in shard terms, so they are told apart from plain PIL
    /// ones; a real job's stack (webdataset 1.0, `.decode("pil")`).
    #[test]
    fn webdataset_stages_are_their_pil_steps_under_the_webdataset_library() {
        const WDS: &str = "/v/site-packages/webdataset/";
        let f =
            |p: &'static str| -> &'static str { Box::leak(format!("{WDS}{p}").into_boxed_str()) };
        let mut s = st(&[
            (
                "_worker_loop",
                "/v/site-packages/torch/utils/data/_utils/worker.py",
            ),
            (
                "_IterableDatasetFetcher.fetch",
                "/v/site-packages/torch/utils/data/_utils/fetch.py",
            ),
            ("DataPipeline.iterator", f("pipeline.py")),
            ("_map_tuple", f("filters.py")),
            ("_map", f("filters.py")),
            ("Decoder.__call__", f("autodecode.py")),
            ("ImageHandler.__call__", f("autodecode.py")),
            ("ImageFile.load", "/v/site-packages/PIL/ImageFile.py"),
        ]);
        assert_eq!(stage(&s), Some(("ImageFile.load", StageKind::Decode)));
        assert_eq!(data_library(&s), Some(DataLibrary::Webdataset));
        s.truncate(5);
        assert_eq!(
            stage(&s),
            Some(("DataPipeline.iterator", StageKind::Getitem))
        );
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
