//! The Grafana dashboard in dashboards/ only queries metrics gpufeed exports.

use crate::read_json;
use gpufeed::present::prometheus::METRICS;

/// Metric-looking identifiers in a PromQL expression (PromQL functions and label names excluded).
fn metric_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_braces = 0;
    let mut in_quotes = false;
    for c in expr.chars().chain(std::iter::once(' ')) {
        if c == '"' {
            in_quotes = !in_quotes;
        }
        if !in_quotes && (c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            cur.push(c);
            continue;
        }
        if in_braces == 0 && !in_quotes && (cur.starts_with("gpufeed_") || cur.starts_with("DCGM_"))
        {
            out.push(cur.clone());
        }
        cur.clear();
        match c {
            '{' if !in_quotes => in_braces += 1,
            '}' if !in_quotes => in_braces -= 1,
            _ => {}
        }
    }
    out
}

#[test]
fn every_panel_queries_an_exported_metric() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../dashboards/gpufeed.json");
    let d = read_json(path.as_ref());
    let panels = d["panels"].as_array().unwrap();
    assert!(panels.len() >= 8);
    let exported: Vec<&str> = METRICS.iter().map(|m| m.0).collect();
    for p in panels {
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "panel {} has no query", p["title"]);
        for t in targets {
            let expr = t["expr"].as_str().unwrap();
            let names = metric_names(expr);
            assert!(
                !names.is_empty(),
                "panel {}: no gpufeed metric in {expr}",
                p["title"]
            );
            for n in names {
                assert!(
                    exported.contains(&n.as_str()),
                    "panel {}: {n} is not exported",
                    p["title"]
                );
            }
        }
    }
    for v in d["templating"]["list"].as_array().unwrap() {
        if let Some(q) = v["query"].as_str().filter(|q| q.contains("label_values")) {
            for n in metric_names(q) {
                assert!(
                    exported.contains(&n.as_str()),
                    "variable {}: {n}",
                    v["name"]
                );
            }
        }
    }
}

#[test]
fn the_name_scanner_skips_labels_and_functions() {
    assert_eq!(
        metric_names(r#"rate(gpufeed_pcie_rx_bytes_total{hostname=~"gpufeed_x"}[1m])"#),
        ["gpufeed_pcie_rx_bytes_total"]
    );
}
