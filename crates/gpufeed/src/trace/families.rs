//! Kernel families of modern training, told from kernel names by family rather than a short
//! list: tensor-core GEMMs (cuBLAS sm80/sm90 xmma, wgmma/hgmma, nvjet, CUTLASS/CuTe
//! `device_kernel`s, fp8/bf16/fp16 GEMMs, Triton matmul templates), attention (flash attention
//! forward/backward, fmha, cuDNN SDPA) and communication beyond NCCL (DeepEP intranode/internode
//! dispatch/combine/notify, NVSHMEM, all-to-all, custom all-reduce). These figures are reported
//! beside the TensorBoard-plugin breakdown, which stays as the plugin books it.

use super::collect::is_tc_kernel;
use super::ranges::{self, Range};
use serde::{Deserialize, Serialize};

/// What a kernel does, by its name (closed set; the JSON strings are stable).
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[strum(serialize_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum KernelFamily {
    /// Matrix multiplies on tensor cores.
    TensorCoreGemm,
    /// Fused attention (flash attention, fmha, cuDNN SDPA).
    Attention,
    /// Collectives and expert-parallel exchange.
    Communication,
    /// Everything else (elementwise, reductions, normalisation, copies done by kernels).
    #[default]
    Other,
}

impl KernelFamily {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

const COMM: [&str; 16] = [
    "nccl",
    "rccl",
    "nvshmem",
    "deep_ep",
    "deepep",
    "internode::",
    "intranode::",
    "all_to_all",
    "alltoall",
    "all_reduce",
    "allreduce",
    "cross_device_reduce",
    "all_gather",
    "allgather",
    "reduce_scatter",
    "reducescatter",
];

const ATTENTION: [&str; 8] = [
    "flash_fwd",
    "flash_bwd",
    "flash_attn",
    "flashattn",
    "fmha",
    "sdpa",
    "mha_fwd",
    "mha_bwd",
];

const GEMM_WORDS: [&str; 4] = ["gemm", "matmul", "_mm_", "grouped_mm"];
/// Precisions in a GEMM's own name (not `c10::Half` template arguments, which every kind of
/// kernel carries).
const LOW_PRECISION: [&str; 7] = ["fp8", "e4m3", "e5m2", "bf16", "fp16", "f16", "tf32"];

/// The family of a kernel, from its name.
pub fn family(name: &str) -> KernelFamily {
    let l = name.to_ascii_lowercase();
    let has = |ps: &[&str]| ps.iter().any(|p| l.contains(p));
    // DeepEP's kernels are `deep_ep::intranode::dispatch<...>`, `internode::combine`, `notify_*`.
    if has(&COMM)
        || ((l.contains("intranode") || l.contains("internode"))
            && has(&["dispatch", "combine", "notify"]))
    {
        return KernelFamily::Communication;
    }
    if has(&ATTENTION) || (l.contains("flash") && has(&["fwd", "bwd", "attention"])) {
        return KernelFamily::Attention;
    }
    let cutlass_gemm = (l.contains("cutlass") || l.contains("cute::"))
        && (l.contains("device_kernel") || l.contains("gemm") || l.contains("kernel"));
    let cublas = l.starts_with("nvjet") || l.contains("nvjet_") || has(&["hgmma", "wgmma"]);
    // Inductor's matmul templates (`triton_tem_fused_mm_0`) and Triton matmul kernels.
    let triton_mm = l.starts_with("triton") && has(&["_tem_", "matmul", "_mm_", "_bmm_"]);
    // FBGEMM is a library name (its embedding kernels are no GEMMs).
    let unlibbed = l.replace("fbgemm", "");
    let low_gemm = GEMM_WORDS.iter().any(|w| unlibbed.contains(w)) && has(&LOW_PRECISION);
    if cutlass_gemm || cublas || triton_mm || low_gemm || is_tc_kernel(name) {
        return KernelFamily::TensorCoreGemm;
    }
    KernelFamily::Other
}

/// Kernel time by family, and how much of the communication compute overlaps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FamilyStat {
    /// Share of kernel time in tensor-core GEMMs and attention together.
    pub tensor_core_pct: f64,
    pub tensor_core_gemm_us: f64,
    pub attention_us: f64,
    pub communication_us: f64,
    pub other_us: f64,
    /// Share of kernel time in communication kernels (DeepEP, NVSHMEM, NCCL, ...).
    pub communication_pct: f64,
    /// Share of communication kernel time with a compute kernel running beside it.
    pub communication_overlap_pct: f64,
}

/// Figures from each kernel's (start, end) and family.
pub fn stat(kernels: impl Iterator<Item = (Range, KernelFamily)>) -> FamilyStat {
    let mut s = FamilyStat::default();
    let (mut comm, mut comp): (Vec<Range>, Vec<Range>) = (Vec::new(), Vec::new());
    for ((a, b), f) in kernels {
        let d = (b - a).max(0.0);
        match f {
            KernelFamily::TensorCoreGemm => s.tensor_core_gemm_us += d,
            KernelFamily::Attention => s.attention_us += d,
            KernelFamily::Communication => s.communication_us += d,
            KernelFamily::Other => s.other_us += d,
        }
        if f == KernelFamily::Communication {
            comm.push((a, b));
        } else {
            comp.push((a, b));
        }
    }
    let total = s.tensor_core_gemm_us + s.attention_us + s.communication_us + s.other_us;
    let pct = |x: f64| {
        if total > 0.0 {
            (1000.0 * x / total).round() / 10.0
        } else {
            0.0
        }
    };
    s.tensor_core_pct = pct(s.tensor_core_gemm_us + s.attention_us);
    s.communication_pct = pct(s.communication_us);
    let comm = ranges::merge(comm);
    let ck = ranges::total(&comm);
    if ck > 0.0 {
        let ov = ranges::total(&ranges::intersect(&comm, &ranges::merge(comp)));
        s.communication_overlap_pct = (1000.0 * ov / ck).round() / 10.0;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use KernelFamily::*;

    #[test]
    fn modern_kernel_names_by_family() {
        for n in [
            "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, cutlass::float_e4m3_t>>(Params)",
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
            "sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize160x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel",
            "nvjet_hsh_192x192_64x4_2x1_v_bz_coopA_NTN",
            "void deep_gemm::fp8_gemm_kernel<128u, 4096u>(float*, float*, int*, int)",
            "triton_tem_fused_mm_0",
            "triton_per_fused_matmul_kernel_0",
            "hgmma_bf16_128x128",
            "ampere_fp16_s16816gemm_fp16_256x128_ldg8_f2f_stages_32x3_nn",
        ] {
            assert_eq!(family(n), TensorCoreGemm, "{n}");
        }
        for n in [
            "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>, true>(Flash_fwd_params)",
            "void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128>>(Flash_bwd_params)",
            "fmha_cutlassF_bf16_aligned_64x128_rf_sm80",
            "cudnn_generated_fort_native_sdpa_sm90_knob_7_64x128x128_4x1x1_kernel0_0",
        ] {
            assert_eq!(family(n), Attention, "{n}");
        }
        for n in [
            "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*)",
            "void deep_ep::internode::combine<false, 8, 4>(int4*, float*)",
            "void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int)",
            "void internode::notify_dispatch<true>()",
            "nvshmemi_proxy_kernel",
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
            "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*)",
            "all_to_all_kernel",
        ] {
            assert_eq!(family(n), Communication, "{n}");
        }
        for n in [
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
            "volta_sgemm_128x64_nn",
            "triton_poi_fused_add_0",
            "void at::native::reduce_kernel<512, 1>",
            "void split_embedding_codegen_forward_unweighted_kernel<c10::Half, c10::Half, float>(at::GenericPackedTensorAccessor<c10::Half, 1ul>)",
        ] {
            assert_eq!(family(n), Other, "{n}");
        }
    }

    #[test]
    fn shares_and_overlap() {
        let s = stat(
            [
                ((0.0, 40.0), TensorCoreGemm),
                ((40.0, 50.0), Attention),
                ((30.0, 70.0), Communication),
                ((70.0, 80.0), Communication),
                ((80.0, 100.0), Other),
            ]
            .into_iter(),
        );
        assert_eq!(s.tensor_core_pct, 41.7);
        assert_eq!(s.communication_pct, 41.7);
        // 50 µs of communication, 20 of it beside compute.
        assert_eq!(s.communication_overlap_pct, 40.0);
        assert_eq!(stat(std::iter::empty()), FamilyStat::default());
    }
}
