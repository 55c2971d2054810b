//! Small hand-written traces for each rule's edge cases, and a property test that the reader never
//! panics on arbitrary or truncated input. The event builders are shared with the golden
//! snapshots (golden.rs).

use gpufeed::trace::breakdown::TraceSummary;
use gpufeed::trace::{self, families::KernelFamily, rules};
use proptest::prelude::*;
use serde_json::{json, Value};

pub(crate) fn summarize(events: Vec<Value>, extra: Value) -> TraceSummary {
    let mut doc = json!({"schemaVersion": 1, "traceEvents": events});
    if let (Some(d), Some(e)) = (doc.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            d.insert(k.clone(), v.clone());
        }
    }
    let bytes = serde_json::to_vec(&doc).unwrap();
    trace::analyze_reader(&bytes[..], "test").unwrap()
}

pub(crate) fn x(cat: &str, name: &str, ts: f64, dur: f64, args: Value) -> Value {
    json!({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args})
}

pub(crate) fn kernel(name: &str, ts: f64, dur: f64, corr: u64) -> Value {
    json!({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
           "args": {"device": 0, "stream": 7, "correlation": corr, "External id": corr}})
}

pub(crate) fn launch(ts: f64, corr: u64) -> Value {
    x(
        "cuda_runtime",
        "cudaLaunchKernel",
        ts,
        3.0,
        json!({"correlation": corr, "External id": corr}),
    )
}

pub(crate) fn v100() -> Value {
    json!({"deviceProperties": [{"id": 0, "name": "Tesla V100", "computeMajor": 7, "computeMinor": 0}]})
}

/// `n` steps of `step_us`, each with a DataLoader call of `dl_us` then one kernel filling the rest.
fn steps_with_dataloader(n: usize, step_us: f64, dl_us: f64, iter: &str) -> Vec<Value> {
    steps_with_kernel(n, step_us, dl_us, iter, "volta_sgemm_128x64_nn")
}

/// As [`steps_with_dataloader`], the kernel named `kernel_name`.
pub(crate) fn steps_with_kernel(
    n: usize,
    step_us: f64,
    dl_us: f64,
    iter: &str,
    kernel_name: &str,
) -> Vec<Value> {
    let mut ev = Vec::new();
    for i in 0..n {
        let t0 = i as f64 * step_us;
        ev.push(x(
            "user_annotation",
            &format!("ProfilerStep#{i}"),
            t0,
            step_us,
            json!({}),
        ));
        ev.push(x(
            "cpu_op",
            &format!("enumerate(DataLoader)#{iter}.__next__"),
            t0,
            dl_us,
            json!({}),
        ));
        ev.push(launch(t0 + dl_us, i as u64 + 1));
        ev.push(kernel(
            kernel_name,
            t0 + dl_us + 5.0,
            step_us - dl_us - 10.0,
            i as u64 + 1,
        ));
    }
    ev
}

fn ids(s: &TraceSummary) -> Vec<String> {
    rules::evaluate(s)
        .into_iter()
        .map(|f| f.id.to_string())
        .collect()
}

#[test]
fn input_bound_threshold_and_num_workers_evidence() {
    let s = summarize(
        steps_with_dataloader(3, 1000.0, 300.0, "_SingleProcessDataLoaderIter"),
        json!({}),
    );
    let f = rules::input_bound(&s).expect("30% dataloader is input-bound");
    assert_eq!(f.evidence.to_json()["num_workers"], 0);
    assert!((f.evidence.to_json()["dataloader_pct"].as_f64().unwrap() - 30.0).abs() < 0.5);
    assert!(f.expected_speedup.unwrap() > 1.3);
    // multi-process iterator: still input-bound but no num_workers=0 evidence
    let s = summarize(
        steps_with_dataloader(3, 1000.0, 300.0, "_MultiProcessingDataLoaderIter"),
        json!({}),
    );
    assert!(!rules::input_bound(&s)
        .unwrap()
        .evidence
        .to_json()
        .contains_key("num_workers"));
    // just under 5%: not input-bound
    let s = summarize(
        steps_with_dataloader(3, 1000.0, 45.0, "_SingleProcessDataLoaderIter"),
        json!({}),
    );
    assert!(rules::input_bound(&s).is_none());
}

#[test]
fn pageable_memcpy_only_for_pageable_host_copies() {
    let mut ev = steps_with_dataloader(2, 1000.0, 10.0, "_MultiProcessingDataLoaderIter");
    let copy = |name: &str, ts: f64| {
        json!({"ph": "X", "cat": "gpu_memcpy", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": 100.0,
               "args": {"device": 0, "stream": 7, "bytes": 1_000_000}})
    };
    ev.push(copy("Memcpy HtoD (Pinned -> Device)", 100.0));
    ev.push(copy("Memcpy DtoD (Device -> Device)", 300.0));
    let s = summarize(ev.clone(), json!({}));
    assert!(rules::pageable_memcpy(&s).is_none());
    ev.push(copy("Memcpy HtoD (Pageable -> Device)", 1100.0));
    let s = summarize(ev, json!({}));
    let f = rules::pageable_memcpy(&s).unwrap();
    assert_eq!(f.evidence.to_json()["copies"], 1);
    assert_eq!(
        f.evidence.to_json()["bandwidth_gbps"].as_f64().unwrap(),
        10.0
    );
    // a tiny pageable copy (scalars) is not worth a finding
    let mut ev = steps_with_dataloader(2, 100_000.0, 10.0, "_MultiProcessingDataLoaderIter");
    ev.push(json!({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "pid": 0, "tid": 7,
                   "ts": 50.0, "dur": 2.0, "args": {"device": 0, "stream": 7, "bytes": 4}}));
    assert!(rules::pageable_memcpy(&summarize(ev, json!({}))).is_none());
}

#[test]
fn amp_unused_needs_tensor_core_gpu_eligible_ops_and_no_tc_kernels() {
    let mk = |kname: &str, op: &str| {
        let mut ev = vec![first_step(1000.0)];
        ev.push(x("cpu_op", op, 0.0, 900.0, json!({"External id": 1})));
        ev.push(launch(10.0, 1));
        ev.push(kernel(kname, 20.0, 800.0, 1));
        ev
    };
    let s = summarize(mk("volta_sgemm_128x64_nn", "aten::addmm"), v100());
    assert!(rules::amp_unused(&s).is_some());
    // already on tensor cores
    let s = summarize(mk("volta_h884gemm_64x64_nn", "aten::addmm"), v100());
    assert!(rules::amp_unused(&s).is_none());
    // on tensor cores by a kernel the plugin's name list does not know (cuBLAS nvjet on H100):
    // not "tensor cores idle"
    let h100 = json!({"deviceProperties": [{"id": 0, "name": "NVIDIA H100", "computeMajor": 9, "computeMinor": 0}]});
    let s = summarize(
        mk("nvjet_hsh_192x192_64x4_2x1_v_bz_coopA_NTN", "aten::addmm"),
        h100,
    );
    assert_eq!(s.kernels.tb_plugin_tensor_core_pct, 0.0);
    assert!(s.kernels.tensor_core_pct > 99.0);
    assert!(rules::amp_unused(&s).is_none());
    // no eligible op
    let s = summarize(mk("volta_sgemm_128x64_nn", "aten::relu"), v100());
    assert!(rules::amp_unused(&s).is_none());
    // ROCm: computeMajor is the gfx generation and kernel names differ
    let mi300 = json!({"deviceProperties": [{"id": 0, "name": "AMD Instinct MI300X", "computeMajor": 9, "computeMinor": 4}]});
    assert!(rules::amp_unused(&summarize(mk("Cijk_Ailk_Bljk_SB", "aten::addmm"), mi300)).is_none());
    // pre-Volta GPU, or unknown GPU
    let p100 = json!({"deviceProperties": [{"id": 0, "name": "P100", "computeMajor": 6, "computeMinor": 0}]});
    assert!(rules::amp_unused(&summarize(mk("sgemm", "aten::addmm"), p100)).is_none());
    assert!(rules::amp_unused(&summarize(mk("sgemm", "aten::addmm"), json!({}))).is_none());
}

#[test]
fn sync_bound_counts_blocking_calls() {
    let mut ev = steps_with_dataloader(2, 1000.0, 300.0, "_MultiProcessingDataLoaderIter");
    ev.push(x(
        "cuda_runtime",
        "cudaStreamSynchronize",
        500.0,
        50.0,
        json!({"correlation": 90}),
    ));
    let s = summarize(ev.clone(), json!({}));
    assert!(rules::sync_bound(&s).is_none(), "2.5% is fine");
    let device_sync = x(
        "cuda_runtime",
        "cudaDeviceSynchronize",
        1200.0,
        400.0,
        json!({"correlation": 91}),
    );
    ev.push(device_sync.clone());
    let s = summarize(ev, json!({}));
    let f = rules::sync_bound(&s).unwrap();
    assert_eq!(f.evidence.to_json()["sync_calls"], 2);
    assert_eq!(f.evidence.to_json()["top_call"], "cudaDeviceSynchronize");
    // the same blocking with a GPU that is busy anyway is harmless
    let mut ev = steps_with_dataloader(2, 1000.0, 10.0, "_MultiProcessingDataLoaderIter");
    ev.push(device_sync);
    assert!(rules::sync_bound(&summarize(ev, json!({}))).is_none());
}

#[test]
fn launch_bound_many_tiny_kernels_waiting_for_launches() {
    let mut ev = vec![first_step(10_000.0)];
    // 400 kernels of 2 µs, each launched 25 µs after the previous ended
    for i in 0..400u64 {
        let t = i as f64 * 25.0;
        ev.push(launch(t, i + 1));
        ev.push(kernel(
            "vectorized_elementwise_kernel",
            t + 20.0,
            2.0,
            i + 1,
        ));
    }
    let s = summarize(ev, json!({}));
    assert!(s.launch.stretches >= 1);
    let f = rules::launch_bound(&s).expect("launch-bound");
    assert!(f.evidence.to_json()["short_kernel_pct"].as_f64().unwrap() > 99.0);
    // the same number of long kernels is not launch-bound
    let mut ev = vec![first_step(40_000.0)];
    for i in 0..400u64 {
        let t = i as f64 * 100.0;
        ev.push(launch(t, i + 1));
        ev.push(kernel("big_gemm", t + 5.0, 95.0, i + 1));
    }
    assert!(rules::launch_bound(&summarize(ev, json!({}))).is_none());
}

#[test]
fn comm_bound_from_nccl_annotations_and_kernels() {
    let mut ev = vec![first_step(1000.0)];
    ev.push(x(
        "cpu_op",
        "aten::mm",
        0.0,
        100.0,
        json!({"External id": 1}),
    ));
    ev.push(kernel("sgemm", 10.0, 300.0, 1));
    ev.push(x(
        "user_annotation",
        "nccl:all_reduce",
        400.0,
        50.0,
        json!({"External id": 2}),
    ));
    ev.push(kernel(
        "ncclKernel_AllReduce_RING_LL_Sum_float",
        400.0,
        400.0,
        2,
    ));
    let s = summarize(ev, json!({}));
    assert!((s.breakdown.communication_us - 400.0).abs() < 1e-6);
    let f = rules::comm_bound(&s).unwrap();
    assert!((f.evidence.to_json()["communication_pct"].as_f64().unwrap() - 40.0).abs() < 0.1);
    assert!(s.communication.kernel_us >= 400.0);
    // NCCL kernels not linked to a CPU collective still count when they are exposed
    let mut ev = vec![first_step(1000.0)];
    ev.push(kernel("sgemm", 10.0, 300.0, 1));
    ev.push(kernel(
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
        400.0,
        300.0,
        2,
    ));
    let s = summarize(ev, json!({}));
    assert_eq!(s.breakdown.communication_us, 0.0);
    assert!((s.communication.exposed_us_per_step - 300.0).abs() < 1e-6);
    assert!(rules::comm_bound(&s).is_some());
}

#[test]
fn low_gpu_util_and_cpu_only() {
    let s = summarize(
        steps_with_dataloader(2, 1000.0, 600.0, "_MultiProcessingDataLoaderIter"),
        json!({}),
    );
    assert!(rules::low_gpu_util(&s).is_some());
    let cpu = summarize(
        vec![
            x("user_annotation", "ProfilerStep#3", 0.0, 100.0, json!({})),
            x("cpu_op", "aten::add", 1.0, 5.0, json!({})),
        ],
        json!({}),
    );
    assert!(
        rules::low_gpu_util(&cpu).is_none(),
        "no GPU: no utilization finding"
    );
    assert!(ids(&cpu).is_empty());
}

#[test]
fn straggler_across_ranks() {
    let rank = |r: u64, step: f64| {
        let mut s = summarize(
            steps_with_dataloader(2, step, 10.0, "_MultiProcessingDataLoaderIter"),
            json!({}),
        );
        s.rank = Some(r);
        s
    };
    let even = vec![rank(0, 1000.0), rank(1, 1020.0), rank(2, 990.0)];
    assert!(rules::straggler(&even).is_none());
    let uneven = vec![rank(0, 1000.0), rank(1, 1500.0), rank(2, 990.0)];
    let f = rules::straggler(&uneven).unwrap();
    assert_eq!(f.evidence.to_json()["straggler_rank"], "1");
    assert!(rules::straggler(&uneven[..1]).is_none());
    // An even count: the median rank is the lower of the two middle ones (1040, not 1070).
    let four = vec![
        rank(0, 1000.0),
        rank(1, 1040.0),
        rank(2, 1100.0),
        rank(3, 1600.0),
    ];
    let f = rules::straggler(&four).unwrap();
    assert_eq!(f.evidence.to_json()["median_step_us"], 1040.0);
}

#[test]
fn schema_variants_2021_names_strings_ns_and_missing_fields() {
    // 2021 categories, string pid/tid, "external id", Runtime extends the step to its kernel
    let ev = vec![
        json!({"ph": "X", "cat": "Operator", "name": "ProfilerStep#7", "pid": "123", "tid": "123", "ts": 0, "dur": 100}),
        json!({"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": "123", "tid": "123", "ts": 10, "dur": 5, "args": {"correlation": 5, "external id": 1}}),
        json!({"ph": "X", "cat": "Kernel", "name": "k", "pid": 0, "tid": "stream 7", "ts": 50, "dur": 150, "args": {"correlation": 5, "stream": 7, "device": 0}}),
        json!({"ph": "X", "cat": "Kernel", "name": "no ts"}),
        json!({"ph": "i", "name": "instant", "ts": 3}),
        json!({"ph": "X", "cat": "cpu_op", "name": "big", "ts": 1.0e30, "dur": 1, "args": {"External id": 99999999999999999999999u128.to_string()}}),
    ];
    let s = summarize(
        ev,
        json!({"baseTimeNanoseconds": 1_700_000_000_000_000_000u64}),
    );
    assert_eq!(s.steps.len(), 1);
    assert_eq!(s.steps[0].step, "7");
    assert_eq!(
        s.steps[0].total_us, 200.0,
        "step extended to the end of its kernel"
    );
    assert_eq!(s.steps[0].kernel_us, 150.0);
    assert_eq!(s.devices[0].streams[0].stream, 7);
}

/// `ProfilerStep#1`, from 0 for `dur` µs.
fn first_step(dur: f64) -> Value {
    x("user_annotation", "ProfilerStep#1", 0.0, dur, json!({}))
}

/// The training loop taking its next batch from a single-process DataLoader, recorded as `cat`.
fn next_batch(cat: &str, t: f64, dur: f64) -> Value {
    x(
        cat,
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
        t,
        dur,
        json!({}),
    )
}

#[test]
fn iterations_are_inferred_without_profiler_steps() {
    let mut ev = Vec::new();
    for i in 0..4 {
        let t = i as f64 * 1000.0;
        ev.push(next_batch("cpu_op", t, 400.0));
        ev.push(x(
            "user_annotation",
            "Optimizer.step#SGD.step",
            t + 900.0,
            50.0,
            json!({}),
        ));
    }
    let s = summarize(ev, json!({}));
    assert_eq!(s.step_source.as_str(), "optimizer_step");
    assert_eq!(s.steps.len(), 3);
    assert!(s.tb_plugin_steps.as_ref().unwrap().len() == 1);
    assert!(s.warnings.iter().any(|w| w.contains("inferred")));
    assert!(rules::input_bound(&s).is_some());
}

#[test]
fn empty_and_eventless_traces_are_errors() {
    assert!(trace::analyze_reader(&b""[..], "e").is_err());
    assert!(trace::analyze_reader(&br#"{"traceEvents": []}"#[..], "e").is_err());
    assert!(trace::analyze_reader(
        &br#"{"traceEvents": [{"ph": "M", "name": "process_name"}]}"#[..],
        "e"
    )
    .is_err());
    assert!(trace::analyze_reader(&b"\x1f\x8b\x08garbage"[..], "e").is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn reader_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
        let _ = trace::analyze_reader(&bytes[..], "fuzz");
    }

    #[test]
    fn reader_never_panics_on_truncated_or_mutated_traces(cut in 0usize..4000, flip in 0usize..4000, byte in any::<u8>()) {
        let mut ev = steps_with_dataloader(3, 1000.0, 300.0, "_SingleProcessDataLoaderIter");
        ev.push(json!({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7, "ts": 5, "dur": 3, "args": {"bytes": 10}}));
        let mut bytes = serde_json::to_vec(&json!({"traceEvents": ev, "deviceProperties": [{"id": 0}]})).unwrap();
        if flip < bytes.len() { bytes[flip] = byte; }
        bytes.truncate(cut.min(bytes.len()));
        if let Ok(s) = trace::analyze_reader(&bytes[..], "fuzz") {
            let _ = rules::evaluate(&s);
            let _ = gpufeed::present::trace::text(&trace::report::Report::new(vec![s]), true);
        }
    }
}

/// DataLoader events recorded as `user_annotation` (current PyTorch), no ProfilerStep: the plugin
/// category sees none of them, yet the measured share drives `input_bound`, and the text shows
/// the plugin's figure labelled as such with the reason they differ.
#[test]
fn input_bound_from_the_measured_share_whatever_the_category_or_step_source() {
    let mut ev = Vec::new();
    for i in 0..5 {
        let t = i as f64 * 1000.0;
        ev.push(next_batch("user_annotation", t, 680.0));
        ev.push(launch(t + 700.0, i + 1));
        ev.push(kernel("volta_sgemm_128x64_nn", t + 710.0, 250.0, i + 1));
    }
    let s = summarize(ev.clone(), v100());
    assert_eq!(s.step_source.as_str(), "dataloader");
    assert!(s.breakdown.dataloader_us < 1.0, "plugin category: none");
    let f = rules::input_bound(&s).expect("68% measured DataLoader share is input-bound");
    assert!(
        (f.evidence.to_json()["dataloader_pct"].as_f64().unwrap() - 68.0).abs() < 1.0,
        "{f:?}"
    );
    assert_eq!(f.evidence.to_json()["tb_plugin_dataloader_pct"], 0.0);
    assert!(f.title.contains("and the GPU with it"), "{}", f.title);
    let rep = trace::report::Report::new(vec![s]);
    let text = gpufeed::present::trace::text(&rep, false);
    assert!(
        text.starts_with("warning:")
            && text.contains("VERDICT  input_bound  (confidence 0.90)")
            && text.contains("TOP FIX  Input-bound"),
        "{text}"
    );
    assert!(!text.contains("No problems found"), "{text}");
    assert_eq!(rep.verdict.id.as_str(), "input_bound");
    assert_eq!(rep.ranks[0].verdict, rep.verdict);
    assert!(text.contains("TensorBoard-plugin breakdown"), "{text}");
    assert!(text.contains("books none of it to dataloader"), "{text}");

    // CPU-only: the loop waits, no GPU is said to
    let cpu: Vec<Value> = ev
        .into_iter()
        .filter(|e| e["cat"] == "user_annotation")
        .collect();
    let s = summarize(cpu, json!({}));
    let f = rules::input_bound(&s).expect("CPU-only traces too");
    assert!(!f.title.contains("GPU"), "{}", f.title);
    assert!(f.title.contains("training loop waits"), "{}", f.title);
}

#[test]
fn the_top_fix_is_said_once_with_its_deciding_numbers() {
    let s = summarize(
        steps_with_dataloader(3, 1000.0, 300.0, "_SingleProcessDataLoaderIter"),
        v100(),
    );
    let rep = trace::report::Report::new(vec![s]);
    let t = gpufeed::present::trace::text(&rep, false);
    let fix = &rep.findings[0].recommendation;
    assert_eq!(t.matches(fix.as_str()).count(), 1, "{t}");
    assert!(t.contains("because: dataloader_iterator="), "{t}");
    assert!(t.contains(": the TOP FIX above"), "{t}");
    // The title and its gain are not repeated in the numbered list either.
    assert_eq!(t.matches(rep.findings[0].title.as_str()).count(), 1, "{t}");
    assert!(!t.contains("step_source="), "not a deciding number: {t}");
    let v = gpufeed::present::trace::text_with(&rep, false, true);
    assert!(v.contains("step_source="), "--verbose lists all: {v}");
}

/// A DeepSeek-V3-like step on an H800 (made for this test): FP8 grouped GEMMs through CUTLASS,
/// flash attention forward and backward, DeepEP dispatch/combine on a second stream, partly
/// beside compute.
fn modern_moe_step() -> Vec<Value> {
    let on = |stream: u64, name: &str, ts: f64, dur: f64, corr: u64| {
        json!({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
               "args": {"device": 0, "stream": stream, "correlation": corr, "External id": corr}})
    };
    let mut ev = vec![x(
        "user_annotation",
        "ProfilerStep#0",
        0.0,
        1000.0,
        json!({}),
    )];
    let k = [
        (7, "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, cutlass::float_e4m3_t>>(Params)", 0.0, 200.0),
        (7, "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>>(Flash_fwd_params)", 200.0, 100.0),
        (7, "nvjet_hsh_192x192_64x4_2x1_v_bz_coopA_NTN", 300.0, 50.0),
        (7, "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", 350.0, 50.0),
        (20, "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*)", 300.0, 200.0),
        (20, "void deep_ep::internode::combine<false, 8, 4>(int4*, float*)", 500.0, 300.0),
        (7, "void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128>>(Flash_bwd_params)", 800.0, 100.0),
    ];
    for (i, (s, name, ts, dur)) in k.into_iter().enumerate() {
        ev.push(launch(ts - 4.0, i as u64 + 1));
        ev.push(on(s, name, ts, dur, i as u64 + 1));
    }
    ev
}

#[test]
fn modern_kernels_are_classified_by_family_beside_the_plugin_figures() {
    let h800 = json!({"deviceProperties": [{"id": 0, "name": "NVIDIA H800", "computeMajor": 9, "computeMinor": 0}]});
    let s = summarize(modern_moe_step(), h800);
    let f = &s.kernels.families;
    // 1000 µs of kernels: 250 GEMM + 200 attention, 500 DeepEP, 50 other.
    assert_eq!(f.tensor_core_gemm_us, 250.0);
    assert_eq!(f.attention_us, 200.0);
    assert_eq!(f.communication_us, 500.0);
    assert_eq!(f.tensor_core_pct, 45.0);
    assert_eq!(f.communication_pct, 50.0);
    // Compute runs beside 100 µs of the 500 (300-400 µs, beside the dispatch).
    assert_eq!(f.communication_overlap_pct, 20.0);
    let gemm = s
        .kernels
        .top
        .iter()
        .find(|t| t.name.contains("cutlass::device_kernel"));
    assert!(gemm.is_some_and(|t| t.tensor_core), "{:?}", s.kernels.top);
    // DeepEP counts as communication in gpufeed's own figures (was 0 µs).
    assert_eq!(s.communication.kernel_us, 500.0);
    let rep = trace::report::Report::new(vec![s.clone()]);
    let text = gpufeed::present::trace::text(&rep, false);
    // One figure: the families' share is the kernels' share, and every kernel it counts is
    // marked in top[]; the plugin's name list knows only the flash attention kernels.
    assert_eq!(s.kernels.tensor_core_pct, 45.0);
    assert_eq!(s.kernels.tb_plugin_tensor_core_pct, 20.0);
    for t in &s.kernels.top {
        assert_eq!(
            t.tensor_core,
            matches!(
                t.family,
                KernelFamily::TensorCoreGemm | KernelFamily::Attention
            ),
            "{t:?}"
        );
    }
    assert!(
        text.contains(
            "tensor cores 45% of kernel time (tensor-core GEMM 0.2 ms, attention 0.2 ms)"
        ) && text.contains("communication kernels 50% of kernel time (20% overlapped by compute)")
            && text.contains(
                "TensorBoard plugin's tensor-core figure (its kernel-name list only) 20%"
            )
            && !text.contains("tensor-core GEMM and attention"),
        "{text}"
    );
    let v = serde_json::to_value(&rep).unwrap();
    assert_eq!(
        v["traces"][0]["kernels"]["families"]["communication_pct"],
        50.0
    );
    assert_eq!(
        v["traces"][0]["kernels"]["top"][0]["family"],
        "communication"
    );
}
