//! Ranks and launchers of a multi-process job (torchrun, `accelerate launch`, DeepSpeed, MPI,
//! Slurm, Lightning DDP), from what the kernel shows of each process: its command line and the
//! environment it was started with (/proc/PID/environ, readable for the job's own processes).
//!
//! A launcher sets `RANK` / `LOCAL_RANK` / `WORLD_SIZE` in each rank's environment at exec; a
//! rank's DataLoader workers are forked from it and show the same values, so a rank is a process
//! with a rank variable whose parent does not show the same one (see [`is_rank_start`]).

use serde::{Deserialize, Serialize};

/// The distributed-training variables of a process's start-up environment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankEnv {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_rank: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world_size: Option<u32>,
}

impl RankEnv {
    /// Reads the variables from an environ block (`KEY=VALUE` separated by NUL); `None` when it
    /// has none of them. MPI's and Slurm's names count when torch's are absent.
    pub fn parse(environ: &[u8]) -> Option<RankEnv> {
        let mut vars: [Option<u32>; 7] = [None; 7];
        const KEYS: [&str; 7] = [
            "RANK",
            "LOCAL_RANK",
            "WORLD_SIZE",
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_SIZE",
            "PMI_RANK",
        ];
        for kv in environ.split(|b| *b == 0) {
            let Some(eq) = kv.iter().position(|b| *b == b'=') else {
                continue;
            };
            let (k, v) = (&kv[..eq], &kv[eq + 1..]);
            if let Some(i) = KEYS.iter().position(|key| key.as_bytes() == k) {
                vars[i] = std::str::from_utf8(v)
                    .ok()
                    .and_then(|s| s.trim().parse().ok());
            }
        }
        let env = RankEnv {
            rank: vars[0].or(vars[3]).or(vars[6]),
            local_rank: vars[1].or(vars[4]),
            world_size: vars[2].or(vars[5]),
        };
        (env.rank.is_some() || env.local_rank.is_some()).then_some(env)
    }

    /// The rank to show: global, else local.
    pub fn shown(&self) -> Option<u32> {
        self.rank.or(self.local_rank)
    }
}

/// The rank variables of a live process; `None` when it has none or its environment cannot be
/// read (another user's process).
pub(crate) fn rank_env_of(pid: u32) -> Option<RankEnv> {
    RankEnv::parse(&std::fs::read(format!("/proc/{pid}/environ")).ok()?)
}

/// Does a process with `env` start a rank, given its parent's? A forked DataLoader worker shows
/// its rank's very values; a rank started by a launcher (which has none, or other ones) does not.
pub(crate) fn is_rank_start(env: Option<&RankEnv>, parent: Option<&RankEnv>) -> bool {
    env.is_some() && env != parent
}

/// Do two command lines run the same script with the same arguments? Lightning re-launches its
/// script as `[sys.executable, abspath(argv[0])] + argv[1:]`: the interpreter and the script
/// may be spelled otherwise than the user typed them (`python train.py` becomes
/// `/venv/bin/python3.11 /home/u/train.py`), so each word is compared by its file name, any
/// Python interpreter counting as one.
pub(crate) fn same_script(a: Option<&str>, b: Option<&str>) -> bool {
    fn words(c: &str) -> Vec<&str> {
        c.split_whitespace()
            .map(|w| {
                let name = w.rsplit('/').next().unwrap_or(w);
                if name.starts_with("python") {
                    "python"
                } else {
                    name
                }
            })
            .collect()
    }
    match (a, b) {
        (Some(a), Some(b)) => !a.trim().is_empty() && words(a) == words(b),
        _ => false,
    }
}

/// Is this command line a launcher that starts ranks and then only waits for them? Matched on
/// the program and the module it runs: torchrun / `python -m torch.distributed.run` (and
/// `.launch`), `accelerate launch`, `deepspeed`, `mpirun` / `mpiexec` / `orterun`, `srun`.
pub(crate) fn is_launcher_cmd(cmd: &str) -> bool {
    let words: Vec<&str> = cmd.split_whitespace().take(8).collect();
    let base = |w: &str| w.rsplit('/').next().unwrap_or(w).to_string();
    let prog = |w: &str| {
        let b = base(w);
        matches!(
            b.as_str(),
            "torchrun" | "deepspeed" | "mpirun" | "mpiexec" | "orterun" | "srun"
        ) || (b == "accelerate" || b == "accelerate-launch")
    };
    let module = |w: &str| {
        matches!(
            w,
            "torch.distributed.run" | "torch.distributed.launch" | "deepspeed.launcher.runner"
        )
    };
    for (i, w) in words.iter().enumerate() {
        // The program itself, or a Python running one (`python /venv/bin/torchrun ...`).
        let is_python = base(w).starts_with("python");
        if prog(w) {
            let b = base(w);
            // `accelerate` launches only with `launch`; `accelerate env` is not a launcher.
            return b != "accelerate" || words.get(i + 1) == Some(&"launch");
        }
        if *w == "-m" && words.get(i + 1).is_some_and(|m| module(m)) {
            return true;
        }
        if i > 0 && !is_python && !w.starts_with('-') {
            // Past the program (a script or another command): stop looking.
            break;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_variables_are_read_from_an_environ_block() {
        let e = RankEnv::parse(b"PATH=/bin\0RANK=3\0LOCAL_RANK=1\0WORLD_SIZE=8\0").unwrap();
        assert_eq!(
            (e.rank, e.local_rank, e.world_size, e.shown()),
            (Some(3), Some(1), Some(8), Some(3))
        );
        let mpi = RankEnv::parse(b"OMPI_COMM_WORLD_RANK=2\0OMPI_COMM_WORLD_SIZE=4\0").unwrap();
        assert_eq!((mpi.rank, mpi.world_size), (Some(2), Some(4)));
        let lightning = RankEnv::parse(b"LOCAL_RANK=1\0").unwrap();
        assert_eq!((lightning.rank, lightning.shown()), (None, Some(1)));
        assert_eq!(RankEnv::parse(b"PATH=/bin\0WORLD_SIZE=2\0"), None);
        assert_eq!(RankEnv::parse(b"RANK=x\0"), None, "not a number: no rank");
        assert_eq!(RankEnv::parse(b""), None);
    }

    #[test]
    fn a_forked_worker_is_not_a_new_rank() {
        let r0 = RankEnv {
            rank: Some(0),
            ..Default::default()
        };
        let r1 = RankEnv {
            rank: Some(1),
            ..Default::default()
        };
        assert!(is_rank_start(Some(&r0), None), "started by a launcher");
        assert!(!is_rank_start(Some(&r0), Some(&r0)), "a worker of rank 0");
        assert!(
            is_rank_start(Some(&r1), Some(&r0)),
            "Lightning: rank 0 starts rank 1"
        );
        assert!(!is_rank_start(None, None));
    }

    #[test]
    fn lightnings_relaunch_runs_the_same_script_however_spelled() {
        let user = Some("python ddp_lightning.py --steps 25");
        for relaunch in [
            "/tmp/venv/bin/python3.11 /tmp/job/ddp_lightning.py --steps 25",
            "python ddp_lightning.py --steps 25",
        ] {
            assert!(same_script(user, Some(relaunch)), "{relaunch}");
        }
        for other in [
            "/tmp/venv/bin/python /tmp/job/other.py --steps 25",
            "/tmp/venv/bin/python /tmp/job/ddp_lightning.py --steps 26",
            "/usr/bin/bash ddp_lightning.py --steps 25",
        ] {
            assert!(!same_script(user, Some(other)), "{other}");
        }
        assert!(!same_script(None, None));
        assert!(!same_script(user, None));
    }

    #[test]
    fn launchers_are_told_from_training_scripts() {
        for l in [
            "/venv/bin/python3 /venv/bin/torchrun --nproc_per_node 2 ddp_train.py",
            "torchrun --standalone --nproc-per-node=8 train.py",
            "python -m torch.distributed.run --nproc_per_node 2 t.py",
            "/usr/bin/python3.11 -u -m torch.distributed.launch t.py",
            "/venv/bin/python /venv/bin/accelerate launch --num_processes 2 t.py",
            "deepspeed --num_gpus 8 train.py",
            "mpirun -np 4 python train.py",
            "srun --ntasks=8 python train.py",
        ] {
            assert!(is_launcher_cmd(l), "{l}");
        }
        for n in [
            "/venv/bin/python3 -u ddp_train.py",
            "python train.py --launcher torchrun",
            "python -m mypkg.train",
            "/venv/bin/python /venv/bin/accelerate env",
            "python /home/me/srun_analysis.py",
            "",
        ] {
            assert!(!is_launcher_cmd(n), "{n}");
        }
    }
}
