//! The deployment files in deploy/: the Kubernetes manifests parsed and their key fields checked
//! (kubeconform cannot be installed from a package registry here), and the Slurm wrapper run
//! end to end against a stub `srun` with the real `gpufeed` on the fake driver.

use crate::common_fake;
use crate::read_json;

use gpufeed::present::prometheus::FLEET_LABELS;
use std::path::PathBuf;
use yaml_rust2::{Yaml, YamlLoader};

fn deploy(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(rel)
}

fn docs() -> Vec<Yaml> {
    let text = std::fs::read_to_string(deploy("kubernetes/gpufeed.yaml")).unwrap();
    YamlLoader::load_from_str(&text).expect("valid YAML")
}

fn kind<'a>(docs: &'a [Yaml], k: &str) -> &'a Yaml {
    docs.iter()
        .find(|d| d["kind"].as_str() == Some(k))
        .unwrap_or_else(|| panic!("no {k} in gpufeed.yaml"))
}

fn s(y: &Yaml) -> &str {
    y.as_str().unwrap_or_else(|| panic!("not a string: {y:?}"))
}

#[test]
fn kubernetes_manifests_hang_together() {
    let docs = docs();
    for d in &docs {
        assert!(d["apiVersion"].as_str().is_some(), "{d:?}");
        assert!(d["metadata"]["name"].as_str().is_some(), "{d:?}");
    }
    let ds = kind(&docs, "DaemonSet");
    assert_eq!(s(&ds["apiVersion"]), "apps/v1");
    let ns = s(&ds["metadata"]["namespace"]);
    let pod_labels = &ds["spec"]["template"]["metadata"]["labels"];
    // The selector selects the template's pods.
    let sel = ds["spec"]["selector"]["matchLabels"].as_hash().unwrap();
    for (k, v) in sel {
        assert_eq!(
            &pod_labels[s(k)],
            v,
            "selector {k:?} does not match the pod template"
        );
    }
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostPID"].as_bool(), Some(true));
    let c = &pod["containers"][0];
    let args: Vec<&str> = c["args"].as_vec().unwrap().iter().map(s).collect();
    assert_eq!(args[0], "serve");
    let listen = args[args.iter().position(|a| *a == "--listen").unwrap() + 1];
    let port: i64 = listen.rsplit(':').next().unwrap().parse().unwrap();
    let cport = c["ports"]
        .as_vec()
        .unwrap()
        .iter()
        .find(|p| p["name"].as_str() == Some("metrics"))
        .expect("a port named metrics");
    assert_eq!(cport["containerPort"].as_i64(), Some(port));
    // The fleet labels' variables come from the downward API.
    let env = c["env"].as_vec().unwrap();
    for var in ["POD_NAME", "POD_NAMESPACE", "NODE_NAME"] {
        assert!(
            FLEET_LABELS.iter().any(|(_, v)| *v == var),
            "{var} is not a fleet label"
        );
        let e = env
            .iter()
            .find(|e| e["name"].as_str() == Some(var))
            .unwrap_or_else(|| panic!("no {var}"));
        assert!(e["valueFrom"]["fieldRef"]["fieldPath"].as_str().is_some());
    }
    for probe in ["readinessProbe", "livenessProbe"] {
        assert_eq!(s(&c[probe]["httpGet"]["port"]), "metrics");
    }

    let svc = kind(&docs, "Service");
    // The scrape job is named after the Service; the rules' GpufeedExporterDown expects gpufeed.
    assert_eq!(s(&svc["metadata"]["name"]), "gpufeed");
    assert_eq!(s(&svc["metadata"]["namespace"]), ns);
    for (k, v) in svc["spec"]["selector"].as_hash().unwrap() {
        assert_eq!(&pod_labels[s(k)], v, "the Service does not select the pods");
    }
    let sport = &svc["spec"]["ports"][0];
    assert_eq!(s(&sport["name"]), "metrics");
    assert_eq!(s(&sport["targetPort"]), "metrics");

    let sm = kind(&docs, "ServiceMonitor");
    assert_eq!(s(&sm["apiVersion"]), "monitoring.coreos.com/v1");
    for (k, v) in sm["spec"]["selector"]["matchLabels"].as_hash().unwrap() {
        assert_eq!(
            &svc["metadata"]["labels"][s(k)],
            v,
            "the ServiceMonitor does not select the Service"
        );
    }
    let names: Vec<&str> = sm["spec"]["namespaceSelector"]["matchNames"]
        .as_vec()
        .unwrap()
        .iter()
        .map(s)
        .collect();
    assert!(names.contains(&ns));
    let ep = &sm["spec"]["endpoints"][0];
    assert_eq!(s(&ep["port"]), "metrics");
    assert_eq!(s(&ep["path"]), "/metrics");
}

#[test]
fn slurm_wrapper_records_each_node_and_judges_the_job() {
    let script = deploy("slurm/gpufeed-train.sbatch");
    let syntax = std::process::Command::new("bash")
        .arg("-n")
        .arg(&script)
        .status()
        .unwrap();
    assert!(syntax.success());
    let dir = tempfile::tempdir().unwrap();
    // A stub srun: drops its options and runs the command in its place (so a signal sent to
    // "srun" reaches the task, as srun forwards SIGTERM).
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let srun = bin.join("srun");
    std::fs::write(
        &srun,
        "#!/bin/bash\nwhile [ \"$#\" -gt 0 ] && [ \"${1#--}\" != \"$1\" ]; do shift; done\nexec \"$@\"\n",
    )
    .unwrap();
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&srun)
        .status()
        .unwrap();
    let scen = common_fake::scenario(
        dir.path(),
        r#"{"devices":[{"name":"NVIDIA H100 80GB HBM3","util":97}]}"#,
    );
    let out_dir = dir.path().join("recs");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = std::process::Command::new("bash")
        .arg(&script)
        .args(["sleep", "3"])
        .env("PATH", path)
        .env("GPUFEED", assert_cmd::cargo::cargo_bin("gpufeed"))
        .env("GPUFEED_DIR", &out_dir)
        .env("GPUFEED_NVML_LIB", common_fake::fake_nvml())
        .env("FAKE_NVML_SCENARIO", scen)
        .env("SLURM_JOB_ID", "77")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("JOB VERDICT  "), "{stdout}");
    let job = read_json(&out_dir.join("job.json"));
    let nodes = job["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0]["verdict"]["id"], "compute_bound", "{job}");
    assert_eq!(nodes[0]["verdict_id"], "compute_bound", "{job}");
    // The recording was finished (its end line written) by SIGTERM.
    let rec = std::fs::read_to_string(nodes[0]["recording"].as_str().unwrap()).unwrap();
    assert!(
        rec.lines().last().unwrap().contains("\"type\":\"end\""),
        "{}",
        rec.lines().last().unwrap()
    );
}
