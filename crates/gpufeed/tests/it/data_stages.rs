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

/// `run --format json` of `script` (written as `train.py`) with `args`, no GPU library loaded.
fn run_script(py: &str, script: &str, args: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("train.py");
    std::fs::write(&job, script).unwrap();
    let out = run_ok(
        gpufeed()
            .env("GPUFEED_NVML_LIB", "/nonexistent/libnvidia-ml.so.1")
            .args(["run", "--format", "json", "-o"])
            .arg(dir.path().join("r.ndjson"))
            .args(["--", py])
            .arg(&job)
            .args(args),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().expect("a JSON line");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("bad JSON {e}: {last}"))
}

/// Issue 37 item 1: the slow stage is the user's `pad_collate` with its file:line, not
/// `_MapDatasetFetcher.fetch fetch.py:57` (PyTorch's line that calls it), and its fix speaks of
/// the collate function.
#[test]
fn real_torch_custom_collate_fn_is_named_not_the_fetcher() {
    let Some(py) = crate::common::python_with("torch", "the real-PyTorch pad_collate job") else {
        return;
    };
    let j = run_script(&py, PAD_COLLATE, &["300"]);
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
}
