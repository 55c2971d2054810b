//! `gpufeed analyze` over several traces: ranks of one job only when `distributedInfo` says so
//! (same world, distinct ranks), straggler and communication-bound ranks named; otherwise each
//! trace on its own with `gpufeed compare` suggested. Rank traces are made here from the shared
//! real traces by rewriting their `distributedInfo` (and stretching one rank's timeline).

use crate::find_by;
use crate::gpufeed as bin;
use crate::json_ok;
use std::io::Read;
use std::path::{Path, PathBuf};

fn traces_dir() -> Option<PathBuf> {
    crate::shared_traces("rank-trace tests")
}

/// `src` as rank `rank` of `world`, its timestamps and durations multiplied by `stretch`.
fn as_rank(src: &Path, out: &Path, rank: u64, world: u64, stretch: f64) -> PathBuf {
    let mut text = String::new();
    flate2::read::MultiGzDecoder::new(std::fs::File::open(src).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    let info = regex::Regex::new(r#""distributedInfo": \{[^\n]*?"world_size": \d+"#).unwrap();
    assert!(
        info.is_match(&text),
        "no distributedInfo in {}",
        src.display()
    );
    let text = info.replace(
        &text,
        format!(r#""distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": {world}"#),
    );
    let text = if stretch != 1.0 {
        let num = regex::Regex::new(r#""(ts|dur)": (\d+(?:\.\d+)?)"#).unwrap();
        num.replace_all(&text, |c: &regex::Captures| {
            let v: f64 = c[2].parse().unwrap();
            format!("\"{}\": {:.3}", &c[1], v * stretch)
        })
        .into_owned()
    } else {
        text.into_owned()
    };
    let p = out.join(format!("rank{rank}.json"));
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn ranks_of_one_job_are_merged_and_the_slow_rank_named() {
    let Some(d) = traces_dir() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let src = d.join("hta_a100_rank3_control.json.gz");
    for r in 0..4 {
        as_rank(&src, tmp.path(), r, 4, if r == 2 { 1.5 } else { 1.0 });
    }
    let v = json_ok(bin().args(["analyze", "--format", "json"]).arg(tmp.path()));
    assert_eq!(v["job"]["world_size"], 4);
    assert_eq!(v["job"]["ranks"], 4);
    assert_eq!(v["job"]["stragglers"], serde_json::json!([2]));
    assert_eq!(v["ranks"].as_array().unwrap().len(), 4);
    // Only the lowest rank's full summary is kept.
    assert_eq!(v["traces"].as_array().unwrap().len(), 1);
    assert_eq!(v["traces"][0]["rank"], 0);
    let f = v["findings"].as_array().unwrap();
    let s = f
        .iter()
        .find(|f| f["id"] == "straggler")
        .expect("a straggler finding");
    assert!(
        s["title"]
            .as_str()
            .unwrap()
            .starts_with("Rank 2 is a straggler"),
        "{s}"
    );
    // Per-rank findings are folded: one per id, naming the ranks.
    let mut ids: Vec<&str> = f.iter().map(|f| f["id"].as_str().unwrap()).collect();
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "a finding repeated per rank: {ids:?}");

    let text = bin().arg("analyze").arg(tmp.path()).output().unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.starts_with("job: 4 of 4 ranks"), "{text}");
    assert!(text.contains("straggler ranks: 2\n"), "{text}");
}

#[test]
fn communication_bound_ranks_are_named() {
    let Some(d) = traces_dir() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let src = d.join("hta_nccl_2rank.json.gz");
    as_rank(&src, tmp.path(), 0, 2, 1.0);
    as_rank(&src, tmp.path(), 1, 2, 1.0);
    let v = json_ok(bin().args(["analyze", "--format", "json"]).arg(tmp.path()));
    let comm = find_by(&v["findings"], "id", "comm_bound").cloned();
    // Whatever the single-trace rule says of this trace, the job names the same ranks.
    let named: Vec<u64> = v["job"]["comm_bound"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    match comm {
        Some(c) => {
            assert_eq!(named, vec![0, 1]);
            assert_eq!(c["evidence"]["ranks"], serde_json::json!([0, 1]));
        }
        None => assert!(named.is_empty()),
    }
}

#[test]
fn the_same_rank_twice_or_traces_without_distributed_info_are_not_ranks() {
    let Some(d) = traces_dir() else { return };
    for pair in [
        ["hta_v100_test.json.gz", "hta_v100_test.json.gz"],
        [
            "kineto_resnet50_v100_workers0.json.gz",
            "kineto_resnet50_v100_workers4.json.gz",
        ],
    ] {
        let out = bin()
            .args(["analyze", "--format", "json"])
            .arg(d.join(pair[0]))
            .arg(d.join(pair[1]))
            .output()
            .unwrap();
        assert!(out.status.success());
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 2, "{pair:?}");
        for r in v.as_array().unwrap() {
            assert!(r.get("job").is_none());
            for f in r["findings"].as_array().unwrap() {
                assert_ne!(f["id"], "straggler", "{pair:?}: {f}");
            }
        }
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("gpufeed compare"), "{err}");
    }
    // Text: one section per trace.
    let out = bin()
        .arg("analyze")
        .arg(d.join("kineto_resnet50_v100_workers0.json.gz"))
        .arg(d.join("kineto_resnet50_v100_workers4.json.gz"))
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.matches("\n===== ").count(), 2, "{text}");
    assert!(!text.contains("straggler"), "{text}");
}
