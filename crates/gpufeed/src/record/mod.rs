//! Recording: the NDJSON file format, its one reader (feeding any number of consumers in one
//! pass), its writer (plain or zstd), the recorder threads, and the summary computed from a file.

pub(crate) mod fast;
pub(crate) mod format;
mod parse;
mod pipeline;
pub(crate) mod pyrec;
pub(crate) mod reader;
pub(crate) mod recorder;
pub(crate) mod session;
pub(crate) mod summary;
pub(crate) mod ticker;
pub(crate) mod writer;
