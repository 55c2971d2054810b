//! Arguments of `gpufeed man`.

use super::*;

#[derive(Debug, Clone, Args)]
#[command(after_help = "\
EXAMPLES:
    gpufeed man | man -l -                         read it now
    gpufeed man > ~/.local/share/man/man1/gpufeed.1   install it for `man gpufeed`
    gpufeed man sweep > gpufeed-sweep.1            one subcommand's page")]
pub struct ManArgs {
    /// A subcommand's page (gpufeed-COMMAND(1)) instead of gpufeed(1)
    #[arg(value_name = "COMMAND")]
    pub command: Option<String>,
}
