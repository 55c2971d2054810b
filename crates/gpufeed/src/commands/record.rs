//! `gpufeed run` and `gpufeed record`.

use crate::cli::{GlobalOpts, RecordArgs, RunArgs};

pub fn run(_global: &GlobalOpts, _args: &RunArgs) -> anyhow::Result<u8> {
    anyhow::bail!("not yet")
}

pub fn record(_global: &GlobalOpts, _args: &RecordArgs) -> anyhow::Result<u8> {
    anyhow::bail!("not yet")
}
