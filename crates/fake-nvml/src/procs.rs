//! Expanding `"pid": "children"` / `"self"` into real PIDs by reading /proc.

use crate::scenario::{PidSpec, ProcessSpec};

/// Parses `pid` and `ppid` out of the contents of `/proc/<pid>/stat`.
///
/// The command name (field 2) is in parentheses and may itself contain spaces and parentheses,
/// so the fields after it are found from the *last* `)`.
pub fn parse_stat(stat: &str) -> Option<(u32, u32)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let pid = stat.get(..open)?.trim().parse().ok()?;
    let mut rest = stat.get(close + 1..)?.split_ascii_whitespace();
    let _state = rest.next()?;
    let ppid = rest.next()?.parse().ok()?;
    Some((pid, ppid))
}

/// Every direct child of `parent`, sorted by PID (empty when /proc cannot be read).
///
/// Read from the kernel's per-thread children lists (`/proc/PID/task/TID/children`): a few small
/// files. Scanning every process's stat instead (the fallback, for kernels without those files)
/// cost the recorder's benchmark 0.3 % of a core on a busy machine, a cost of this fake that no
/// real driver has.
pub fn children_of(parent: u32) -> Vec<u32> {
    if let Some(mut out) = children_from_task_lists(parent) {
        out.sort_unstable();
        out.dedup();
        return out;
    }
    children_by_scan(parent)
}

/// The union of `parent`'s threads' children lists; `None` when the kernel has none.
fn children_from_task_lists(parent: u32) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{parent}/task"))
        .ok()?
        .flatten()
    {
        let text = match std::fs::read_to_string(task.path().join("children")) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && out.is_empty() => {
                // No such file at all (CONFIG_PROC_CHILDREN off), or the thread just ended.
                if !std::path::Path::new(&format!("/proc/{parent}/task/{parent}/children")).exists()
                {
                    return None;
                }
                continue;
            }
            Err(_) => continue,
        };
        out.extend(
            text.split_ascii_whitespace()
                .filter_map(|w| w.parse::<u32>().ok()),
        );
    }
    Some(out)
}

/// Every direct child of `parent`, found by reading every process's stat.
fn children_by_scan(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        // The process may have exited since the directory was listed: skip it quietly.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some((pid, ppid)) = parse_stat(&stat) {
            if ppid == parent {
                out.push(pid);
            }
        }
    }
    out.sort_unstable();
    out
}

/// The PID of the process that loaded the library.
pub fn self_pid() -> u32 {
    std::process::id()
}

/// A concrete GPU process at call time: its PID and the spec it came from.
#[derive(Debug, Clone, Copy)]
pub struct Resolved<'a> {
    pub pid: u32,
    pub spec: &'a ProcessSpec,
}

/// Expands the scenario's process list into concrete PIDs. A PID that appears more than once
/// (e.g. a literal PID that is also a child) is reported once, from its first entry.
pub fn resolve(specs: &[ProcessSpec]) -> Vec<Resolved<'_>> {
    let mut out: Vec<Resolved<'_>> = Vec::new();
    let mut children: Option<Vec<u32>> = None;
    for spec in specs {
        let pids = match spec.pid {
            PidSpec::Pid(p) => vec![p],
            PidSpec::SelfPid => vec![self_pid()],
            PidSpec::Children => children
                .get_or_insert_with(|| children_of(self_pid()))
                .clone(),
        };
        for pid in pids {
            if !out.iter().any(|r| r.pid == pid) {
                out.push(Resolved { pid, spec });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_awkward_command_names() {
        assert_eq!(
            parse_stat("1234 (python) S 1000 1234 1234 0 -1 4194304"),
            Some((1234, 1000))
        );
        assert_eq!(
            parse_stat("77 (a b) (c)) R 5 77 77 0"),
            Some((77, 5)),
            "name with spaces and parentheses"
        );
        assert_eq!(parse_stat(""), None);
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("12 (x) S"), None);
    }

    #[test]
    fn finds_a_spawned_child() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("spawn sleep");
        // From a thread other than the main one too: each thread has its own list.
        let mut other = std::thread::spawn(|| {
            std::process::Command::new("sleep")
                .arg("5")
                .spawn()
                .expect("spawn sleep")
        })
        .join()
        .unwrap();
        let kids = children_of(self_pid());
        let scanned = children_by_scan(self_pid());
        for c in [&mut child, &mut other] {
            let _ = c.kill();
            let _ = c.wait();
        }
        for id in [child.id(), other.id()] {
            assert!(kids.contains(&id), "{kids:?} lacks {id}");
            assert!(scanned.contains(&id), "{scanned:?} lacks {id}");
        }
    }

    #[test]
    fn resolves_self_and_literal_without_duplicates() {
        let specs: Vec<ProcessSpec> = serde_json::from_str(
            r#"[{"pid": "self", "sm_util": 1}, {"pid": 42}, {"pid": "self", "sm_util": 2}]"#,
        )
        .unwrap();
        let r = resolve(&specs);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].pid, self_pid());
        assert_eq!(r[0].spec.sm_util.value_at(0.0), 1.0);
        assert_eq!(r[1].pid, 42);
    }
}
