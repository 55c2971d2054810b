//! Recording: the NDJSON file format, its one reader (feeding any number of consumers in one
//! pass), its writer (plain or zstd), the recorder threads, and the summary computed from a file.

pub mod fast;
pub mod format;
mod parse;
mod pipeline;
pub mod pyrec;
pub mod reader;
pub mod recorder;
pub mod summary;
pub(crate) mod ticker;
pub mod writer;
