//! Issue 37: the input pipelines people write, run for real (PyTorch on the CPU from
//! `GPUFEED_TEST_PYTHON`): the slow stage named as the user wrote it, never PyTorch's DataLoader
//! plumbing, and the DataLoader's own costs (workers started anew every epoch) in its terms.

use crate::{gpufeed, run_ok};
use serde_json::Value;

/// A token pipeline whose slow stage is a custom pure-Python `collate_fn` padding variable-length
/// token lists (the user's `pad_collate`), loaded in the training process (`num_workers=0`).
const PAD_COLLATE: &str = r#"
import sys, random, torch
from torch.utils.data import Dataset, DataLoader

class Tokens(Dataset):
    def __init__(self, n=1 << 16):
        rng = random.Random(0)
        self.lens = [rng.randint(50, 400) for _ in range(n)]
    def __len__(self):
        return len(self.lens)
    def __getitem__(self, i):
        return list(range(self.lens[i]))

def pad_collate(batch):
    width = max(len(s) for s in batch)
    out = []
    for s in batch:
        row = [t for t in s]
        while len(row) < width:
            row.append(0)
        out.append(row)
    mask = [[1 if t else 0 for t in row] for row in out]
    return torch.tensor(out), torch.tensor(mask)

if __name__ == "__main__":
    torch.set_num_threads(1)
    steps = int(sys.argv[1])
    model = torch.nn.Sequential(torch.nn.Embedding(512, 32), torch.nn.Flatten(0, -1))
    loader = DataLoader(Tokens(), batch_size=64, num_workers=0, collate_fn=pad_collate)
    for step, (x, m) in enumerate(loader):
        y = model(x.clamp(max=511)).sum()
        y.backward()
        if step + 1 >= steps:
            break
"#;

/// The line of `pad_collate`'s body in [`PAD_COLLATE`] (1-based) where `needle` is.
fn line_of(script: &str, needle: &str) -> usize {
    script.lines().position(|l| l.contains(needle)).unwrap() + 1
}

/// `run --format json` of `script` (written as `train.py`) with `args`, no GPU library loaded,
/// and `diagnose --format json` and text of its recording (which have the job's evidence).
fn run_script(py: &str, script: &str, args: &[&str]) -> (Value, Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("train.py");
    std::fs::write(&job, script).unwrap();
    let rec = dir.path().join("r.ndjson");
    let out = run_ok(
        gpufeed()
            .env("GPUFEED_NVML_LIB", "/nonexistent/libnvidia-ml.so.1")
            .args(["run", "--format", "json", "-o"])
            .arg(&rec)
            .args(["--", py])
            .arg(&job)
            .args(args),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().expect("a JSON line");
    let run = serde_json::from_str(last).unwrap_or_else(|e| panic!("bad JSON {e}: {last}"));
    let diagnose = crate::json_ok(gpufeed().args(["diagnose", "--format", "json"]).arg(&rec));
    let text = run_ok(gpufeed().arg("diagnose").arg(&rec)).stdout;
    (run, diagnose, String::from_utf8_lossy(&text).into_owned())
}

/// Issue 37 item 1: the slow stage is the user's `pad_collate` with its file:line, not
/// `_MapDatasetFetcher.fetch fetch.py:57` (PyTorch's line that calls it), and its fix speaks of
/// the collate function.
#[test]
fn real_torch_custom_collate_fn_is_named_not_the_fetcher() {
    let Some(py) = crate::common::python_with("torch", "the real-PyTorch pad_collate job") else {
        return;
    };
    let (j, _, text) = run_script(&py, PAD_COLLATE, &["300"]);
    assert!(
        text.contains("slowest data-loading stages (1 process, share of loading time)"),
        "{text}"
    );
    let hot = j["python"]["data_hotspots"].as_array().unwrap();
    let h = &hot[0];
    assert_eq!(h["function"], "pad_collate", "{hot:?}");
    assert_eq!(h["kind"], "collate", "{h}");
    assert!(h["file"].as_str().unwrap().ends_with("train.py"), "{h}");
    let body = line_of(PAD_COLLATE, "def pad_collate")
        ..line_of(PAD_COLLATE, "return torch.tensor(out)") + 1;
    let line = h["line"].as_u64().unwrap() as usize;
    assert!(
        body.contains(&line),
        "line {line} in pad_collate's body {body:?}"
    );
    assert!(h["pct"].as_f64().unwrap() >= 50.0, "{h}");
    for h in hot {
        let f = h["file"].as_str().unwrap();
        assert!(
            !f.contains("torch/utils/data/"),
            "no DataLoader plumbing as a stage: {hot:?}"
        );
    }
    let f = &j["findings"][0];
    assert_eq!(f["id"], "input_bound", "{f}");
    assert_eq!(f["evidence"]["hot_stage"], "pad_collate", "{f}");
    assert_eq!(f["evidence"]["hot_stage_kind"], "collate", "{f}");
    assert_eq!(
        f["evidence"]["hot_stage_at"],
        format!("train.py:{line}"),
        "{f}"
    );
    let r = f["recommendation"].as_str().unwrap();
    assert!(
        r.contains(&format!(
            "the collate function pad_collate (train.py:{line}) is the slow stage"
        )),
        "{r}"
    );
    assert!(r.contains("pad_sequence"), "{r}");
    assert!(
        j["verdict"]["summary"]
            .as_str()
            .unwrap()
            .contains("pad_collate"),
        "{}",
        j["verdict"]
    );
    // Its own Python, not native code it calls.
    assert!(h["native_pct"].as_f64().unwrap() < 50.0, "{h}");
    assert!(!r.contains("native code"), "{r}");
}

/// A dataset whose `__getitem__` spends its time in one native call (hashlib's SHA-256 of a
/// 4 MiB buffer, which releases the GIL): a C stage with no Python frame of its own.
const NATIVE_GETITEM: &str = r#"
import sys, hashlib, torch
from torch.utils.data import Dataset, DataLoader

class Blobs(Dataset):
    def __init__(self):
        self.blob = bytes(range(256)) * (1 << 14)
    def __len__(self):
        return 1 << 16
    def __getitem__(self, i):
        digest = hashlib.sha256(self.blob).digest()
        return torch.tensor(list(digest[:8]), dtype=torch.float32), i % 10

if __name__ == "__main__":
    torch.set_num_threads(1)
    steps = int(sys.argv[1])
    model = torch.nn.Linear(8, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step, (x, y) in enumerate(DataLoader(Blobs(), batch_size=4, num_workers=0)):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
        if step + 1 >= steps:
            break
"#;

/// A stage in a C extension with no Python frame of its own is said as "native code under"
/// the user's function, with the line that calls it (read from the GIL: the worker runs without
/// it there), and the fix is that call, not the function's Python.
#[test]
fn real_torch_native_call_in_getitem_is_named_native_code_under_its_caller() {
    let Some(py) = crate::common::python_with("torch", "the real-PyTorch native __getitem__ job")
    else {
        return;
    };
    let (j, _, text) = run_script(&py, NATIVE_GETITEM, &["300"]);
    let hot = j["python"]["data_hotspots"].as_array().unwrap();
    let h = &hot[0];
    assert_eq!(h["function"], "Blobs.__getitem__", "{hot:?}");
    let line = line_of(NATIVE_GETITEM, "hashlib.sha256");
    assert_eq!(h["line"], line, "{h}");
    assert_eq!(
        h["code"], "digest = hashlib.sha256(self.blob).digest()",
        "{h}"
    );
    let native = h["native_pct"].as_f64().unwrap();
    assert!(native >= 80.0, "the hash runs without the GIL: {h}");
    let f = &j["findings"][0];
    assert_eq!(f["id"], "input_bound", "{f}");
    assert!(
        f["evidence"]["hot_stage_native_pct"].as_f64().unwrap() >= 80.0,
        "{f}"
    );
    let r = f["recommendation"].as_str().unwrap();
    assert!(
        r.contains(&format!(
            "native code under Blobs.__getitem__ (train.py:{line}: `digest = \
             hashlib.sha256(self.blob).digest()`) is the slow stage"
        )),
        "{r}"
    );
    assert!(
        text.contains("native code under Blobs.__getitem__  train.py:"),
        "{text}"
    );
    assert!(
        j["verdict"]["summary"]
            .as_str()
            .unwrap()
            .contains("the slowest data stage is native code under Blobs.__getitem__"),
        "{}",
        j["verdict"]
    );
}

/// An ImageFolder-like job (a CPU "decode" per sample) with `num_workers=2` and short epochs
/// (12 batches), for `argv[1]` seconds; `argv[2]` is `persistent_workers`.
const SHORT_EPOCHS: &str = r#"
import sys, time, torch
from torch.utils.data import Dataset, DataLoader

class Images(Dataset):
    def __len__(self):
        return 12 * 16
    def __getitem__(self, i):
        x = torch.randn(3, 64, 64)
        for _ in range(4):
            x = torch.nn.functional.avg_pool2d(x.unsqueeze(0), 3, 1, 1)[0]
        return x, i % 10

if __name__ == "__main__":
    torch.set_num_threads(1)
    seconds, persistent = float(sys.argv[1]), sys.argv[2] == "1"
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 64 * 64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Images(), batch_size=16, num_workers=2, shuffle=True,
                        persistent_workers=persistent)
    t0 = time.time()
    while time.time() - t0 < seconds:
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(); loss.backward(); opt.step()
"#;

/// Issue 37 item 5: two workers started anew every epoch are two workers, not every pid the run
/// had ("The workers (36) cannot keep up"); the restart is named and `persistent_workers=True`
/// is the fix, with the time it saves. With persistent workers the same job has no restart.
#[test]
fn real_torch_workers_started_every_epoch_get_persistent_workers() {
    let Some(py) = crate::common::python_with("torch", "the real-PyTorch short-epochs job") else {
        return;
    };
    let (run, j, text) = run_script(&py, SHORT_EPOCHS, &["6", "0"]);
    // The stage list counts the processes whose stacks were read loading: with workers that
    // come and go, more than are alive at once, said as such. (On a saturated box the sampler
    // may reach only some of the short-lived workers: then it counts those.)
    let sampled = j["python"]["loader_processes"].as_u64().unwrap();
    if sampled > 2 {
        assert!(
            text.contains(&format!(
                "({sampled} processes over the run, at most 2 at once; share of loading time)"
            )),
            "{text}"
        );
    } else {
        assert!(
            text.contains(&format!("({sampled} process")),
            "{sampled} sampled: {text}"
        );
    }
    assert_eq!(j["job"]["workers_max"], 2, "{}", j["job"]["workers_max"]);
    let seen = j["job"]["workers_seen"].as_u64().unwrap();
    assert!(seen >= 6, "workers started anew every epoch: {seen}");
    for j in [&run, &j] {
        let ss = &j["python"]["worker_start_stop"];
        assert!(ss["loop_pct"].as_f64().unwrap() >= 10.0, "{ss}");
        let f = &j["findings"][0];
        assert_eq!(f["id"], "input_bound", "{f}");
        let ev = &f["evidence"];
        assert_eq!(ev["kind"], "workers_restarted", "{f}");
        assert_eq!(ev["workers"], 2, "alive at once: {f}");
        assert_eq!(ev["workers_started"].as_u64(), Some(seen), "{f}");
        assert!(
            ev["persistent_workers_saves_s"].as_f64().unwrap() > 0.0,
            "{f}"
        );
        let r = f["recommendation"].as_str().unwrap();
        assert!(
            r.starts_with(
                "Keep the workers between epochs: DataLoader(dataset, batch_size=..., \
                 num_workers=2, persistent_workers=True). Today they are started anew every \
                 epoch: "
            ),
            "{r}"
        );
        assert!(r.contains("2 alive at once"), "{r}");
        let v = j["verdict"]["summary"].as_str().unwrap();
        assert!(
            v.contains("its DataLoader workers are started anew every epoch"),
            "{v}"
        );
        assert!(!r.contains(&format!("({seen})")), "{r}");
    }

    let (_, j, text) = run_script(&py, SHORT_EPOCHS, &["6", "1"]);
    assert!(
        text.contains("stages (2 processes, share of loading time)"),
        "{text}"
    );
    assert_eq!(j["job"]["workers_seen"], 2, "{}", j["job"]);
    let f = j["findings"].to_string();
    assert!(!f.contains("workers_restarted"), "{f}");
    assert!(!f.contains("started anew"), "{f}");
}

/// A text pipeline that tokenizes one text per `__getitem__` with a Hugging Face fast tokenizer
/// built locally (a `tokenizers` WordLevel model trained on generated words: no download).
const TOKENIZE_PER_SAMPLE: &str = r#"
import sys, random, torch
from torch.utils.data import Dataset, DataLoader
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

rng = random.Random(0)
WORDS = ["w%d" % i for i in range(2000)]
TEXTS = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 200))) for _ in range(4096)]

def local_tokenizer():
    t = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    t.train_from_iterator(TEXTS, trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]"]))
    return PreTrainedTokenizerFast(tokenizer_object=t, pad_token="[PAD]", unk_token="[UNK]")

class Texts(Dataset):
    def __init__(self, tok):
        self.tok = tok
    def __len__(self):
        return len(TEXTS) * 64
    def __getitem__(self, i):
        return self.tok(TEXTS[i % len(TEXTS)], truncation=True, max_length=256)["input_ids"]

def pad(batch):
    w = max(len(b) for b in batch)
    return torch.tensor([b + [0] * (w - len(b)) for b in batch])

if __name__ == "__main__":
    torch.set_num_threads(1)
    steps = int(sys.argv[1])
    model = torch.nn.Sequential(torch.nn.Embedding(2100, 32))
    loader = DataLoader(Texts(local_tokenizer()), batch_size=32, num_workers=0, collate_fn=pad)
    for step, x in enumerate(loader):
        model(x.clamp(max=2099)).sum().backward()
        if step + 1 >= steps:
            break
"#;

/// Issue 37 item 2 (tokenizers, first part): the tokenizer's call is the stage, kind `tokenize`,
/// with a fix in tokenizer terms (batched calls, a fast tokenizer, pre-tokenizing once), not the
/// transform advice (GPU, kornia) it got as a `__call__`.
#[test]
fn real_tokenizer_in_getitem_is_a_tokenize_stage() {
    let Some(py) = crate::common::python_with(
        "torch, tokenizers, transformers",
        "the real tokenizer-per-sample job",
    ) else {
        return;
    };
    let (j, _, _) = run_script(&py, TOKENIZE_PER_SAMPLE, &["300"]);
    let h = &j["python"]["data_hotspots"][0];
    assert_eq!(h["kind"], "tokenize", "{}", j["python"]["data_hotspots"]);
    assert_eq!(h["function"], "PreTrainedTokenizerBase.__call__", "{h}");
    let f = &j["findings"][0];
    assert_eq!(f["evidence"]["hot_stage_kind"], "tokenize", "{f}");
    let r = f["recommendation"].as_str().unwrap();
    assert!(
        r.contains("tokenizing (PreTrainedTokenizerBase.__call__ at tokenization_utils_base.py:"),
        "{r}"
    );
    assert!(r.contains("batched=True"), "{r}");
    assert!(!r.contains("kornia"), "not a transform: {r}");
}

/// `run_script` of a job kept under tests/data.
fn run_data_job(py: &str, name: &str, args: &[&str]) -> (Value, Value, String) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    run_script(py, &std::fs::read_to_string(path).unwrap(), args)
}

/// Issue 37 item 2 (Hugging Face datasets): the function given to `set_transform` is the stage,
/// named as the user wrote it with its line, not datasets' `Formatter.__call__` (a `__call__`
/// that was taken for a transform); the fix is said in datasets' terms (`.map` once, batched,
/// `with_format("torch")`).
#[test]
fn real_datasets_set_transform_names_the_users_function() {
    let Some(py) = crate::common::python_with("torch, datasets", "the real datasets job") else {
        return;
    };
    let (j, _, text) = run_data_job(&py, "hf_set_transform.py", &["300"]);
    let h = &j["python"]["data_hotspots"][0];
    assert_eq!(h["kind"], "on_the_fly", "{}", j["python"]["data_hotspots"]);
    assert_eq!(h["function"], "normalize", "{h}");
    assert_eq!(h["library"], "datasets", "{h}");
    let script = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hf_set_transform.py"),
    )
    .unwrap();
    let body = line_of(&script, "def normalize") as i64;
    let line = h["line"].as_i64().unwrap();
    assert!(line > body && line <= body + 6, "{h} (normalize at {body})");
    let f = &j["findings"][0];
    assert_eq!(f["id"], "input_bound", "{f}");
    let r = f["recommendation"].as_str().unwrap();
    assert!(r.contains("normalize (train.py:"), "{r}");
    assert!(r.contains("ds.map(normalize, batched=True"), "{r}");
    assert!(r.contains("with_format(\"torch\")"), "{r}");
    assert!(!r.contains("kornia"), "not a transform: {r}");
    assert!(!text.contains("Formatter.__call__"), "{text}");
}

/// Issue 37 item 2 (webdataset): JPEG images in tar shards decoded by webdataset's
/// `.decode("pil")`: the slow stage is PIL's (decode or resize) under the webdataset pipeline and
/// its fix speaks of the shards (resize when writing them) and of decoding on the GPU; with more
/// workers than shards, the idle workers are said.
#[test]
fn real_webdataset_stage_is_fixed_in_shards_and_too_few_shards_are_said() {
    let Some(py) = crate::common::python_with(
        "torch, torchvision, webdataset, PIL",
        "the real webdataset job",
    ) else {
        return;
    };
    let shards = tempfile::tempdir().unwrap();
    let dir = shards.path().to_str().unwrap();
    let (j, _, _) = run_data_job(&py, "webdataset_job.py", &["120", "0", dir]);
    let hot = &j["python"]["data_hotspots"];
    let h = &hot[0];
    assert!(
        matches!(h["kind"].as_str(), Some("decode" | "image")),
        "a PIL stage: {hot}"
    );
    assert_eq!(h["library"], "webdataset", "{h}");
    let f = &j["findings"][0];
    let r = f["recommendation"].as_str().unwrap();
    assert!(r.contains("webdataset pipeline"), "{r}");
    assert!(r.contains("wds.ShardWriter"), "{r}");

    // 2 shards, 4 workers: 2 workers get no shard.
    let (j, _, _) = run_data_job(&py, "webdataset_job.py", &["20", "4", dir, "2"]);
    let notes = j["loader_notes"].to_string();
    assert!(
        notes.contains("the webdataset has 2 shards for 4 workers")
            && notes.contains("2 workers get none")
            && notes.contains("train.py:"),
        "{notes}"
    );
}

/// Issue 37 item 2 (IterableDataset streams): a stream whose `__iter__` never asks which worker
/// it runs in is read whole by each of its 2 workers; the report says so (every sample loaded
/// twice) and how to split it. The same stream split by worker gets no such line.
#[test]
fn real_iterable_dataset_read_whole_by_every_worker_is_named() {
    let Some(py) = crate::common::python_with("torch", "the real IterableDataset job") else {
        return;
    };
    const STREAM: &str = r#"
import sys, torch
from torch.utils.data import IterableDataset, DataLoader, get_worker_info

class Lines(IterableDataset):
    def __init__(self, split):
        self.split = split
    def __iter__(self):
        items = range(20000)
        if self.split:
            info = get_worker_info()
            if info is not None:
                items = items[info.id::info.num_workers]
        for i in items:
            yield torch.full((64,), float(i))

if __name__ == "__main__":
    steps, split = int(sys.argv[1]), sys.argv[2] == "split"
    model = torch.nn.Linear(64, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step, x in enumerate(DataLoader(Lines(split), batch_size=32, num_workers=2)):
        loss = model(x).square().mean()
        opt.zero_grad(); loss.backward(); opt.step()
        if step + 1 >= steps:
            break
"#;
    let (j, _, _) = run_script(&py, STREAM, &["60", "whole"]);
    let notes = j["loader_notes"].to_string();
    assert!(
        notes.contains("each of the 2 workers iterates Lines's whole stream")
            && notes.contains("train.py:"),
        "{notes}"
    );
    let (j, _, _) = run_script(&py, STREAM, &["60", "split"]);
    let notes = j["loader_notes"].to_string();
    assert!(!notes.contains("whole stream"), "{notes}");
}

/// Issue 37 item 2 (torchvision v1 vs v2): every v2 transform runs through the base class's
/// `Transform.forward`; the stage is the concrete transform (`ColorJitter.transform`,
/// `RandomResizedCrop.transform`), and since v2 already works on tensors the fix is the GPU, not
/// "use v2".
#[test]
fn real_torchvision_v2_transform_is_named_and_sent_to_the_gpu() {
    let Some(py) = crate::common::python_with("torch, torchvision", "the real torchvision v2 job")
    else {
        return;
    };
    let (j, _, _) = run_data_job(&py, "torchvision_v2_job.py", &["60"]);
    let hot = &j["python"]["data_hotspots"];
    let h = &hot[0];
    assert_eq!(h["kind"], "transform", "{hot}");
    let name = h["function"].as_str().unwrap();
    assert!(
        name.ends_with(".transform") && name != "Transform.forward",
        "{hot}"
    );
    let r = j["findings"][0]["recommendation"].as_str().unwrap();
    assert!(r.contains("torchvision v2 transform"), "{r}");
    assert!(r.contains("already works on tensors"), "{r}");
    assert!(!r.contains("kornia"), "{r}");
    // Its time is torch's native code, but the stage is torchvision's: its own advice stays.
    assert!(!r.contains("native code under"), "{r}");
}
