//! Prometheus series → samples: saved text scrapes (`DCGM_FI_DEV_GPU_UTIL{gpu="0",…} 87
//! [ms]`, one scrape after another), HTTP API query results (`/api/v1/query_range` and
//! `/api/v1/query` JSON), and the series names Grafana writes in its CSV exports.
//!
//! A series' GPU comes from its labels (`gpu`, `GPU_I_ID` for a MIG instance, `minor_number`,
//! else `uuid`/`UUID`, else `device`), its machine from `Hostname` (dcgm-exporter), else
//! `instance`, else `node`.

use super::dcgmi::ProfilingMeans;
use super::table::{Table, When};
use super::vocab::{self, Metric};
use super::{LogError, LogInfo};
use crate::reading::{LogHeader, Reading};
use serde_json::value::RawValue;
use std::collections::BTreeMap;
use std::io::Read;

/// A series name and its labels: `name{a="x",b="y"}` (quotes may be doubled, as in CSVs).
pub(crate) fn parse_series(s: &str) -> (String, Vec<(String, String)>) {
    let s = s.trim();
    let Some(open) = s.find('{') else {
        return (s.to_string(), Vec::new());
    };
    let name = s[..open].trim().to_string();
    let body = s[open + 1..].trim_end().trim_end_matches('}');
    let mut labels = Vec::new();
    let mut rest = body;
    while let Some(eq) = rest.find('=') {
        let key = rest[..eq].trim().trim_start_matches(',').trim().to_string();
        let after = rest[eq + 1..].trim_start();
        let after = after.trim_start_matches('"');
        // The value runs to the next quote (a doubled quote in a CSV counts as one).
        let end = after.find('"').unwrap_or(after.len());
        labels.push((key, after[..end].to_string()));
        rest = after[end..].trim_start_matches('"');
    }
    (name, labels)
}

/// The machine and GPU a series' labels name, and the GPU's model name and uuid.
pub(crate) struct SeriesGpu<'a> {
    pub host: Option<&'a str>,
    pub id: String,
    pub name: Option<&'a str>,
    pub uuid: Option<&'a str>,
}

pub(crate) fn series_gpu(labels: &[(String, String)]) -> SeriesGpu<'_> {
    let get = |keys: &[&str]| {
        keys.iter()
            .find_map(|k| labels.iter().find(|(l, _)| l == k).map(|(_, v)| v.as_str()))
    };
    let uuid = get(&["UUID", "uuid", "gpu_uuid"]);
    let mut id = get(&["gpu", "minor_number", "gpu_id", "GPU", "index"])
        .map(str::to_string)
        .or_else(|| uuid.map(str::to_string))
        .or_else(|| get(&["device"]).map(str::to_string))
        .unwrap_or_else(|| "0".to_string());
    if let Some(mig) = get(&["GPU_I_ID"]).filter(|v| !v.is_empty()) {
        id = format!("{id} GPU-I {mig}");
    }
    SeriesGpu {
        host: get(&[
            "Hostname",
            "hostname",
            "instance",
            "node",
            "kubernetes_node",
        ]),
        id,
        name: get(&["modelName", "name", "model_name"]),
        uuid,
    }
}

/// The host, GPU id, model name and uuid a row gives beside a series name without labels.
pub(crate) type RowGpu<'a> = (Option<&'a str>, &'a str, Option<&'a str>, Option<&'a str>);

/// Puts one value of a named series into `t` (unknown names noted). A series without labels
/// takes its GPU from `row` (an export with the labels in columns of their own).
pub(crate) fn put_series(
    t: &mut Table,
    series: &str,
    when: Option<f64>,
    value: &str,
    row: Option<RowGpu<'_>>,
) -> bool {
    let (name, mut labels) = parse_series(series);
    if labels.is_empty() {
        if let Some((host, id, model, uuid)) = row {
            labels.push(("gpu".into(), id.to_string()));
            for (k, v) in [("Hostname", host), ("modelName", model), ("UUID", uuid)] {
                if let Some(v) = v {
                    labels.push((k.into(), v.to_string()));
                }
            }
        }
    }
    put_parsed(t, &name, &labels, when, value)
}

fn put_parsed(
    t: &mut Table,
    name: &str,
    labels: &[(String, String)],
    when: Option<f64>,
    value: &str,
) -> bool {
    let Some(found) = vocab::lookup(name) else {
        t.unknown(name);
        return false;
    };
    let metric = found.term.metric;
    if metric == Metric::Ignored {
        return false;
    }
    let Some((x, _)) = super::table::number(value) else {
        return false;
    };
    let g = series_gpu(labels);
    // MIG instances of one GPU share its uuid: only a whole GPU is known by it.
    let uuid = g.uuid.filter(|_| !g.id.contains(" GPU-I "));
    let Some(e) = t.entity_with_uuid(g.host, &g.id, uuid) else {
        return false;
    };
    t.describe(e, g.name, g.uuid);
    let w = match when {
        Some(s) => When::At(s),
        None => t.next_nth_of(e, metric),
    };
    t.put(e, w, metric, x * found.scale);
    true
}

/// Reads saved Prometheus text scrapes (the exposition format, `# HELP`/`# TYPE` lines,
/// optional millisecond timestamps). Scrapes without timestamps are counted one interval apart.
pub fn read_text(
    r: impl Read,
    interval_s: Option<f64>,
    visit: impl FnMut(&Reading),
) -> Result<(LogHeader, LogInfo, BTreeMap<u32, ProfilingMeans>), LogError> {
    let mut t = Table::new();
    let mut any = false;
    t.each_line(r, |t, buf| {
        let text = String::from_utf8_lossy(buf);
        let l = text.trim();
        if l.is_empty() || l.starts_with('#') {
            return Ok(());
        }
        any = true;
        // `name{labels} value [timestamp_ms]`: the labels may hold spaces.
        let after_labels = l.rfind('}').map_or(0, |i| i + 1);
        let (series, rest) = match l[after_labels..].find(char::is_whitespace) {
            Some(i) => l.split_at(after_labels + i),
            None => {
                t.info.malformed += 1;
                return Ok(());
            }
        };
        let mut vals = rest.split_whitespace();
        let (Some(v), ts) = (vals.next(), vals.next()) else {
            t.info.malformed += 1;
            return Ok(());
        };
        let when = ts.and_then(|s| s.parse::<f64>().ok()).map(|ms| ms / 1000.0);
        put_series(t, series, when, v, None);
        Ok(())
    })?;
    if !any {
        return Err(LogError::Empty);
    }
    t.finish("a Prometheus text scrape", interval_s, visit)
}

/// The most bytes of a Prometheus JSON result read (it is parsed whole).
pub(crate) const MAX_JSON_BYTES: u64 = 64 << 20;

/// Reads a Prometheus HTTP API answer (`{"status":"success","data":{"resultType":"matrix",
/// "result":[{"metric":{…},"values":[[t,"v"],…]}]}}`, or `vector` with one `value`), or a list
/// of such answers.
pub fn read_json(
    r: impl Read,
    interval_s: Option<f64>,
    visit: impl FnMut(&Reading),
) -> Result<(LogHeader, LogInfo, BTreeMap<u32, ProfilingMeans>), LogError> {
    let mut buf = Vec::new();
    r.take(MAX_JSON_BYTES + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > MAX_JSON_BYTES {
        return Err(LogError::Format(format!(
            "a Prometheus JSON answer over {} MiB: query a shorter range or a larger step",
            MAX_JSON_BYTES >> 20
        )));
    }
    let bad = |e: serde_json::Error| {
        LogError::Format(format!(
            "not a whole Prometheus JSON answer ({e}): save the full /api/v1/query_range reply"
        ))
    };
    // Read in place, never as one tree of values (a 64 MiB answer was 1.2 GB as a
    // `serde_json::Value`): the answers' parts are borrowed from the buffer and each point of a
    // series goes to the table as it is parsed.
    let top: &RawValue = serde_json::from_slice(&buf).map_err(bad)?;
    let answers: Vec<&RawValue> = if top.get().trim_start().starts_with('[') {
        serde_json::from_str(top.get()).map_err(bad)?
    } else {
        vec![top]
    };
    let mut t = Table::new();
    let mut series_n = 0u64;
    for a in answers {
        let Some(result) = answer_result(a) else {
            continue;
        };
        let mut d = serde_json::Deserializer::from_str(result.get());
        serde::de::Deserializer::deserialize_seq(
            &mut d,
            SeriesList {
                t: &mut t,
                n: &mut series_n,
            },
        )
        .map_err(bad)?;
    }
    if series_n == 0 {
        return Err(LogError::Format(
            "a JSON answer with no series (data.result is empty or missing): \
             the query matched nothing"
                .into(),
        ));
    }
    t.finish("a Prometheus query result", interval_s, visit)
}

/// An answer's list of series: `data.result`, else `result` (`None` when it has neither, or
/// it is not a list).
fn answer_result(a: &RawValue) -> Option<&RawValue> {
    #[derive(serde::Deserialize)]
    struct Answer<'a> {
        #[serde(borrow)]
        data: Option<&'a RawValue>,
        #[serde(borrow)]
        result: Option<&'a RawValue>,
    }
    #[derive(serde::Deserialize)]
    struct Data<'a> {
        #[serde(borrow)]
        result: Option<&'a RawValue>,
    }
    let a: Answer = serde_json::from_str(a.get()).ok()?;
    let from_data = a
        .data
        .and_then(|d| serde_json::from_str::<Data>(d.get()).ok());
    let r = match from_data {
        Some(Data { result: Some(r) }) => r,
        _ => a.result?,
    };
    r.get().trim_start().starts_with('[').then_some(r)
}

/// Streams a list of series into the table, counting them.
struct SeriesList<'t> {
    t: &'t mut Table,
    n: &'t mut u64,
}

impl<'de> serde::de::Visitor<'de> for SeriesList<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of series")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(s) = seq.next_element::<Series>()? {
            *self.n += 1;
            let Some(s) = s.0 else {
                continue;
            };
            let metric = s.metric.and_then(|m| {
                serde_json::from_str::<BTreeMap<String, serde_json::Value>>(m.get()).ok()
            });
            let labels: Vec<(String, String)> = metric
                .into_iter()
                .flatten()
                .map(|(k, v)| (k, v.as_str().unwrap_or_default().to_string()))
                .collect();
            let name = labels
                .iter()
                .find(|(k, _)| k == "__name__")
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            let values = s.values.filter(|v| v.get().trim_start().starts_with('['));
            match (values, s.value) {
                (Some(vals), _) => {
                    let mut d = serde_json::Deserializer::from_str(vals.get());
                    serde::de::Deserializer::deserialize_seq(
                        &mut d,
                        Points {
                            t: &mut *self.t,
                            name: &name,
                            labels: &labels,
                        },
                    )
                    .map_err(serde::de::Error::custom)?;
                }
                (None, Some(one)) => {
                    let p: Point =
                        serde_json::from_str(one.get()).map_err(serde::de::Error::custom)?;
                    put_point(self.t, &name, &labels, p);
                }
                (None, None) => {}
            }
        }
        Ok(())
    }
}

/// One series (`None`: not an object, holding nothing).
struct Series<'a>(Option<SeriesParts<'a>>);

#[derive(serde::Deserialize)]
struct SeriesParts<'a> {
    #[serde(borrow)]
    metric: Option<&'a RawValue>,
    #[serde(borrow)]
    values: Option<&'a RawValue>,
    #[serde(borrow)]
    value: Option<&'a RawValue>,
}

impl<'de: 'a, 'a> serde::Deserialize<'de> for Series<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw: &RawValue = serde::Deserialize::deserialize(d)?;
        Ok(Series(serde_json::from_str(raw.get()).ok()))
    }
}

/// Streams a series' points into the table.
struct Points<'t> {
    t: &'t mut Table,
    name: &'t str,
    labels: &'t [(String, String)],
}

impl<'de> serde::de::Visitor<'de> for Points<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of points")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(p) = seq.next_element::<Point>()? {
            put_point(self.t, self.name, self.labels, p);
        }
        Ok(())
    }
}

fn put_point(t: &mut Table, name: &str, labels: &[(String, String)], p: Point) {
    let Point(Some((ts, val))) = p else {
        t.info.malformed += 1;
        return;
    };
    t.info.rows += 1;
    put_parsed(t, name, labels, Some(ts), &val);
}

/// A point `[time, "value"]`: a number and a string first, anything after them ignored;
/// `None` for any other JSON value.
struct Point<'a>(Option<(f64, std::borrow::Cow<'a, str>)>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for Point<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(PointVisitor(std::marker::PhantomData))
    }
}

struct PointVisitor<'a>(std::marker::PhantomData<&'a ()>);

impl<'de: 'a, 'a> serde::de::Visitor<'de> for PointVisitor<'a> {
    type Value = Point<'a>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a point")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Point<'a>, A::Error> {
        let ts = seq.next_element::<Scalar>()?;
        let val = match ts {
            Some(_) => seq.next_element::<Scalar>()?,
            None => None,
        };
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(Point(match (ts, val) {
            (Some(Scalar::Num(t)), Some(Scalar::Str(v))) => Some((t, v)),
            _ => None,
        }))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Point<'a>, A::Error> {
        while map
            .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
            .is_some()
        {}
        Ok(Point(None))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Point<'a>, E> {
        Ok(Point(None))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Point<'a>, E> {
        Ok(Point(None))
    }
    fn visit_u64<E>(self, _: u64) -> Result<Point<'a>, E> {
        Ok(Point(None))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Point<'a>, E> {
        Ok(Point(None))
    }
    fn visit_str<E>(self, _: &str) -> Result<Point<'a>, E> {
        Ok(Point(None))
    }
    fn visit_unit<E>(self) -> Result<Point<'a>, E> {
        Ok(Point(None))
    }
}

/// A JSON value inside a point: a number, a string, or anything else (skipped).
enum Scalar<'a> {
    Num(f64),
    Str(std::borrow::Cow<'a, str>),
    Other,
}

impl<'de: 'a, 'a> serde::Deserialize<'de> for Scalar<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ScalarVisitor(std::marker::PhantomData))
    }
}

struct ScalarVisitor<'a>(std::marker::PhantomData<&'a ()>);

impl<'de: 'a, 'a> serde::de::Visitor<'de> for ScalarVisitor<'a> {
    type Value = Scalar<'a>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_i64<E>(self, v: i64) -> Result<Scalar<'a>, E> {
        Ok(Scalar::Num(v as f64))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Scalar<'a>, E> {
        Ok(Scalar::Num(v as f64))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Scalar<'a>, E> {
        Ok(Scalar::Num(v))
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Scalar<'a>, E> {
        Ok(Scalar::Str(std::borrow::Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Scalar<'a>, E> {
        Ok(Scalar::Str(std::borrow::Cow::Owned(v.to_string())))
    }
    fn visit_bool<E>(self, _: bool) -> Result<Scalar<'a>, E> {
        Ok(Scalar::Other)
    }
    fn visit_unit<E>(self) -> Result<Scalar<'a>, E> {
        Ok(Scalar::Other)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Scalar<'a>, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(Scalar::Other)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Scalar<'a>, A::Error> {
        while map
            .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
            .is_some()
        {}
        Ok(Scalar::Other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(
        f: impl Fn(&[u8], &mut dyn FnMut(&Reading)) -> Result<(LogHeader, LogInfo), LogError>,
        text: &str,
    ) -> (LogHeader, LogInfo, Vec<Reading>) {
        let mut out = Vec::new();
        let (h, i) = f(text.as_bytes(), &mut |l: &Reading| out.push(l.clone())).unwrap();
        (h, i, out)
    }

    fn text(b: &[u8], v: &mut dyn FnMut(&Reading)) -> Result<(LogHeader, LogInfo), LogError> {
        read_text(b, None, v).map(|(h, i, _)| (h, i))
    }

    fn json(b: &[u8], v: &mut dyn FnMut(&Reading)) -> Result<(LogHeader, LogInfo), LogError> {
        read_json(b, None, v).map(|(h, i, _)| (h, i))
    }

    #[test]
    fn labels_are_parsed() {
        let (n, l) = parse_series(
            r#"DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-ab",device="nvidia1",modelName="NVIDIA A100-SXM4-80GB",Hostname="node 7"}"#,
        );
        assert_eq!(n, "DCGM_FI_DEV_GPU_UTIL");
        let g = series_gpu(&l);
        assert_eq!((g.host, g.id.as_str()), (Some("node 7"), "1"));
        assert_eq!(g.name, Some("NVIDIA A100-SXM4-80GB"));
        let (_, l) = parse_series(r#"X{gpu=""0"",GPU_I_ID=""3""}"#);
        assert_eq!(series_gpu(&l).id, "0 GPU-I 3");
    }

    #[test]
    fn one_gpu_under_index_and_uuid_is_one_gpu() {
        // dcgm-exporter (`gpu`, `UUID`, `Hostname`) and nvidia_gpu_exporter (`uuid`,
        // `instance`) scraped into one file: two GPUs were read, one of them twice.
        let s = "\
DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-1a2b3c4d-0000\",Hostname=\"node1\"} 92 1700000000000
nvidia_smi_utilization_gpu_ratio{uuid=\"GPU-1a2b3c4d-0000\",instance=\"10.0.0.1:9835\"} 0.91 1700000000000
DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-1a2b3c4d-0000\",Hostname=\"node1\"} 94 1700000015000
nvidia_smi_utilization_gpu_ratio{uuid=\"GPU-1a2b3c4d-0000\",instance=\"10.0.0.1:9835\"} 0.93 1700000015000
DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-99\",GPU_I_ID=\"1\",Hostname=\"node1\"} 10 1700000000000
DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-99\",GPU_I_ID=\"2\",Hostname=\"node1\"} 20 1700000000000
";
        let (h, _) = text(s.as_bytes(), &mut |_| {}).unwrap();
        assert_eq!(h.gpus.len(), 3, "one whole GPU and two MIG instances");
    }

    #[test]
    fn scrapes_one_after_another() {
        let s = "\
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",Hostname=\"a\"} 90
DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",Hostname=\"a\"} 0
DCGM_FI_DEV_FB_USED{gpu=\"0\",Hostname=\"a\"} 30000
DCGM_FI_DEV_FB_USED{gpu=\"1\",Hostname=\"a\"} 0
DCGM_FI_DEV_SOMETHING_NEW{gpu=\"0\"} 1
DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",Hostname=\"a\"} 80
DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",Hostname=\"a\"} 0
";
        let (h, info, s) = read(text, s);
        assert_eq!(h.gpus.len(), 2);
        assert_eq!(s.iter().filter(|g| g.index == 0).count(), 2);
        assert_eq!(s[0].mem_used_bytes, Some(30000 << 20));
        assert!(info.interval_unknown);
        assert!(
            info.notes
                .iter()
                .any(|n| n.contains("DCGM_FI_DEV_SOMETHING_NEW")),
            "{:?}",
            info.notes
        );
    }

    #[test]
    fn a_range_query() {
        let j = r#"{"status":"success","data":{"resultType":"matrix","result":[
          {"metric":{"__name__":"DCGM_FI_PROF_SM_ACTIVE","gpu":"0","Hostname":"n1"},"values":[[1700000000,"0.9"],[1700000015,"0.8"]]},
          {"metric":{"__name__":"DCGM_FI_PROF_SM_ACTIVE","gpu":"1","Hostname":"n1"},"values":[[1700000000,"0.006"],[1700000015,"0.004"]]},
          {"metric":{"__name__":"DCGM_FI_DEV_GPU_UTIL","gpu":"1","Hostname":"n1"},"values":[[1700000000,"100"],[1700000015,"100"]]}]}}"#;
        let (h, info, s) = read(json, j);
        assert_eq!(h.gpus.len(), 2);
        assert_eq!(s.len(), 4);
        assert_eq!(s[3].t_s, 15.0);
        assert!((s[0].util_pct.unwrap() - 90.0).abs() < 1e-3);
        assert!(info.notes[0].contains("SM active"), "{:?}", info.notes);
        assert!(json(b"{\"data\":{\"result\":[]}}", &mut |_| {}).is_err());
        let e = json(b"{\"data\":{\"res", &mut |_| {}).unwrap_err();
        assert!(e.to_string().contains("not a whole Prometheus JSON"), "{e}");
    }
}
