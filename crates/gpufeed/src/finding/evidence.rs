//! A finding's evidence, typed where a rule makes it: one [`Item`] per figure, each of which
//! knows its wire name (the key in the JSON), the label people read and its unit, declared once
//! in the table below. The JSON is `{"evidence": {name: value, ...}}`, names in string order,
//! each number as the rule gave it (a float stays a float, a count an integer).
//!
//! A new evidence figure is one line of the table (`Variant(type) = "wire_name", "label",
//! Unit;`) and the rule that writes it with `Finding::with(Item::Variant(x))`.

use serde::de::Error as _;
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;

/// How an evidence figure reads: what its number is in, and so how a report writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// A share from 0 to 1, shown as a percentage.
    Fraction,
    /// A percentage.
    Pct,
    /// A percentage of one CPU core (`99% of a core`).
    PctOfCore,
    /// Gigabytes (decimal) per second.
    GbPerS,
    /// Bytes per second.
    BytesPerS,
    /// Seconds.
    Seconds,
    /// Degrees Celsius.
    Celsius,
    /// Watts.
    Watts,
    /// How many times larger (`4x`).
    Factor,
    /// A count, a name or a number without a unit: written as it is.
    Plain,
}

impl Unit {
    /// What follows the value in a sentence.
    pub fn tail(self) -> &'static str {
        match self {
            Unit::PctOfCore => " of a core",
            Unit::Factor => "x",
            _ => "",
        }
    }
}

/// A value an evidence item can hold.
trait Payload {
    /// The JSON value, as the report has always written it.
    fn json(&self) -> serde_json::Value;
    /// The value as a number, where it is one (a float that is not finite is not: it is
    /// written as `null`).
    fn number(&self) -> Option<f64> {
        self.json().as_f64()
    }
}

impl Payload for f64 {
    fn json(&self) -> serde_json::Value {
        serde_json::Value::from(*self)
    }
}
impl Payload for u64 {
    fn json(&self) -> serde_json::Value {
        serde_json::Value::from(*self)
    }
}
impl Payload for u32 {
    fn json(&self) -> serde_json::Value {
        serde_json::Value::from(*self)
    }
}
impl Payload for usize {
    fn json(&self) -> serde_json::Value {
        serde_json::Value::from(*self)
    }
}
impl Payload for bool {
    fn json(&self) -> serde_json::Value {
        serde_json::Value::from(*self)
    }
}
impl Payload for String {
    fn json(&self) -> serde_json::Value {
        serde_json::Value::from(self.as_str())
    }
}
impl Payload for Vec<u32> {
    fn json(&self) -> serde_json::Value {
        serde_json::Value::from(self.clone())
    }
}
impl Payload for Vec<u64> {
    fn json(&self) -> serde_json::Value {
        serde_json::Value::from(self.clone())
    }
}
impl Payload for BTreeMap<String, f64> {
    fn json(&self) -> serde_json::Value {
        serde_json::Value::Object(
            self.iter()
                .map(|(k, v)| (k.clone(), serde_json::Value::from(*v)))
                .collect(),
        )
    }
}

/// Declares every evidence item: its variant and payload, wire name, label and unit.
macro_rules! evidence_items {
    ($( $var:ident($ty:ty) = $key:literal, $label:literal, $unit:ident; )*) => {
        /// One piece of a finding's evidence, typed.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Item {
            $( $var($ty), )*
        }

        /// Which evidence item, without its value (what presenters list as deciding figures).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum ItemKey {
            $( $var, )*
        }

        impl ItemKey {
            /// Every key, in the order of the table.
            pub const ALL: &'static [ItemKey] = &[$( ItemKey::$var, )*];

            /// The wire name: the item's key in the JSON.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( ItemKey::$var => $key, )*
                }
            }

            /// The name people read.
            pub fn label(self) -> &'static str {
                match self {
                    $( ItemKey::$var => $label, )*
                }
            }

            pub fn unit(self) -> Unit {
                match self {
                    $( ItemKey::$var => Unit::$unit, )*
                }
            }
        }

        impl Item {
            pub fn key(&self) -> ItemKey {
                match self {
                    $( Item::$var(_) => ItemKey::$var, )*
                }
            }

            fn payload(&self) -> &dyn Payload {
                match self {
                    $( Item::$var(v) => v, )*
                }
            }

            /// The item a JSON entry spells (the first variant of that name whose type reads
            /// the value), or `None`.
            fn from_json(key: &str, v: &serde_json::Value) -> Option<Item> {
                $(
                    if key == $key {
                        if let Ok(x) = <$ty>::deserialize(v) {
                            return Some(Item::$var(x));
                        }
                    }
                )*
                None
            }
        }
    };
}

evidence_items! {
    Kind(String) = "kind", "kind", Plain;
    Source(String) = "source", "source", Plain;
    GpuBusyFraction(f64) = "gpu_busy_fraction", "GPU busy", Fraction;
    UtilPeriodS(f64) = "util_period_s", "utilization repeats every", Seconds;
    UtilPeriodStrength(f64) = "util_period_strength", "repeat strength", Plain;
    UtilHighLevelPct(f64) = "util_high_level_pct", "busy level", Pct;
    UtilLowLevelPct(f64) = "util_low_level_pct", "starved level", Pct;
    UtilLowTimeFraction(f64) = "util_low_time_fraction", "time starved", Fraction;
    KindBasis(String) = "kind_basis", "kind basis", Plain;
    CoresPerGpu(f64) = "cores_per_gpu", "cores per gpu", Plain;
    IdleCoresMean(f64) = "idle_cores_mean", "idle cores", Plain;
    Workers(u32) = "workers", "workers", Plain;
    SaturatedWorkers(u32) = "saturated_workers", "saturated workers", Plain;
    WorkerCpuMeanPct(f64) = "worker_cpu_mean_pct", "worker CPU", PctOfCore;
    MainCpuMeanPct(f64) = "main_cpu_mean_pct", "main process CPU", PctOfCore;
    OtherProcessesCores(f64) = "other_processes_cores", "other processes cores", Plain;
    JobCores(f64) = "job_cores", "job cores", Plain;
    RecommendedNumWorkers(u32) = "recommended_num_workers", "recommended num workers", Plain;
    WorkersPerGpu(u32) = "workers_per_gpu", "workers per gpu", Plain;
    MaxUsefulWorkers(u32) = "max_useful_workers", "max useful workers", Plain;
    HostCpuMeanPct(f64) = "host_cpu_mean_pct", "host CPU busy", Pct;
    BusyCoresMean(f64) = "busy_cores_mean", "busy cores", Plain;
    CpuCount(u32) = "cpu_count", "cpu count", Plain;
    PsiCpuSomeMeanPct(f64) = "psi_cpu_some_mean_pct", "CPU pressure", Pct;
    DStateTimeFraction(f64) = "d_state_time_fraction", "time with a reader in D state", Fraction;
    PsiIoSomeMeanPct(f64) = "psi_io_some_mean_pct", "I/O pressure", Pct;
    PsiIoFullMeanPct(f64) = "psi_io_full_mean_pct", "I/O pressure (full)", Pct;
    IowaitMeanPct(f64) = "iowait_mean_pct", "iowait", Pct;
    DiskReadMeanBytesPerS(f64) = "disk_read_mean_bytes_per_s", "disk reads", BytesPerS;
    JobReadMeanBytesPerS(f64) = "job_read_mean_bytes_per_s", "job reads", BytesPerS;
    MainSaturatedFraction(f64) = "main_saturated_fraction", "main saturated", Fraction;
    MainPid(u32) = "main_pid", "main pid", Plain;
    GpuIndex(u32) = "gpu_index", "gpu index", Plain;
    RxNearCapacityTimeFraction(f64) = "rx_near_capacity_time_fraction", "time near capacity", Fraction;
    RxCapacityP90Fraction(f64) = "rx_capacity_p90_fraction", "p90 of capacity", Fraction;
    RxMeanGbPerS(f64) = "rx_mean_gb_per_s", "host-to-device", GbPerS;
    LinkCapacityGbPerS(f64) = "link_capacity_gb_per_s", "link capacity", GbPerS;
    LinkCapacityMaxGbPerS(f64) = "link_capacity_max_gb_per_s", "full link capacity", GbPerS;
    PcieGen(u32) = "pcie_gen", "pcie gen", Plain;
    PcieWidth(u32) = "pcie_width", "pcie width", Plain;
    PcieGenMax(u32) = "pcie_gen_max", "pcie gen max", Plain;
    PcieWidthMax(u32) = "pcie_width_max", "pcie width max", Plain;
    DegradedLoadedFraction(f64) = "degraded_loaded_fraction", "time degraded under load", Fraction;
    CapacityLostFraction(f64) = "capacity_lost_fraction", "capacity lost", Fraction;
    DataWaitPct(f64) = "data_wait_pct", "data wait", Pct;
    DataWaitSource(String) = "data_wait_source", "data wait source", Plain;
    StacksDataWaitPct(f64) = "stacks_data_wait_pct", "stacks data wait", Pct;
    TrainingThreadSamples(u64) = "training_thread_samples", "training thread samples", Plain;
    HotStage(String) = "hot_stage", "slowest stage", Plain;
    HotStageAt(String) = "hot_stage_at", "hot stage at", Plain;
    HotStagePct(f64) = "hot_stage_pct", "its share of loading", Pct;
    HotStageKind(String) = "hot_stage_kind", "hot stage kind", Plain;
    // Given where the slowest stage is named as the native code it calls.
    HotStageNativePct(f64) = "hot_stage_native_pct", "its time in native code", Pct;
    WorkersStarted(u32) = "workers_started", "workers started", Plain;
    WorkerGenerations(u32) = "worker_generations", "worker generations", Plain;
    WorkerStartStopPct(f64) = "worker_start_stop_pct", "worker start stop", Pct;
    WorkerStartStopS(f64) = "worker_start_stop_s", "worker start stop", Seconds;
    WorkerBusyPct(f64) = "worker_busy_pct", "workers busy", Pct;
    LoadingInMainPct(f64) = "loading_in_main_pct", "loading in the training process", Pct;
    LoadingBlockedOrReadingPct(f64) = "loading_blocked_or_reading_pct", "loading blocked or reading", Pct;
    Agreement(String) = "agreement", "agreement", Plain;
    WorkersCapCores(u32) = "workers_cap_cores", "workers cap cores", Plain;
    PersistentWorkersSavesS(f64) = "persistent_workers_saves_s", "persistent workers saves", Seconds;
    HostPct(f64) = "host_pct", "loop time on the host", Pct;
    HostCall(String) = "host_call", "the loop calls", Plain;
    HostCallAt(String) = "host_call_at", "called at", Plain;
    HostCallPct(f64) = "host_call_pct", "its share of the loop", Pct;
    HostCallS(f64) = "host_call_s", "its time", Seconds;
    CheckpointSaves(u64) = "checkpoint_saves", "saves seen", Plain;
    CheckpointSPerSave(f64) = "checkpoint_s_per_save", "per save", Seconds;
    SyncPct(f64) = "sync_pct", "sync", Pct;
    SyncAt(String) = "sync_at", "sync at", Plain;
    SyncSitePct(f64) = "sync_site_pct", "at that line", Pct;
    StragglerPid(u32) = "straggler_pid", "straggler pid", Plain;
    OthersDataWaitPct(f64) = "others_data_wait_pct", "others data wait", Pct;
    StragglerRank(u32) = "straggler_rank", "straggler rank", Plain;
    SlowestStage(String) = "slowest_stage", "slowest stage", Plain;
    UtilMaxPct(f64) = "util_max_pct", "busiest GPU", Pct;
    UtilMinPct(f64) = "util_min_pct", "idlest GPU", Pct;
    BusiestGpu(u32) = "busiest_gpu", "busiest gpu", Plain;
    IdlestGpu(u32) = "idlest_gpu", "idlest gpu", Plain;
    SpreadPct(f64) = "spread_pct", "spread", Pct;
    DurationS(f64) = "duration_s", "for", Seconds;
    MemUsedMaxFraction(f64) = "mem_used_max_fraction", "memory used at peak", Fraction;
    BatchScaleHeadroom(f64) = "batch_scale_headroom", "batch could grow", Factor;
    MemTotalAssumed(bool) = "mem_total_assumed", "mem total assumed", Plain;
    CandidateConfidence(f64) = "candidate_confidence", "candidate confidence", Plain;
    Gpus(Vec<u32>) = "gpus", "gpus", Plain;
    SmActivePct(f64) = "sm_active_pct", "sm active", Pct;
    EngineActivePct(f64) = "engine_active_pct", "engine active", Pct;
    GpusUsed(usize) = "gpus_used", "GPUs used", Plain;
    GpusTotal(usize) = "gpus_total", "GPUs", Plain;
    UnusedGpus(Vec<u32>) = "unused_gpus", "unused gpus", Plain;
    UtilP50Pct(f64) = "util_p50_pct", "util p50", Pct;
    ComputeCapabilityMajor(u32) = "compute_capability_major", "compute capability", Plain;
    ThrottledTimeFraction(f64) = "throttled_time_fraction", "throttled time", Fraction;
    ObservedS(f64) = "observed_s", "observed", Seconds;
    SwPowerCapTimeFraction(f64) = "sw_power_cap_time_fraction", "sw power cap time", Fraction;
    HwSlowdownTimeFraction(f64) = "hw_slowdown_time_fraction", "hw slowdown time", Fraction;
    SwThermalTimeFraction(f64) = "sw_thermal_time_fraction", "sw thermal time", Fraction;
    HwThermalTimeFraction(f64) = "hw_thermal_time_fraction", "hw thermal time", Fraction;
    HwPowerBrakeTimeFraction(f64) = "hw_power_brake_time_fraction", "hw power brake time", Fraction;
    TemperatureMeanC(f64) = "temperature_mean_c", "temperature", Celsius;
    PowerMeanW(f64) = "power_mean_w", "power", Watts;
    TraceStragglerRank(String) = "straggler_rank", "straggler rank", Plain;
    StragglerRanks(Vec<u64>) = "straggler_ranks", "straggler ranks", Plain;
    StepUs(f64) = "step_us", "step us", Plain;
    MedianStepUs(f64) = "median_step_us", "median step us", Plain;
    Rank(u64) = "rank", "rank", Plain;
    Ranks(Vec<u64>) = "ranks", "ranks", Plain;
    Trace(String) = "trace", "trace", Plain;
    DataloaderPct(f64) = "dataloader_pct", "dataloader", Pct;
    DataloaderUsPerStep(f64) = "dataloader_us_per_step", "dataloader us per step", Plain;
    TbPluginDataloaderPct(f64) = "tb_plugin_dataloader_pct", "tb plugin dataloader", Pct;
    StepSource(String) = "step_source", "step source", Plain;
    DataloaderIterator(String) = "dataloader_iterator", "dataloader iterator", Plain;
    NumWorkers(u64) = "num_workers", "num workers", Plain;
    Copies(u64) = "copies", "copies", Plain;
    Bytes(f64) = "bytes", "bytes", Plain;
    CopyUs(f64) = "copy_us", "copy us", Plain;
    CopyUsPerStep(f64) = "copy_us_per_step", "copy us per step", Plain;
    CopyPctOfStep(f64) = "copy_pct_of_step", "copy pct of step", Plain;
    BandwidthGbps(f64) = "bandwidth_gbps", "bandwidth gbps", Plain;
    TcEligiblePct(f64) = "tc_eligible_pct", "tc eligible", Pct;
    TensorCorePct(f64) = "tensor_core_pct", "tensor core", Pct;
    Gpu(String) = "gpu", "gpu", Plain;
    SyncCalls(u64) = "sync_calls", "sync calls", Plain;
    SyncUs(f64) = "sync_us", "sync us", Plain;
    SyncUsPerStep(f64) = "sync_us_per_step", "sync us per step", Plain;
    TopCall(String) = "top_call", "top call", Plain;
    ShortKernelPct(f64) = "short_kernel_pct", "short kernel", Pct;
    MedianKernelUs(f64) = "median_kernel_us", "median kernel us", Plain;
    HostWaitPct(f64) = "host_wait_pct", "host wait", Pct;
    LaunchCalls(u64) = "launch_calls", "launch calls", Plain;
    Stretches(u64) = "stretches", "stretches", Plain;
    LongestStretchUs(f64) = "longest_stretch_us", "longest stretch us", Plain;
    LaunchIdlePctOfStep(f64) = "launch_idle_pct_of_step", "launch idle pct of step", Plain;
    CommunicationPct(f64) = "communication_pct", "communication", Pct;
    CommunicationUsPerStep(f64) = "communication_us_per_step", "communication us per step", Plain;
    TbPluginCommunicationPct(f64) = "tb_plugin_communication_pct", "tb plugin communication", Pct;
    ExposedNcclPct(f64) = "exposed_nccl_pct", "exposed nccl", Pct;
    CommOverlapPct(f64) = "comm_overlap_pct", "comm overlap", Pct;
    GpuBusyPct(f64) = "gpu_busy_pct", "gpu busy", Pct;
    StepUsByRank(BTreeMap<String,f64>) = "step_us_by_rank", "step us by rank", Plain;
}

impl Item {
    /// The wire name.
    pub fn name(&self) -> &'static str {
        self.key().as_str()
    }

    pub fn label(&self) -> &'static str {
        self.key().label()
    }

    pub fn unit(&self) -> Unit {
        self.key().unit()
    }

    /// The value as a number (counts too), where it is one.
    pub fn number(&self) -> Option<f64> {
        self.payload().number()
    }

    /// The value as JSON, exactly as the report writes it.
    pub fn json(&self) -> serde_json::Value {
        self.payload().json()
    }
}

/// A finding's evidence: at most one item per wire name, in the order of the names (the JSON's
/// order).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Items(Vec<Item>);

impl Items {
    /// Adds an item, replacing one of the same wire name.
    pub fn insert(&mut self, item: Item) {
        match self.0.binary_search_by(|i| i.name().cmp(item.name())) {
            Ok(at) => self.0[at] = item,
            Err(at) => self.0.insert(at, item),
        }
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Item> {
        self.0.iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn get(&self, key: ItemKey) -> Option<&Item> {
        self.0.iter().find(|i| i.key() == key)
    }

    pub fn contains(&self, key: ItemKey) -> bool {
        self.get(key).is_some()
    }

    /// The evidence as the JSON object the report writes (for scripts and tests that read it
    /// by name).
    pub fn to_json(&self) -> serde_json::Map<String, serde_json::Value> {
        self.0
            .iter()
            .map(|i| (i.name().to_string(), i.json()))
            .collect()
    }
}

impl<'a> IntoIterator for &'a Items {
    type Item = &'a Item;
    type IntoIter = std::slice::Iter<'a, Item>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl Serialize for Items {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for i in &self.0 {
            m.serialize_entry(i.name(), &i.json())?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Items {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = serde_json::Map::<String, serde_json::Value>::deserialize(d)?;
        let mut items = Items::default();
        for (k, v) in &raw {
            let item = Item::from_json(k, v)
                .ok_or_else(|| D::Error::custom(format!("unknown evidence `{k}`: {v}")))?;
            items.insert(item);
        }
        Ok(items)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_are_snake_case_and_read_back() {
        for k in ItemKey::ALL {
            let name = k.as_str();
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{name}"
            );
            assert!(!k.label().is_empty(), "{name}");
        }
        let mut items = Items::default();
        items.insert(Item::Workers(3));
        items.insert(Item::GpuBusyFraction(0.333));
        items.insert(Item::Kind("io_bound".into()));
        items.insert(Item::Workers(4));
        items.insert(Item::StepUsByRank(BTreeMap::from([("1".to_string(), 2.0)])));
        let json = serde_json::to_string(&items).unwrap();
        assert_eq!(
            json,
            r#"{"gpu_busy_fraction":0.333,"kind":"io_bound","step_us_by_rank":{"1":2.0},"workers":4}"#
        );
        let back: Items = serde_json::from_str(&json).unwrap();
        assert_eq!(back, items);
        // One wire name, two types: the JSON value picks the variant.
        let rank: Items = serde_json::from_str(r#"{"straggler_rank":"3"}"#).unwrap();
        assert_eq!(
            rank.get(ItemKey::TraceStragglerRank),
            Some(&Item::TraceStragglerRank("3".into()))
        );
        let rank: Items = serde_json::from_str(r#"{"straggler_rank":3}"#).unwrap();
        assert_eq!(
            rank.get(ItemKey::StragglerRank),
            Some(&Item::StragglerRank(3))
        );
        assert!(serde_json::from_str::<Items>(r#"{"no_such_figure":1}"#).is_err());
    }

    #[test]
    fn a_float_that_is_not_finite_is_null_and_no_number() {
        let i = Item::DataWaitPct(f64::NAN);
        assert_eq!(i.json(), serde_json::Value::Null);
        assert_eq!(i.number(), None);
        assert_eq!(Item::Workers(2).number(), Some(2.0));
    }
}
