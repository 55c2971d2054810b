//! Recording: the NDJSON file format, the recorder threads, and the summary computed from a file.

pub mod format;
pub mod pyrec;
pub mod recorder;
pub mod summary;
