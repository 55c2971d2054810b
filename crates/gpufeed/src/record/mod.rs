//! Recording: the NDJSON file format, the recorder threads, and the summary computed from a file.

pub mod format;
pub mod recorder;
pub mod summary;
