//! One vocabulary for every GPU log gpufeed reads: a column, key or series name → the metric it
//! holds and the factor that brings its values to the metric's unit.
//!
//! Every reader of other tools' telemetry looks names up here ([`lookup`]): nvidia-smi
//! `--query-gpu` names, `dcgmi dmon` short names, DCGM field names (dcgm-exporter, Prometheus,
//! Grafana), nvidia_gpu_exporter series, W&B and MLflow system metrics, `rocm-smi` and `amd-smi`
//! columns. docs/diagnose.md lists the same table ("What gpufeed reads"); a test holds the two
//! together.
//!
//! Names that carry a GPU number (`system.gpu.3.gpu`, `system/gpu_3_utilization_percentage`)
//! are looked up with the number taken out (`{}` in [`TERMS`]) and the number handed back.

/// What a column holds, in the unit its name says.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, strum::IntoStaticStr, strum::EnumIter,
)]
#[strum(serialize_all = "snake_case")]
pub enum Metric {
    /// When the reading was taken (a date and time, or epoch seconds / milliseconds).
    Time,
    /// The date of a reading whose time of day is in another column (`nvidia-smi dmon -o DT`);
    /// other tables read it as [`Metric::Time`].
    Date,
    /// Seconds since the run started.
    RelativeS,
    /// Which GPU (an index, `GPU 3`, `card0`, a MIG instance).
    Gpu,
    Uuid,
    BusId,
    Name,
    /// The machine (a multi-node export).
    Host,
    /// SM active: share of time at least one warp was resident on an SM, averaged over SMs
    /// (DCGM profiling). The best busy measure.
    SmActivePct,
    /// Graphics engine active: share of time any kernel ran (DCGM profiling).
    GrActivePct,
    /// nvidia-smi's utilization: share of the sample period a kernel ran (one tiny kernel
    /// counts as busy). AMD's GFX activity.
    UtilPct,
    SmOccupancyPct,
    TensorActivePct,
    DramActivePct,
    /// Known, read, not judged (FP16/FP32/FP64 pipes, NVLink, memory clock, …).
    Ignored,
    /// Share of time device memory was read or written.
    MemUtilPct,
    MemUsedBytes,
    MemTotalBytes,
    MemFreeBytes,
    /// Memory in use as a percent of the total (W&B `memoryAllocated`, MLflow).
    MemUsedPctOfTotal,
    PowerW,
    TemperatureC,
    SmClockMhz,
    PcieRxBytesPerS,
    PcieTxBytesPerS,
    PcieGen,
    PcieGenMax,
    PcieWidth,
    PcieWidthMax,
    PowerLimitW,
    /// Clock-event (throttle) reasons as NVML's bitmask (`0x0000000000000040`).
    ThrottleReasons,
    /// One clock-event reason's column (`Active` / `Not Active`); its bit is [`throttle_bit`].
    ThrottleReason,
    /// The process a row is about (`nvidia-smi pmon`).
    Pid,
}

impl Metric {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The busy measures, best first: a file is judged by the best it holds.
    pub const BUSY: [Metric; 3] = [Metric::SmActivePct, Metric::GrActivePct, Metric::UtilPct];

    /// How a report names a busy measure.
    pub(crate) fn busy_label(self) -> &'static str {
        match self {
            Metric::SmActivePct => "SM active (DCGM SMACT / DCGM_FI_PROF_SM_ACTIVE)",
            Metric::GrActivePct => {
                "graphics engine active (DCGM GRACT / DCGM_FI_PROF_GR_ENGINE_ACTIVE)"
            }
            _ => "utilization (share of time a kernel ran)",
        }
    }
}

/// Which tool writes a name (for the docs and the notes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
pub enum Family {
    #[strum(serialize = "nvidia-smi --query-gpu")]
    SmiQuery,
    #[strum(serialize = "nvidia-smi -q (text and XML)")]
    SmiQ,
    #[strum(serialize = "dcgmi dmon")]
    Dcgmi,
    /// Short names found only in `nvidia-smi dmon`/`pmon` headers ([`lookup_dmon`]): alone, `sm`
    /// or `mem` could mean anything.
    #[strum(serialize = "nvidia-smi dmon and pmon")]
    SmiDmon,
    #[strum(serialize = "DCGM fields (dcgm-exporter, Prometheus, Grafana, DCGM CSVs)")]
    DcgmField,
    #[strum(serialize = "nvidia_gpu_exporter (Prometheus)")]
    SmiExporter,
    #[strum(serialize = "W&B system metrics")]
    Wandb,
    #[strum(serialize = "MLflow system metrics")]
    Mlflow,
    #[strum(serialize = "rocm-smi --csv")]
    RocmSmi,
    #[strum(serialize = "amd-smi metric --csv")]
    AmdSmi,
    #[strum(serialize = "time, GPU and host columns")]
    Common,
}

impl Family {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One name of the vocabulary.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Term {
    /// Lower case; `{}` stands for a GPU number.
    pub name: &'static str,
    pub metric: Metric,
    /// Multiply a value by this to get the metric's unit (a fraction × 100 = percent, MiB ×
    /// 1,048,576 = bytes).
    pub scale: f64,
    /// The unit values are in, for the docs.
    pub unit: &'static str,
    pub family: Family,
}

const MIB: f64 = 1_048_576.0;

macro_rules! t {
    ($name:literal, $m:ident, $scale:expr, $unit:literal, $fam:ident) => {
        Term {
            name: $name,
            metric: Metric::$m,
            scale: $scale,
            unit: $unit,
            family: Family::$fam,
        }
    };
}

/// The vocabulary. Names are matched lower-cased, with a `[unit]` suffix and a leading
/// `system/` or `system.` taken off when the whole name is not found.
#[rustfmt::skip]
pub(crate) const TERMS: &[Term] = &[
    // nvidia-smi --query-gpu (units also read from the header `[MiB]` or the values `1024 MiB`).
    t!("utilization.gpu", UtilPct, 1.0, "%", SmiQuery),
    t!("utilization.memory", MemUtilPct, 1.0, "%", SmiQuery),
    t!("memory.used", MemUsedBytes, MIB, "MiB", SmiQuery),
    t!("memory.total", MemTotalBytes, MIB, "MiB", SmiQuery),
    t!("memory.free", MemFreeBytes, MIB, "MiB", SmiQuery),
    t!("power.draw", PowerW, 1.0, "W", SmiQuery),
    t!("temperature.gpu", TemperatureC, 1.0, "C", SmiQuery),
    t!("clocks.sm", SmClockMhz, 1.0, "MHz", SmiQuery),
    t!("clocks.current.sm", SmClockMhz, 1.0, "MHz", SmiQuery),
    t!("index", Gpu, 1.0, "", SmiQuery),
    t!("uuid", Uuid, 1.0, "", SmiQuery),
    t!("gpu_uuid", Uuid, 1.0, "", SmiQuery),
    t!("pci.bus_id", BusId, 1.0, "", SmiQuery),
    t!("gpu_bus_id", BusId, 1.0, "", SmiQuery),
    t!("pci.bus", BusId, 1.0, "", SmiQuery),
    t!("name", Name, 1.0, "", SmiQuery),
    t!("gpu_name", Name, 1.0, "", SmiQuery),
    t!("power.draw.instant", PowerW, 1.0, "W", SmiQuery),
    t!("power.draw.average", PowerW, 1.0, "W", SmiQuery),
    t!("power.limit", PowerLimitW, 1.0, "W", SmiQuery),
    t!("enforced.power.limit", PowerLimitW, 1.0, "W", SmiQuery),
    t!("pcie.link.gen.current", PcieGen, 1.0, "", SmiQuery),
    t!("pcie.link.gen.gpucurrent", PcieGen, 1.0, "", SmiQuery),
    t!("pcie.link.gen.max", PcieGenMax, 1.0, "", SmiQuery),
    t!("pcie.link.gen.gpumax", PcieGenMax, 1.0, "", SmiQuery),
    t!("pcie.link.gen.hostmax", PcieGenMax, 1.0, "", SmiQuery),
    t!("pcie.link.width.current", PcieWidth, 1.0, "", SmiQuery),
    t!("pcie.link.width.max", PcieWidthMax, 1.0, "", SmiQuery),
    t!("clocks_throttle_reasons.active", ThrottleReasons, 1.0, "", SmiQuery),
    t!("clocks_event_reasons.active", ThrottleReasons, 1.0, "", SmiQuery),
    // One column per reason (`Active` / `Not Active`), under the old name and the new.
    t!("clocks_throttle_reasons.gpu_idle", ThrottleReason, 1.0, "", SmiQuery),
    t!("clocks_throttle_reasons.applications_clocks_setting", ThrottleReason, 1.0, "", SmiQuery),
    t!("clocks_throttle_reasons.sw_power_cap", ThrottleReason, 1.0, "", SmiQuery),
    t!("clocks_throttle_reasons.hw_slowdown", ThrottleReason, 1.0, "", SmiQuery),
    t!("clocks_throttle_reasons.hw_thermal_slowdown", ThrottleReason, 1.0, "", SmiQuery),
    t!("clocks_throttle_reasons.hw_power_brake_slowdown", ThrottleReason, 1.0, "", SmiQuery),
    t!("clocks_throttle_reasons.sw_thermal_slowdown", ThrottleReason, 1.0, "", SmiQuery),
    t!("clocks_throttle_reasons.sync_boost", ThrottleReason, 1.0, "", SmiQuery),
    t!("clocks_event_reasons.gpu_idle", ThrottleReason, 1.0, "", SmiQuery),
    t!("clocks_event_reasons.applications_clocks_setting", ThrottleReason, 1.0, "", SmiQuery),
    t!("clocks_event_reasons.sw_power_cap", ThrottleReason, 1.0, "", SmiQuery),
    t!("clocks_event_reasons.hw_slowdown", ThrottleReason, 1.0, "", SmiQuery),
    t!("clocks_event_reasons.hw_thermal_slowdown", ThrottleReason, 1.0, "", SmiQuery),
    t!("clocks_event_reasons.hw_power_brake_slowdown", ThrottleReason, 1.0, "", SmiQuery),
    t!("clocks_event_reasons.sw_thermal_slowdown", ThrottleReason, 1.0, "", SmiQuery),
    t!("clocks_event_reasons.sync_boost", ThrottleReason, 1.0, "", SmiQuery),
    // nvidia-smi -q and -q -x: the section and the key, in snake case (`FB Memory Usage` /
    // `Used`, `<fb_memory_usage><used>`); BAR1 memory is not the GPU's memory.
    t!("utilization/gpu", UtilPct, 1.0, "%", SmiQ),
    t!("utilization/gpu_util", UtilPct, 1.0, "%", SmiQ),
    t!("utilization/memory", MemUtilPct, 1.0, "%", SmiQ),
    t!("utilization/memory_util", MemUtilPct, 1.0, "%", SmiQ),
    t!("fb_memory_usage/used", MemUsedBytes, MIB, "MiB", SmiQ),
    t!("fb_memory_usage/total", MemTotalBytes, MIB, "MiB", SmiQ),
    t!("fb_memory_usage/free", MemFreeBytes, MIB, "MiB", SmiQ),
    t!("temperature/gpu_current_temp", TemperatureC, 1.0, "C", SmiQ),
    t!("temperature/gpu_temp", TemperatureC, 1.0, "C", SmiQ),
    t!("power_readings/power_draw", PowerW, 1.0, "W", SmiQ),
    t!("gpu_power_readings/power_draw", PowerW, 1.0, "W", SmiQ),
    t!("gpu_power_readings/average_power_draw", PowerW, 1.0, "W", SmiQ),
    t!("gpu_power_readings/instant_power_draw", PowerW, 1.0, "W", SmiQ),
    t!("clocks/sm", SmClockMhz, 1.0, "MHz", SmiQ),
    t!("clocks/sm_clock", SmClockMhz, 1.0, "MHz", SmiQ),
    // dcgmi dmon short names (profiling fields are fractions 0-1).
    t!("gputl", UtilPct, 1.0, "%", Dcgmi),
    t!("gract", GrActivePct, 100.0, "fraction", Dcgmi),
    t!("smact", SmActivePct, 100.0, "fraction", Dcgmi),
    t!("smocc", SmOccupancyPct, 100.0, "fraction", Dcgmi),
    t!("tenso", TensorActivePct, 100.0, "fraction", Dcgmi),
    t!("drama", DramActivePct, 100.0, "fraction", Dcgmi),
    t!("fp16a", Ignored, 1.0, "fraction", Dcgmi),
    t!("fp32a", Ignored, 1.0, "fraction", Dcgmi),
    t!("fp64a", Ignored, 1.0, "fraction", Dcgmi),
    t!("mcutl", MemUtilPct, 1.0, "%", Dcgmi),
    t!("fbusd", MemUsedBytes, MIB, "MiB", Dcgmi),
    t!("fbfre", MemFreeBytes, MIB, "MiB", Dcgmi),
    t!("fbttl", MemTotalBytes, MIB, "MiB", Dcgmi),
    t!("power", PowerW, 1.0, "W", Dcgmi),
    t!("tmptr", TemperatureC, 1.0, "C", Dcgmi),
    t!("gtemp", TemperatureC, 1.0, "C", Dcgmi),
    t!("smclk", SmClockMhz, 1.0, "MHz", Dcgmi),
    t!("mmclk", Ignored, 1.0, "MHz", Dcgmi),
    t!("pcitx", PcieTxBytesPerS, 1.0, "B/s", Dcgmi),
    t!("pcirx", PcieRxBytesPerS, 1.0, "B/s", Dcgmi),
    t!("nvltx", Ignored, 1.0, "B/s", Dcgmi),
    t!("nvlrx", Ignored, 1.0, "B/s", Dcgmi),
    // nvidia-smi dmon / pmon columns (`-o DT` adds date and time; rxpci/txpci in MB/s).
    t!("idx", Gpu, 1.0, "", SmiDmon),
    t!("pid", Pid, 1.0, "", SmiDmon),
    t!("sm", UtilPct, 1.0, "%", SmiDmon),
    t!("mem", MemUtilPct, 1.0, "%", SmiDmon),
    t!("fb", MemUsedBytes, MIB, "MiB", SmiDmon),
    t!("pwr", PowerW, 1.0, "W", SmiDmon),
    t!("pclk", SmClockMhz, 1.0, "MHz", SmiDmon),
    t!("rxpci", PcieRxBytesPerS, 1e6, "MB/s", SmiDmon),
    t!("txpci", PcieTxBytesPerS, 1e6, "MB/s", SmiDmon),
    // DCGM field names (dcgm-exporter series, DCGM CSVs, Grafana).
    t!("dcgm_fi_dev_gpu_util", UtilPct, 1.0, "%", DcgmField),
    t!("dcgm_fi_prof_sm_active", SmActivePct, 100.0, "fraction", DcgmField),
    t!("dcgm_fi_prof_gr_engine_active", GrActivePct, 100.0, "fraction", DcgmField),
    t!("dcgm_fi_prof_sm_occupancy", SmOccupancyPct, 100.0, "fraction", DcgmField),
    t!("dcgm_fi_prof_pipe_tensor_active", TensorActivePct, 100.0, "fraction", DcgmField),
    t!("dcgm_fi_prof_dram_active", DramActivePct, 100.0, "fraction", DcgmField),
    t!("dcgm_fi_prof_pipe_fp16_active", Ignored, 1.0, "fraction", DcgmField),
    t!("dcgm_fi_prof_pipe_fp32_active", Ignored, 1.0, "fraction", DcgmField),
    t!("dcgm_fi_prof_pipe_fp64_active", Ignored, 1.0, "fraction", DcgmField),
    t!("dcgm_fi_dev_mem_copy_util", MemUtilPct, 1.0, "%", DcgmField),
    t!("dcgm_fi_dev_fb_used", MemUsedBytes, MIB, "MiB", DcgmField),
    t!("dcgm_fi_dev_fb_free", MemFreeBytes, MIB, "MiB", DcgmField),
    t!("dcgm_fi_dev_fb_total", MemTotalBytes, MIB, "MiB", DcgmField),
    t!("dcgm_fi_dev_power_usage", PowerW, 1.0, "W", DcgmField),
    t!("dcgm_fi_dev_gpu_temp", TemperatureC, 1.0, "C", DcgmField),
    t!("dcgm_fi_dev_sm_clock", SmClockMhz, 1.0, "MHz", DcgmField),
    t!("dcgm_fi_dev_mem_clock", Ignored, 1.0, "MHz", DcgmField),
    t!("dcgm_fi_prof_pcie_rx_bytes", PcieRxBytesPerS, 1.0, "B/s", DcgmField),
    t!("dcgm_fi_prof_pcie_tx_bytes", PcieTxBytesPerS, 1.0, "B/s", DcgmField),
    t!("dcgm_fi_prof_nvlink_rx_bytes", Ignored, 1.0, "B/s", DcgmField),
    t!("dcgm_fi_prof_nvlink_tx_bytes", Ignored, 1.0, "B/s", DcgmField),
    t!("dcgm_fi_dev_total_energy_consumption", Ignored, 1.0, "mJ", DcgmField),
    t!("dcgm_fi_dev_memory_temp", Ignored, 1.0, "C", DcgmField),
    t!("dcgm_fi_dev_enc_util", Ignored, 1.0, "%", DcgmField),
    t!("dcgm_fi_dev_dec_util", Ignored, 1.0, "%", DcgmField),
    t!("dcgm_fi_dev_xid_errors", Ignored, 1.0, "", DcgmField),
    t!("dcgm_fi_dev_pcie_replay_counter", Ignored, 1.0, "", DcgmField),
    t!("dcgm_fi_dev_nvlink_bandwidth_total", Ignored, 1.0, "", DcgmField),
    t!("dcgm_fi_dev_vgpu_license_status", Ignored, 1.0, "", DcgmField),
    t!("dcgm_fi_dev_uncorrectable_remapped_rows", Ignored, 1.0, "", DcgmField),
    t!("dcgm_fi_dev_correctable_remapped_rows", Ignored, 1.0, "", DcgmField),
    t!("dcgm_fi_dev_row_remap_failure", Ignored, 1.0, "", DcgmField),
    t!("dcgm_fi_dev_clock_throttle_reasons", Ignored, 1.0, "", DcgmField),
    t!("entityid", Gpu, 1.0, "", DcgmField),
    // nvidia_gpu_exporter (ratios 0-1, bytes).
    t!("nvidia_smi_utilization_gpu_ratio", UtilPct, 100.0, "fraction", SmiExporter),
    t!("nvidia_smi_utilization_memory_ratio", MemUtilPct, 100.0, "fraction", SmiExporter),
    t!("nvidia_smi_memory_used_bytes", MemUsedBytes, 1.0, "B", SmiExporter),
    t!("nvidia_smi_memory_total_bytes", MemTotalBytes, 1.0, "B", SmiExporter),
    t!("nvidia_smi_memory_free_bytes", MemFreeBytes, 1.0, "B", SmiExporter),
    t!("nvidia_smi_power_draw_watts", PowerW, 1.0, "W", SmiExporter),
    t!("nvidia_smi_temperature_gpu", TemperatureC, 1.0, "C", SmiExporter),
    t!("nvidia_smi_clocks_current_sm_clock_hz", SmClockMhz, 1e-6, "Hz", SmiExporter),
    // W&B system metrics (`system.gpu.0.gpu` in wandb-events.jsonl, `system/gpu.0.gpu` in CSVs).
    t!("gpu.{}.gpu", UtilPct, 1.0, "%", Wandb),
    t!("gpu.{}.memory", MemUtilPct, 1.0, "%", Wandb),
    t!("gpu.{}.memoryallocated", MemUsedPctOfTotal, 1.0, "%", Wandb),
    t!("gpu.{}.memory_allocated", MemUsedPctOfTotal, 1.0, "%", Wandb),
    t!("gpu.{}.memoryallocatedbytes", MemUsedBytes, 1.0, "B", Wandb),
    t!("gpu.{}.temp", TemperatureC, 1.0, "C", Wandb),
    t!("gpu.{}.powerwatts", PowerW, 1.0, "W", Wandb),
    t!("gpu.{}.smclock", SmClockMhz, 1.0, "MHz", Wandb),
    t!("gpu.{}.powerpercent", Ignored, 1.0, "%", Wandb),
    t!("gpu.{}.memoryclock", Ignored, 1.0, "MHz", Wandb),
    t!("gpu.{}.enforcedpowerlimitwatts", Ignored, 1.0, "W", Wandb),
    t!("gpu.{}.correctedmemoryerrors", Ignored, 1.0, "", Wandb),
    t!("gpu.{}.uncorrectedmemoryerrors", Ignored, 1.0, "", Wandb),
    t!("gpu.{}.graphicsclock", Ignored, 1.0, "MHz", Wandb),
    t!("gpu.{}.pciegen", Ignored, 1.0, "", Wandb),
    t!("gpu.{}.pcielinkwidth", Ignored, 1.0, "", Wandb),
    t!("gpu.{}.powercapwatts", Ignored, 1.0, "W", Wandb),
    t!("_timestamp", Time, 1.0, "s", Wandb),
    t!("_runtime", RelativeS, 1.0, "s", Wandb),
    // MLflow system metrics (`system/gpu_0_utilization_percentage`).
    t!("gpu_{}_utilization_percentage", UtilPct, 1.0, "%", Mlflow),
    t!("gpu_{}_memory_usage_percentage", MemUsedPctOfTotal, 1.0, "%", Mlflow),
    t!("gpu_{}_memory_usage_megabytes", MemUsedBytes, 1e6, "MB", Mlflow),
    t!("gpu_{}_power_usage_watts", PowerW, 1.0, "W", Mlflow),
    t!("gpu_{}_power_usage_percentage", Ignored, 1.0, "%", Mlflow),
    t!("gpu_{}_temperature_celsius", TemperatureC, 1.0, "C", Mlflow),
    // rocm-smi --csv (older and newer column names).
    t!("device", Gpu, 1.0, "", RocmSmi),
    t!("gpu use (%)", UtilPct, 1.0, "%", RocmSmi),
    t!("gpu memory use (%)", MemUtilPct, 1.0, "%", RocmSmi),
    t!("gpu memory read/write activity (%)", MemUtilPct, 1.0, "%", RocmSmi),
    t!("gpu memory allocated (vram%)", MemUsedPctOfTotal, 1.0, "%", RocmSmi),
    t!("vram total used memory (b)", MemUsedBytes, 1.0, "B", RocmSmi),
    t!("vram total memory (b)", MemTotalBytes, 1.0, "B", RocmSmi),
    t!("temperature (sensor edge) (c)", TemperatureC, 1.0, "C", RocmSmi),
    t!("temperature (sensor junction) (c)", Ignored, 1.0, "C", RocmSmi),
    t!("temperature (sensor memory) (c)", Ignored, 1.0, "C", RocmSmi),
    t!("average graphics package power (w)", PowerW, 1.0, "W", RocmSmi),
    t!("current socket graphics package power (w)", PowerW, 1.0, "W", RocmSmi),
    t!("sclk clock speed:", Ignored, 1.0, "", RocmSmi),
    // amd-smi metric --csv.
    t!("gfx_activity", UtilPct, 1.0, "%", AmdSmi),
    t!("gfx_usage", UtilPct, 1.0, "%", AmdSmi),
    t!("umc_activity", MemUtilPct, 1.0, "%", AmdSmi),
    t!("mm_activity", Ignored, 1.0, "%", AmdSmi),
    t!("socket_power", PowerW, 1.0, "W", AmdSmi),
    t!("hotspot", TemperatureC, 1.0, "C", AmdSmi),
    t!("edge", Ignored, 1.0, "C", AmdSmi),
    // amd-smi labels these `MB` but divides by 1024²: MiB.
    t!("vram_used", MemUsedBytes, MIB, "MiB", AmdSmi),
    t!("vram_total", MemTotalBytes, MIB, "MiB", AmdSmi),
    t!("gfx_0_clk", SmClockMhz, 1.0, "MHz", AmdSmi),
    // Time, GPU and host columns of exports and scripts.
    t!("timestamp", Time, 1.0, "date/epoch", Common),
    t!("time", Time, 1.0, "date/epoch", Common),
    t!("date", Date, 1.0, "date", Common),
    t!("datetime", Time, 1.0, "date/epoch", Common),
    t!("gpu", Gpu, 1.0, "", Common),
    t!("gpu_id", Gpu, 1.0, "", Common),
    t!("gpu_index", Gpu, 1.0, "", Common),
    t!("entity", Gpu, 1.0, "", Common),
    t!("minor_number", Gpu, 1.0, "", Common),
    t!("hostname", Host, 1.0, "", Common),
    t!("host", Host, 1.0, "", Common),
    t!("instance", Host, 1.0, "", Common),
    t!("node", Host, 1.0, "", Common),
    t!("relative time (process)", RelativeS, 1.0, "s", Common),
    t!("relative time (wall)", RelativeS, 1.0, "s", Common),
];

/// A name found in the vocabulary.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Found {
    pub term: &'static Term,
    /// The GPU number the name carried (`system.gpu.3.gpu` → 3).
    pub gpu: Option<u32>,
    /// Multiply a value by this to get the metric's unit (the term's, or what a script name's
    /// unit suffix says: `mem_used_bytes` is in bytes).
    pub scale: f64,
    /// The unit the values are in (the term's, or the suffix's), "" for none.
    pub unit: &'static str,
}

/// Unit texts, in headers (`[MiB]`), values (`1024 MiB`) and the vocabulary, and the factor that
/// brings a value to its metric's unit: bytes, percent, seconds, MHz, bytes per second. The one
/// place a unit is decided: a unit written out is taken at its word (`MB` is 10⁶ bytes).
const UNITS: &[(&str, f64)] = &[
    ("%", 1.0),
    ("fraction", 100.0),
    ("B", 1.0),
    ("KiB", 1024.0),
    ("MiB", MIB),
    ("GiB", MIB * 1024.0),
    ("KB", 1e3),
    ("kB", 1e3),
    ("MB", 1e6),
    ("GB", 1e9),
    ("B/s", 1.0),
    ("MB/s", 1e6),
    ("W", 1.0),
    ("C", 1.0),
    ("°C", 1.0),
    ("MHz", 1.0),
    ("Hz", 1e-6),
    ("s", 1.0),
    ("ms", 1e-3),
    ("us", 1e-6),
];

/// The factor of a unit text ([`UNITS`]); `None` for a text that is no unit.
pub(crate) fn unit_scale(unit: &str) -> Option<f64> {
    UNITS.iter().find(|(u, _)| *u == unit).map(|(_, k)| *k)
}

/// The unit suffixes of a logging script's names (`gpu_util_percent`, `mem_used_mib`), longest
/// first where one ends another. `_mb` and `_gb` are MiB and GiB: the scripts that write them
/// divide by 1024² (gpuutiliz: `Used / (1024 * 1024)` as `dev_mem_used_mb`), and nvidia-smi,
/// NVML and PyTorch all count memory in MiB; read as 10⁶ the same column was 5% smaller on one
/// path than on the other.
const SUFFIXES: &[(&str, &str)] = &[
    ("_percent", "%"),
    ("_pct", "%"),
    ("_%", "%"),
    ("_celsius_degree", "C"),
    ("_celsius", "C"),
    ("_deg_c", "C"),
    ("_c", "C"),
    ("_watts", "W"),
    ("_w", "W"),
    ("_mib", "MiB"),
    ("_mb", "MiB"),
    ("_gib", "GiB"),
    ("_gb", "GiB"),
    ("_kib", "KiB"),
    ("_bytes", "B"),
    ("_mhz", "MHz"),
    ("_ms", "ms"),
    ("_us", "us"),
    ("_seconds", "s"),
    ("_secs", "s"),
    ("_sec", "s"),
    ("_s", "s"),
    ("_pc", "%"),
];

/// The bits of NVML's clock-event reasons, by the name nvidia-smi gives each one's column.
const THROTTLE_BITS: &[(&str, u64)] = {
    use crate::reading::throttle as t;
    &[
        ("gpu_idle", t::GPU_IDLE),
        (
            "applications_clocks_setting",
            t::APPLICATIONS_CLOCKS_SETTING,
        ),
        ("sw_power_cap", t::SW_POWER_CAP),
        ("hw_slowdown", t::HW_SLOWDOWN),
        ("hw_thermal_slowdown", t::HW_THERMAL),
        ("hw_power_brake_slowdown", t::HW_POWER_BRAKE),
        ("sw_thermal_slowdown", t::SW_THERMAL),
        ("sync_boost", t::SYNC_BOOST),
    ]
};

/// The bit a [`Metric::ThrottleReason`] column stands for (`clocks_event_reasons.sw_power_cap`).
pub(crate) fn throttle_bit(name: &str) -> Option<u64> {
    let n = normalize(name);
    let n = n.split('[').next().unwrap_or("").trim();
    let reason = n
        .strip_prefix("clocks_throttle_reasons.")
        .or_else(|| n.strip_prefix("clocks_event_reasons."))?;
    THROTTLE_BITS
        .iter()
        .find(|(r, _)| *r == reason)
        .map(|(_, b)| *b)
}

/// Lower case, runs of white space as one space, trimmed.
fn normalize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for w in name.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&w.to_lowercase());
    }
    out.trim_matches(|c| c == '"' || c == '\'').to_string()
}

/// `gpu.3.gpu` → (`gpu.{}.gpu`, 3); `gpu_3_utilization_percentage` → (`gpu_{}_…`, 3).
fn template(name: &str) -> Option<(String, u32)> {
    let at = name.find("gpu")?;
    let rest = &name[at + 3..];
    let sep = rest.chars().next().filter(|c| matches!(c, '.' | '_'))?;
    let digits: String = rest[1..].chars().take_while(char::is_ascii_digit).collect();
    if digits.is_empty() || digits.len() > 4 {
        return None;
    }
    let after = &rest[1 + digits.len()..];
    if !after.starts_with(sep) {
        return None;
    }
    Some((
        format!("{}gpu{sep}{{}}{after}", &name[..at]),
        digits.parse().ok()?,
    ))
}

fn exact(name: &str) -> Option<&'static Term> {
    TERMS
        .iter()
        .find(|t| t.name == name && t.family != Family::SmiDmon)
}

/// Looks a column of an `nvidia-smi dmon` or `pmon` header up: its own short names first, then
/// the others (`gpu`, `date`, `time`, `gtemp`).
pub(crate) fn lookup_dmon(raw: &str) -> Option<Found> {
    let n = normalize(raw);
    match TERMS
        .iter()
        .find(|t| t.name == n && t.family == Family::SmiDmon)
    {
        Some(term) => Some(Found {
            term,
            gpu: None,
            scale: term.scale,
            unit: term.unit,
        }),
        None => lookup(raw),
    }
}

/// Looks a column, key or series name up.
pub(crate) fn lookup(raw: &str) -> Option<Found> {
    let n = normalize(raw);
    let mut tries = vec![n.clone()];
    // `utilization.gpu [%]`: the unit goes.
    if let Some(i) = n.find(" [").or_else(|| n.find('[')) {
        tries.push(n[..i].trim().to_string());
    }
    for prefix in ["system/", "system."] {
        if let Some(r) = n.strip_prefix(prefix) {
            tries.push(r.to_string());
        }
    }
    for t in &tries {
        if let Some(term) = exact(t) {
            return Some(Found {
                term,
                gpu: None,
                scale: term.scale,
                unit: term.unit,
            });
        }
        if let Some((tpl, gpu)) = template(t) {
            if let Some(term) = exact(&tpl) {
                return Some(Found {
                    term,
                    gpu: Some(gpu),
                    scale: term.scale,
                    unit: term.unit,
                });
            }
        }
    }
    script_name(&n)
}

/// A script's column name in one spelling: lower case, every run of other characters than
/// letters, digits and `%` one `_`, none at either end (`Temperature (C)` → `temperature_c`).
pub(crate) fn snake(name: &str) -> String {
    let mut s = String::with_capacity(name.len());
    for c in name.trim().chars() {
        let c = if c.is_ascii_alphanumeric() || c == '%' {
            c.to_ascii_lowercase()
        } else {
            '_'
        };
        if !(c == '_' && s.ends_with('_')) {
            s.push(c);
        }
    }
    s.trim_matches('_').to_string()
}

/// A name from a logging script's own header (`gpu_util_percent`, `mem_used_mib`,
/// `vram_used_bytes`, `temperature_C`) that clearly means one metric, its unit from the suffix.
/// Names that could mean several things map to nothing.
fn script_name(n: &str) -> Option<Found> {
    let s = snake(n);
    let s = s.as_str();
    let mut unit = "";
    let mut base = s;
    for (suffix, u) in SUFFIXES {
        if let Some(b) = s.strip_suffix(suffix) {
            base = b;
            unit = u;
            break;
        }
    }
    let term = SCRIPT_TERMS
        .iter()
        .find(|t| t.name == base && (unit.is_empty() || unit_fits(t.metric, unit)))?;
    // The suffix's unit decides the scale where it names one.
    let (scale, unit) = match unit_scale(unit).filter(|_| !unit.is_empty() && unit != "%") {
        Some(k) => (k, unit),
        None => (term.scale, term.unit),
    };
    Some(Found {
        term,
        gpu: None,
        scale,
        unit,
    })
}

fn unit_fits(m: Metric, unit: &str) -> bool {
    match m {
        Metric::UtilPct | Metric::MemUtilPct | Metric::MemUsedPctOfTotal => unit == "%",
        Metric::MemUsedBytes | Metric::MemTotalBytes | Metric::MemFreeBytes => {
            matches!(unit, "MiB" | "GiB" | "KiB" | "MB" | "GB" | "B")
        }
        Metric::TemperatureC => unit == "C",
        Metric::PowerW | Metric::PowerLimitW => unit == "W",
        Metric::SmClockMhz => unit == "MHz",
        Metric::Time | Metric::RelativeS => matches!(unit, "s" | "ms" | "us"),
        _ => false,
    }
}

/// Script names (no unit suffix: memory in MiB as nvidia-smi writes it).
#[rustfmt::skip]
const SCRIPT_TERMS: &[Term] = &[
    t!("timestamp", Time, 1.0, "", Common), t!("time", Time, 1.0, "", Common),
    t!("ts", Time, 1.0, "", Common), t!("epoch", Time, 1.0, "", Common),
    t!("unix_time", Time, 1.0, "", Common), t!("elapsed", RelativeS, 1.0, "s", Common),
    t!("gpu_index", Gpu, 1.0, "", Common), t!("gpu_idx", Gpu, 1.0, "", Common),
    t!("device_index", Gpu, 1.0, "", Common), t!("device_id", Gpu, 1.0, "", Common),
    t!("gpu_uuid", Uuid, 1.0, "", Common), t!("gpu_name", Name, 1.0, "", Common),
    t!("utilization_gpu", UtilPct, 1.0, "%", Common), t!("gpu_utilization", UtilPct, 1.0, "%", Common),
    t!("gpu_util", UtilPct, 1.0, "%", Common), t!("util", UtilPct, 1.0, "%", Common),
    t!("gpu_use", UtilPct, 1.0, "%", Common), t!("gpu_usage", UtilPct, 1.0, "%", Common),
    t!("gpu_busy", UtilPct, 1.0, "%", Common), t!("utilization", UtilPct, 1.0, "%", Common),
    t!("utilization_memory", MemUtilPct, 1.0, "%", Common), t!("mem_util", MemUtilPct, 1.0, "%", Common),
    t!("memory_utilization", MemUtilPct, 1.0, "%", Common),
    t!("memory_used", MemUsedBytes, MIB, "MiB", Common), t!("mem_used", MemUsedBytes, MIB, "MiB", Common),
    t!("vram_used", MemUsedBytes, MIB, "MiB", Common), t!("gpu_memory_used", MemUsedBytes, MIB, "MiB", Common),
    t!("fb_used", MemUsedBytes, MIB, "MiB", Common),
    t!("memory_total", MemTotalBytes, MIB, "MiB", Common), t!("mem_total", MemTotalBytes, MIB, "MiB", Common),
    t!("vram_total", MemTotalBytes, MIB, "MiB", Common),
    t!("memory_free", MemFreeBytes, MIB, "MiB", Common), t!("mem_free", MemFreeBytes, MIB, "MiB", Common),
    t!("temperature", TemperatureC, 1.0, "C", Common), t!("temp", TemperatureC, 1.0, "C", Common),
    t!("gpu_temp", TemperatureC, 1.0, "C", Common), t!("power_draw", PowerW, 1.0, "W", Common),
    t!("power_usage", PowerW, 1.0, "W", Common), t!("gpu_power", PowerW, 1.0, "W", Common),
    t!("sm_clock", SmClockMhz, 1.0, "MHz", Common), t!("clocks_sm", SmClockMhz, 1.0, "MHz", Common),
    t!("power", PowerW, 1.0, "W", Common), t!("gpu_id", Gpu, 1.0, "", Common),
    t!("gpuid", Gpu, 1.0, "", Common), t!("timestampus", Time, 1e-6, "us", Common), t!("modelname", Name, 1.0, "", Common),
    t!("date_time", Time, 1.0, "", Common), t!("unixtime", Time, 1.0, "", Common),
    t!("time_unix", Time, 1.0, "", Common), t!("idx", Gpu, 1.0, "", Common),
    t!("gpu_num", Gpu, 1.0, "", Common), t!("bus_id", BusId, 1.0, "", Common),
    t!("pci_bus_id", BusId, 1.0, "", Common), t!("model", Name, 1.0, "", Common),
    t!("util_gpu", UtilPct, 1.0, "%", Common), t!("sm_util", UtilPct, 1.0, "%", Common),
    t!("util_mem", MemUtilPct, 1.0, "%", Common), t!("mem_utilization", MemUtilPct, 1.0, "%", Common),
    t!("used_memory", MemUsedBytes, MIB, "MiB", Common), t!("gpu_mem_used", MemUsedBytes, MIB, "MiB", Common),
    t!("memory_usage", MemUsedBytes, MIB, "MiB", Common), t!("mem_usage", MemUsedBytes, MIB, "MiB", Common),
    t!("total_memory", MemTotalBytes, MIB, "MiB", Common), t!("fb_total", MemTotalBytes, MIB, "MiB", Common),
    t!("gpu_memory_total", MemTotalBytes, MIB, "MiB", Common),
    t!("free_memory", MemFreeBytes, MIB, "MiB", Common), t!("fb_free", MemFreeBytes, MIB, "MiB", Common),
    t!("temperature_gpu", TemperatureC, 1.0, "C", Common), t!("gpu_temperature", TemperatureC, 1.0, "C", Common),
    t!("power_limit", PowerLimitW, 1.0, "W", Common),
    t!("clock_sm", SmClockMhz, 1.0, "MHz", Common), t!("sm_clocks", SmClockMhz, 1.0, "MHz", Common),
    // Intel's xpu-smi dump (`Timestamp, DeviceId, GPU Utilization (%), GPU Frequency (MHz)`).
    t!("deviceid", Gpu, 1.0, "", Common), t!("gpu_frequency", SmClockMhz, 1.0, "MHz", Common),
    t!("gpu_core_temperature", TemperatureC, 1.0, "C", Common),
    // A monitoring script's `GPU Load: 45%` and `GPU Memory: 812MB / 6144MB` (GPUtil's names).
    t!("gpu_load", UtilPct, 1.0, "%", Common), t!("gpu_memory", MemUsedBytes, MIB, "MiB", Common),
    // DCGM profiling fields under a script's own names (fractions, as DCGM gives them).
    t!("sm_active", SmActivePct, 100.0, "fraction", DcgmField),
    t!("gr_active", GrActivePct, 100.0, "fraction", DcgmField),
    t!("graphics_active", GrActivePct, 100.0, "fraction", DcgmField),
    t!("sm_occupancy", SmOccupancyPct, 100.0, "fraction", DcgmField),
    t!("tensor_active", TensorActivePct, 100.0, "fraction", DcgmField),
    t!("dram_active", DramActivePct, 100.0, "fraction", DcgmField),
    // gpuutiliz (NVML, one row per device uuid).
    t!("dev_uuid", Uuid, 1.0, "", Common), t!("dev_util", UtilPct, 1.0, "%", Common),
    t!("dev_mem_used", MemUsedBytes, MIB, "MiB", Common), t!("dev_mem_io", MemUtilPct, 1.0, "%", Common),
    t!("dev_temp", TemperatureC, 1.0, "C", Common), t!("dev_power", PowerW, 1.0, "W", Common),
];
/// The busy measure a set of metrics is judged by: the best one present.
pub(crate) fn best_busy(present: impl Fn(Metric) -> bool) -> Option<Metric> {
    Metric::BUSY.into_iter().find(|&m| present(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(name: &str) -> Option<(Metric, Option<u32>, f64)> {
        lookup(name).map(|f| (f.term.metric, f.gpu, f.scale))
    }

    #[test]
    fn names_of_every_family() {
        assert_eq!(m("utilization.gpu [%]"), Some((Metric::UtilPct, None, 1.0)));
        assert_eq!(m("SMACT"), Some((Metric::SmActivePct, None, 100.0)));
        assert_eq!(
            m("DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
            Some((Metric::GrActivePct, None, 100.0))
        );
        assert_eq!(m("system.gpu.3.gpu"), Some((Metric::UtilPct, Some(3), 1.0)));
        assert_eq!(
            m("system/gpu.12.memoryAllocated"),
            Some((Metric::MemUsedPctOfTotal, Some(12), 1.0))
        );
        assert_eq!(
            m("system/gpu_1_utilization_percentage"),
            Some((Metric::UtilPct, Some(1), 1.0))
        );
        assert_eq!(
            m("gpu_0_memory_usage_megabytes"),
            Some((Metric::MemUsedBytes, Some(0), 1e6))
        );
        assert_eq!(m("GPU use (%)"), Some((Metric::UtilPct, None, 1.0)));
        assert_eq!(m("EntityId"), Some((Metric::Gpu, None, 1.0)));
        assert_eq!(m("TimeStamp"), Some((Metric::Time, None, 1.0)));
        assert_eq!(m("system.gpu.process.0.gpu"), None);
        assert_eq!(m("system.cpu"), None);
        assert_eq!(m("gpu_use_percent"), Some((Metric::UtilPct, None, 1.0)));
        assert_eq!(
            m("vram_used_bytes"),
            Some((Metric::MemUsedBytes, None, 1.0))
        );
        assert_eq!(m("mem_used_mib"), Some((Metric::MemUsedBytes, None, MIB)));
        assert_eq!(m("gpu_util_watts"), None, "a unit that does not fit");
        assert_eq!(m("loss"), None);
    }

    #[test]
    fn every_term_is_lower_case_and_found_by_its_own_name() {
        for t in TERMS {
            assert_eq!(t.name, t.name.to_lowercase(), "{}", t.name);
            let probe = t.name.replace("{}", "7");
            let f = if t.family == Family::SmiDmon {
                lookup_dmon(&probe)
            } else {
                lookup(&probe)
            };
            let f = f.unwrap_or_else(|| panic!("{probe}"));
            assert_eq!(f.term.name, t.name, "{probe} found as another term");
            assert_eq!(f.gpu, t.name.contains("{}").then_some(7), "{probe}");
        }
    }

    /// A unit is decided once: every term whose unit is a unit text converts by that unit's
    /// factor, whatever reader meets it.
    #[test]
    fn every_term_converts_by_its_units_factor() {
        for t in TERMS.iter().chain(SCRIPT_TERMS) {
            if t.metric == Metric::Ignored {
                continue;
            }
            if let Some(k) = unit_scale(t.unit) {
                assert_eq!(t.scale, k, "{} in {}", t.name, t.unit);
            }
        }
        // A script's `_mb` is MiB, its `_ms` milliseconds; a unit written out is taken at its word.
        assert_eq!(lookup("mem_used_mb").map(|f| f.scale), Some(MIB));
        assert_eq!(
            lookup("gpu_memory_used_gb").map(|f| f.scale),
            Some(MIB * 1024.0)
        );
        assert_eq!(lookup("timestamp_ms").map(|f| f.scale), Some(1e-3));
        assert_eq!(unit_scale("MB"), Some(1e6));
    }

    #[test]
    fn dmon_names_only_in_a_dmon_header() {
        assert_eq!(
            lookup_dmon("rxpci").map(|f| (f.term.metric, f.scale)),
            Some((Metric::PcieRxBytesPerS, 1e6))
        );
        assert_eq!(
            lookup_dmon("sm").map(|f| f.term.metric),
            Some(Metric::UtilPct)
        );
        assert_eq!(
            lookup_dmon("gtemp").map(|f| f.term.metric),
            Some(Metric::TemperatureC)
        );
        assert_eq!(lookup("sm"), None);
        assert_eq!(lookup("mem"), None);
    }

    #[test]
    fn best_busy_prefers_sm_active() {
        assert_eq!(
            best_busy(|m| matches!(m, Metric::UtilPct | Metric::SmActivePct)),
            Some(Metric::SmActivePct)
        );
        assert_eq!(best_busy(|m| m == Metric::UtilPct), Some(Metric::UtilPct));
        assert_eq!(best_busy(|_| false), None);
    }
}

#[cfg(test)]
mod doc_tests {
    use super::TERMS;

    #[test]
    fn every_name_is_in_the_docs() {
        let docs = include_str!("../../../docs/diagnose.md");
        for t in TERMS {
            let shown = format!("`{}`", t.name.replace("{}", "N"));
            assert!(docs.contains(&shown), "docs/diagnose.md lacks {shown}");
        }
    }
}
