//! Arguments of `gpufeed completions`.

use super::*;
use clap_complete::Shell;

#[derive(Debug, Clone, Args)]
#[command(after_help = "\
INSTALL (one of):
    gpufeed completions bash > ~/.local/share/bash-completion/completions/gpufeed
    gpufeed completions zsh  > \"${fpath[1]}/_gpufeed\"
    gpufeed completions fish > ~/.config/fish/completions/gpufeed.fish
    gpufeed completions powershell >> $PROFILE")]
pub struct CompletionsArgs {
    /// The shell to write completions for
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: Shell,
}
